-- Rate limits per key (hopper_core::RateLimit::per_key, NewJob::rate_key): a window for
-- each rate key of a limited queue's jobs instead of one for the queue; jobs without a key
-- share the window of the empty key.
--
-- A job's rate key. Nullable without a default: adding it rewrites no row.
ALTER TABLE {schema}.hopper_jobs ADD COLUMN rate_key text COLLATE "C";

-- Whether the queue's limit holds per key, and when its claims last dropped idle key
-- windows.
ALTER TABLE {schema}.hopper_rate_limits
    ADD COLUMN per_key boolean NOT NULL DEFAULT false,
    ADD COLUMN swept_at bigint NOT NULL DEFAULT 0;

-- Each key's window as the queue's is kept (0011_rate_limits.sql: start times and counts,
-- in slots of per/256), and the latest time a claim gave a job of the key held back by
-- the full window, with how many jobs it gave it to (hopper_core::rate::Window::defer),
-- which the sweep respects; each claim spreads the jobs it holds back afresh.
CREATE TABLE {schema}.hopper_rate_keys (
    queue     text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    start_at  bigint[] NOT NULL DEFAULT '{}',
    start_n   integer[] NOT NULL DEFAULT '{}',
    booked_at bigint,
    booked_n  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
);

-- As in 0011_rate_limits.sql, except that a queue limited per key answers a room of -1:
-- the claim statement takes none of its jobs and names it, and the broker claims it with
-- hopper_rate_claim_keyed.
CREATE OR REPLACE FUNCTION {schema}.hopper_rate_take(p_queues text[], p_now bigint)
    RETURNS TABLE (queue text, room bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT l.queue, CASE WHEN l.per_key THEN -1 ELSE greatest(w.max - w.used, 0) END
    FROM (
        SELECT r.queue, r.max, r.per_ms, r.start_at, r.start_n, r.per_key
        FROM {schema}.hopper_rate_limits AS r
        WHERE r.queue = ANY (p_queues)
        ORDER BY r.queue
        FOR UPDATE
    ) AS l
    CROSS JOIN LATERAL {schema}.hopper_rate_window(
        l.max, l.per_ms, l.start_at, l.start_n, p_now, 0) AS w;
END
$$;

-- Claims up to p_n due jobs of a queue limited per key, under p_lease until p_now +
-- p_ttl, and returns them as claim.sql does, then one row with a NULL id whose run_at is
-- the earliest time it gave a job it moved (NULL when none; claim.sql gives the others'). The queue's limits row, locked first, makes
-- every claim of the queue wait for the one before, in any process. Each candidate, in
-- claim order, is claimed when its key's window has room and its start recorded there;
-- otherwise it is moved to the time that window has room for it: the window's next room
-- for the first `max` this call moves there, a period later for the next `max`, and so
-- on, so that
-- no claim reads it again before it may start. At most 4,096 jobs are moved per call.
-- Once a period, windows with no start within it and no time given ahead are dropped.
CREATE FUNCTION {schema}.hopper_rate_claim_keyed(
    p_queue text, p_n integer, p_now bigint, p_lease bigint, p_ttl bigint
) RETURNS TABLE (id bigint, queue text, payload bytea, priority integer, run_at bigint,
                 attempt integer, max_attempts integer, headers text, created_at bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(p_now, {schema}.hopper_now_ms());
    lim record;
    j record;
    k record;
    w record;
    took integer := 0;
    moved integer := 0;
    earliest bigint;
    slot bigint;
    slot_n integer;
    next_at bigint;
    touched text[] := '{}';
BEGIN
    SELECT * INTO lim FROM {schema}.hopper_rate_limits AS r
    WHERE r.queue = p_queue AND r.per_key
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF now_ms - lim.swept_at >= lim.per_ms THEN
        DELETE FROM {schema}.hopper_rate_keys AS x
        WHERE x.queue = p_queue
          AND coalesce(x.start_at[cardinality(x.start_at)], 0) <= now_ms - lim.per_ms
          AND coalesce(x.booked_at, 0) <= now_ms;
        UPDATE {schema}.hopper_rate_limits AS r SET swept_at = now_ms WHERE r.queue = p_queue;
    END IF;
    FOR j IN
        SELECT t.id, coalesce(t.rate_key, '') AS key
        FROM {schema}.hopper_jobs AS t
        WHERE t.state = 0 AND t.queue = p_queue AND t.run_at <= now_ms
        ORDER BY t.priority DESC, t.run_at, t.id
        LIMIT p_n + 4096
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN took >= p_n OR moved >= 4096;
        SELECT * INTO k FROM {schema}.hopper_rate_keys AS x
        WHERE x.queue = p_queue AND x.key = j.key;
        IF NOT FOUND THEN
            INSERT INTO {schema}.hopper_rate_keys (queue, key) VALUES (p_queue, j.key)
            RETURNING * INTO k;
        END IF;
        -- Each call spreads the jobs it holds back afresh: one held back again goes to the
        -- next room, not behind those an earlier call spread ahead of it.
        IF NOT j.key = ANY (touched) THEN
            touched := touched || j.key;
            IF k.booked_at IS NOT NULL THEN
                UPDATE {schema}.hopper_rate_keys AS x SET booked_at = NULL, booked_n = 0
                WHERE x.queue = p_queue AND x.key = j.key;
                k.booked_at := NULL;
            END IF;
        END IF;
        SELECT * INTO w FROM {schema}.hopper_rate_window(
            lim.max, lim.per_ms, k.start_at, k.start_n, now_ms, 0) AS x;
        IF w.used < w.max THEN
            SELECT * INTO w FROM {schema}.hopper_rate_window(
                lim.max, lim.per_ms, k.start_at, k.start_n, now_ms, 1) AS x;
            UPDATE {schema}.hopper_rate_keys AS x SET start_at = w.at, start_n = w.n
            WHERE x.queue = p_queue AND x.key = j.key;
            took := took + 1;
            RETURN QUERY
            UPDATE {schema}.hopper_jobs AS t
            SET state = 1, lease_id = p_lease, lease_expires = now_ms + p_ttl,
                started_at = now_ms, attempt = t.attempt + 1
            WHERE t.id = j.id
            RETURNING t.id, t.queue, t.payload, t.priority, t.run_at, t.attempt,
                      t.max_attempts, t.headers::text, t.created_at;
        ELSE
            -- When enough of the oldest starts leave the window for one more.
            SELECT p.t + w.per_ms INTO earliest
            FROM (SELECT u.t, u.i, sum(u.c) OVER (ORDER BY u.i) AS gone
                  FROM unnest(w.at, w.n) WITH ORDINALITY AS u(t, c, i)) AS p
            WHERE w.used - p.gone < w.max
            ORDER BY p.i
            LIMIT 1;
            earliest := greatest(coalesce(earliest, now_ms), now_ms + 1);
            IF k.booked_at IS NOT NULL AND k.booked_at >= earliest THEN
                IF k.booked_n < lim.max THEN
                    slot := k.booked_at;
                    slot_n := k.booked_n + 1;
                ELSE
                    slot := k.booked_at + lim.per_ms;
                    slot_n := 1;
                END IF;
            ELSE
                slot := earliest;
                slot_n := 1;
            END IF;
            slot := least(slot, 253402300799999);
            UPDATE {schema}.hopper_rate_keys AS x SET booked_at = slot, booked_n = slot_n
            WHERE x.queue = p_queue AND x.key = j.key;
            UPDATE {schema}.hopper_jobs AS t SET run_at = slot WHERE t.id = j.id;
            next_at := least(next_at, slot);
            moved := moved + 1;
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT NULL::bigint, p_queue, NULL::bytea, NULL::integer, next_at,
           NULL::integer, NULL::integer, NULL::text, NULL::bigint;
END
$$;
