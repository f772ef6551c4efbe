-- Groups (`NewJob::group`, hopper_core::group): members counted as they settle, and a
-- completion job enqueued once, when the group is sealed and every member has settled.
--
-- `group_name`: the group of a member, NULL for every other job (and for one stored
-- before this column). A member is counted by the statement that ends it (state 2, 3 or
-- 4), and only then; it keeps the name so that the statements that end jobs need no
-- second write of the row. A member is unsettled while its state is 0 or 1, so a purge
-- counts only those; re-driving a dead member (retry_dead.sql) clears the name, so it is
-- not counted again. Nullable without a default: adding it rewrites no row.
ALTER TABLE {schema}.hopper_jobs ADD COLUMN group_name text COLLATE "C";

-- One row per group heard of: its counts, whether it is sealed, the completion job it was
-- sealed with (kept for the record once enqueued) and that job's id once enqueued.
-- `completion_run_at` / `completion_delay_ms`: NewJob::run_at_parts without a clock: an
-- `At` time, or a delay from when the job is enqueued (0 for `Now`). Every count changes
-- under the row's lock, in the statement that ends the member; hopper_group_fire enqueues
-- the completion job under that lock, only while `completion_id` is NULL: once.
CREATE TABLE {schema}.hopper_groups (
    name                    text COLLATE "C" PRIMARY KEY,
    members                 bigint  NOT NULL DEFAULT 0,
    succeeded               bigint  NOT NULL DEFAULT 0,
    dead                    bigint  NOT NULL DEFAULT 0,
    cancelled               bigint  NOT NULL DEFAULT 0,
    sealed                  boolean NOT NULL DEFAULT false,
    completion_queue        text,
    completion_payload      bytea,
    completion_priority     integer,
    completion_run_at       bigint,
    completion_delay_ms     bigint,
    completion_max_attempts integer,
    completion_headers      jsonb,
    completion_ordering_key text,
    completion_id           bigint
);
-- Sealed groups still without their completion job: what the sweep reads.
CREATE INDEX hopper_groups_unfired ON {schema}.hopper_groups (name)
    WHERE sealed AND completion_id IS NULL;

-- The members that died, in the order they did (`seq`): GroupStatus::dead. A row per
-- death, so that one costs an insert however many died before it.
CREATE TABLE {schema}.hopper_group_dead (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_name text COLLATE "C" NOT NULL,
    job_id     bigint NOT NULL
);
CREATE INDEX hopper_group_dead_by_group ON {schema}.hopper_group_dead (group_name, seq);

-- Enqueues group `p_name`'s completion job, stamped with its outcome (the headers of
-- hopper_core::group::GroupOutcome::stamp), when it is sealed, has no member unsettled
-- and has none yet; under the group's row lock, so once. `p_now`: the broker's clock, or
-- NULL for the database's. Wakes the workers on `p_channel` when it enqueued. Returns
-- whether it did.
CREATE FUNCTION {schema}.hopper_group_fire(p_name text, p_now bigint, p_channel text)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    g {schema}.hopper_groups%ROWTYPE;
    new_id bigint;
BEGIN
    SELECT * INTO g FROM {schema}.hopper_groups WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR NOT g.sealed OR g.completion_id IS NOT NULL
       OR g.members > g.succeeded + g.dead + g.cancelled THEN
        RETURN false;
    END IF;
    SELECT e INTO new_id
    FROM {schema}.hopper_enqueue_ordered(
        ARRAY[g.completion_queue], ARRAY[g.completion_payload], ARRAY[g.completion_priority],
        ARRAY[g.completion_run_at], ARRAY[coalesce(g.completion_delay_ms, 0)],
        ARRAY[g.completion_max_attempts],
        ARRAY[(coalesce(g.completion_headers, '{}'::jsonb) || jsonb_build_object(
            'hopper-group', g.name,
            'hopper-group-members', g.members::text,
            'hopper-group-succeeded', g.succeeded::text,
            'hopper-group-dead', g.dead::text,
            'hopper-group-cancelled', g.cancelled::text))::text],
        p_now, ARRAY[g.completion_ordering_key]) AS e;
    UPDATE {schema}.hopper_groups SET completion_id = new_id WHERE name = p_name;
    IF p_channel IS NOT NULL THEN
        PERFORM pg_notify(p_channel, '');
    END IF;
    RETURN true;
END
$$;

-- Counts members that ended (`p_states`: 2 completed, 3 dead, 4 cancelled or purged; ids
-- in `p_ids`, in the order they ended; NULL names are skipped), group by group in name
-- order (the order every caller locks groups in), and enqueues the completion job of each
-- group this leaves sealed with nothing unsettled. Called by the very statement that ends
-- the members, so a member is counted if and only if its end commits. Returns how many
-- completion jobs it enqueued.
CREATE FUNCTION {schema}.hopper_group_count(
    p_names text[], p_states smallint[], p_ids bigint[], p_now bigint, p_channel text
) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    c record;
    due boolean;
    fired integer := 0;
BEGIN
    FOR c IN
        SELECT u.n COLLATE "C" AS n,
               count(*) FILTER (WHERE u.s = 2) AS s,
               count(*) FILTER (WHERE u.s = 3) AS d,
               count(*) FILTER (WHERE u.s = 4) AS x
        FROM unnest(p_names, p_states) AS u(n, s)
        WHERE u.n IS NOT NULL
        GROUP BY 1
        ORDER BY 1
    LOOP
        UPDATE {schema}.hopper_groups
        SET succeeded = succeeded + c.s, dead = dead + c.d, cancelled = cancelled + c.x
        WHERE name = c.n
        RETURNING sealed AND completion_id IS NULL
                  AND members <= succeeded + dead + cancelled
        INTO due;
        -- No row: a name only another program could have written.
        CONTINUE WHEN NOT FOUND;
        IF c.d > 0 THEN
            INSERT INTO {schema}.hopper_group_dead (group_name, job_id)
            SELECT c.n, u.i
            FROM unnest(p_names, p_states, p_ids) WITH ORDINALITY AS u(n, s, i, o)
            WHERE u.n = c.n AND u.s = 3
            ORDER BY u.o;
        END IF;
        IF due AND {schema}.hopper_group_fire(c.n, p_now, p_channel) THEN
            fired := fired + 1;
        END IF;
    END LOOP;
    RETURN fired;
END
$$;

-- Seals group `p_name` with its completion job (NewJob's columns, as enqueue.sql takes
-- them), enqueueing it at once when nothing is unsettled. Returns false, changing nothing,
-- when the group is sealed already.
CREATE FUNCTION {schema}.hopper_group_seal(
    p_name text, p_queue text, p_payload bytea, p_priority integer, p_run_at bigint,
    p_delay_ms bigint, p_max_attempts integer, p_headers text, p_key text, p_now bigint,
    p_channel text
) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    was boolean;
BEGIN
    INSERT INTO {schema}.hopper_groups (name) VALUES (p_name) ON CONFLICT DO NOTHING;
    SELECT sealed INTO was FROM {schema}.hopper_groups WHERE name = p_name FOR UPDATE;
    IF was THEN
        RETURN false;
    END IF;
    UPDATE {schema}.hopper_groups
    SET sealed = true, completion_queue = p_queue, completion_payload = p_payload,
        completion_priority = p_priority, completion_run_at = p_run_at,
        completion_delay_ms = p_delay_ms, completion_max_attempts = p_max_attempts,
        completion_headers = p_headers::jsonb, completion_ordering_key = p_key
    WHERE name = p_name;
    PERFORM {schema}.hopper_group_fire(p_name, p_now, p_channel);
    RETURN true;
END
$$;

-- Stores a batch in which some jobs are members of groups (`p_groups`; NULL for a job of
-- none), in input order, as hopper_enqueue_ordered does (`p_keys`: ordering keys), and
-- counts them. The groups' rows are made and locked in name order first; when one is
-- sealed the whole batch is refused, storing nothing (a subtransaction undoes the rows
-- made): one row with `o_refused` naming it. Otherwise the ids, in input order.
CREATE FUNCTION {schema}.hopper_enqueue_group(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_keys text[], p_groups text[]
) RETURNS TABLE (o_id bigint, o_refused text)
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    r record;
    refused text;
BEGIN
    BEGIN
        INSERT INTO {schema}.hopper_groups (name)
        SELECT DISTINCT u.g COLLATE "C" FROM unnest(p_groups) AS u(g)
        WHERE u.g IS NOT NULL ORDER BY 1
        ON CONFLICT DO NOTHING;
        FOR r IN
            SELECT name, sealed FROM {schema}.hopper_groups
            WHERE name = ANY (p_groups) ORDER BY name FOR UPDATE
        LOOP
            IF r.sealed AND refused IS NULL THEN
                refused := r.name;
            END IF;
        END LOOP;
        IF refused IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HG001';
        END IF;
    EXCEPTION WHEN SQLSTATE 'HG001' THEN
        RETURN QUERY SELECT NULL::bigint, refused;
        RETURN;
    END;
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    RETURN QUERY
    WITH now AS (SELECT coalesce(p_now, {schema}.hopper_now_ms()) AS ms),
    ins AS (
        INSERT INTO {schema}.hopper_jobs
            (queue, payload, priority, run_at, max_attempts, headers, created_at,
             ordering_key, group_name)
        SELECT u.queue, u.payload, u.priority,
               coalesce(u.run_at, now.ms + u.delay_ms)
                   + CASE WHEN u.okey IS NULL THEN 0 ELSE 4611686018427387904 END,
               u.max_attempts, u.headers::jsonb, now.ms, u.okey, u.grp
        FROM unnest(p_queues, p_payloads, p_priorities, p_run_at, p_delay_ms,
                    p_max_attempts, p_headers, p_keys, p_groups)
                 WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms,
                                      max_attempts, headers, okey, grp, ord),
             now
        ORDER BY u.ord
        RETURNING id
    )
    SELECT ins.id, NULL::text FROM ins ORDER BY ins.id;
    UPDATE {schema}.hopper_groups AS g
    SET members = g.members + m.n
    FROM (SELECT u.g COLLATE "C" AS g, count(*) AS n FROM unnest(p_groups) AS u(g)
          WHERE u.g IS NOT NULL GROUP BY 1) AS m
    WHERE g.name = m.g;
    PERFORM {schema}.hopper_unblock(p_queues, p_keys);
END
$$;

-- Enqueues the completion jobs of up to `p_limit` sealed groups left with nothing
-- unsettled and no completion job, as a process that died mid-call could leave them (none
-- should: each count fires in its own statement). Returns how many it enqueued.
CREATE FUNCTION {schema}.hopper_group_sweep(p_limit bigint, p_now bigint, p_channel text)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    n text;
    fired integer := 0;
BEGIN
    FOR n IN
        SELECT name FROM {schema}.hopper_groups
        WHERE sealed AND completion_id IS NULL AND members <= succeeded + dead + cancelled
        ORDER BY name
        LIMIT p_limit
    LOOP
        IF {schema}.hopper_group_fire(n, p_now, p_channel) THEN
            fired := fired + 1;
        END IF;
    END LOOP;
    RETURN fired;
END
$$;
