-- Failed jobs of an ordering key that step aside for their retry (hopper_core's
-- `Outcome::Retry { step_aside: true, .. }`, from `QueueOptions::retries_hold_key(false)`):
-- the key's next jobs run while the failed job waits, one at a time, and the failed job
-- runs again once its time has come and the job of its key running then has ended.
--
-- A job that stepped aside is blocked like any waiting job, and told from the others
-- without a column of its own: it is the only blocked job with an attempt charged, since
-- an enqueue stores jobs with none and a re-drive puts dead letters back with none.
--
-- hopper_unblock takes the time to judge "its time has come" by (NULL: the server's), so
-- a broker on a test clock passes its own, and a settlement the time it retried the job. Its old two-argument form is dropped first, so
-- that callers with two arguments reach this one rather than find two that fit.
DROP FUNCTION {schema}.hopper_unblock(text[], text[]);

-- Unblocks the next job of each key given, under the keys' locks, and returns how many it
-- unblocked, when no unblocked job of the key is pending or leased (as in 0013). The next
-- job is the key's first blocked job by id that is not a stepped-aside one still waiting
-- for its time; when every blocked job is such, the one due first. The second subquery
-- runs only then: without stepped-aside jobs each key costs the one probe of
-- hopper_jobs_blocked it did, plus a read of the row it finds.
CREATE FUNCTION {schema}.hopper_unblock(p_queues text[], p_keys text[], p_now bigint DEFAULT NULL)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    now_ms bigint := coalesce(p_now, {schema}.hopper_now_ms());
    firsts bigint[];
    n integer;
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    SELECT array_agg(f.first) INTO firsts
    FROM (SELECT coalesce(
                     (SELECT b.id FROM {schema}.hopper_jobs AS b
                      WHERE b.queue = l.q AND b.ordering_key = l.k
                        AND b.state = 0 AND b.run_at > 253402300799999
                        AND NOT (b.attempt > 0
                                 AND b.run_at - 4611686018427387904 > now_ms)
                      ORDER BY b.id
                      LIMIT 1),
                     (SELECT b.id FROM {schema}.hopper_jobs AS b
                      WHERE b.queue = l.q AND b.ordering_key = l.k
                        AND b.state = 0 AND b.run_at > 253402300799999
                      ORDER BY b.run_at, b.id
                      LIMIT 1)) AS first
          FROM (SELECT DISTINCT u.q, u.k FROM unnest(p_queues, p_keys) AS u(q, k)
                WHERE u.k IS NOT NULL) AS l) AS f
    WHERE f.first IS NOT NULL;
    IF firsts IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE {schema}.hopper_jobs AS t
    SET run_at = t.run_at - 4611686018427387904
    WHERE t.id = ANY (firsts)
      AND t.state + 0 = 0 AND t.run_at + 0 > 253402300799999
      AND NOT EXISTS (SELECT FROM {schema}.hopper_jobs AS o
                      WHERE o.queue = t.queue AND o.ordering_key = t.ordering_key
                        AND o.state <= 1 AND o.run_at <= 253402300799999);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- What a settlement does to its keys, from its own statement (settle.sql): the keys of the
-- jobs it ended (p_queues, p_keys) move on, and the jobs it retried stepping aside
-- (p_aside, each pending again at its retry time) step aside. Returns how many jobs it
-- unblocked. Every key, of both kinds, is locked in one call, in the one order every caller
-- takes them, so that a settlement that ends a job of one key and steps a job of another
-- aside never holds one while it waits for the other against an enqueue taking both.
-- A job stepping aside whose key has another unfinished job (all blocked behind it, as it
-- was the key's head) is blocked too, and hopper_unblock then lets each key's next job go:
-- for a key stepped aside, it may be the job itself when nothing else is due sooner. A job
-- alone on its key keeps it. The keys of the jobs stepping aside are read before the locks:
-- a job's key never changes.
CREATE FUNCTION {schema}.hopper_settle_lines(
    p_queues text[], p_keys text[], p_aside bigint[], p_now bigint
) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    queues text[] := coalesce(p_queues, '{}');
    keys text[] := coalesce(p_keys, '{}');
    aside_queues text[];
    aside_keys text[];
BEGIN
    IF p_aside IS NOT NULL THEN
        SELECT array_agg(j.queue), array_agg(j.ordering_key) INTO aside_queues, aside_keys
        FROM {schema}.hopper_jobs AS j
        WHERE j.id = ANY (p_aside) AND j.ordering_key IS NOT NULL;
        queues := queues || coalesce(aside_queues, '{}');
        keys := keys || coalesce(aside_keys, '{}');
    END IF;
    IF cardinality(keys) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM {schema}.hopper_lock_lines(queues, keys);
    IF aside_keys IS NOT NULL THEN
        UPDATE {schema}.hopper_jobs AS t
        SET run_at = t.run_at + 4611686018427387904
        WHERE t.id = ANY (p_aside) AND t.ordering_key IS NOT NULL
          AND t.state + 0 = 0 AND t.run_at + 0 <= 253402300799999
          AND EXISTS (SELECT FROM {schema}.hopper_jobs AS o
                      WHERE o.queue = t.queue AND o.ordering_key = t.ordering_key
                        AND o.ordering_key IS NOT NULL AND o.state <= 1 AND o.id <> t.id);
    END IF;
    RETURN {schema}.hopper_unblock(queues, keys, p_now);
END
$$;

-- A batch with unique keys and ordering keys, one job possibly having both
-- (enqueue_unique_ordered.sql): enqueue_unique.sql's statement, under the ordering keys'
-- locks as hopper_enqueue_ordered takes them, in which a stored job with an ordering key
-- goes in blocked behind its key's unfinished jobs and the batch's earlier stored jobs of
-- the key. A job not stored (its unique key held) takes no place on its ordering key, so
-- the key's next job of the batch does not wait behind a job that does not exist. Returns
-- each sent job's id, its unique key's holder (NULL without a key) and its place.
CREATE FUNCTION {schema}.hopper_enqueue_unique_ordered(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_okeys text[], p_ukeys text[], p_scopes smallint[], p_periods bigint[],
    p_rate_keys text[]
) RETURNS TABLE (id bigint, holder bigint, ord bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
DECLARE
    ids bigint[];
    holders bigint[];
    ords bigint[];
    blocked_queues text[];
    blocked_keys text[];
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_okeys);
    WITH now AS (SELECT coalesce(p_now, {schema}.hopper_now_ms()) AS ms),
    u AS MATERIALIZED (
        SELECT u.*, nextval('{schema}.hopper_jobs_id_seq'::regclass) AS id
        FROM unnest(p_queues, p_payloads, p_priorities, p_run_at, p_delay_ms, p_max_attempts,
                    p_headers, p_ukeys, p_scopes, p_periods, p_rate_keys, p_okeys)
                 WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms,
                                      max_attempts, headers, key, scope, period, rate_key,
                                      okey, ord)
        ORDER BY u.ord
    ),
    taken AS (
        INSERT INTO {schema}.hopper_unique AS h (queue, key, job_id, scope, until)
        SELECT u.queue, u.key, u.id, u.scope, now.ms + u.period
        FROM u, now
        WHERE u.key IS NOT NULL
        ORDER BY u.queue COLLATE "C", u.key COLLATE "C"
        ON CONFLICT (queue, key) DO UPDATE
        SET (job_id, scope, until) = (
            SELECT CASE WHEN s.stands THEN h.job_id ELSE excluded.job_id END,
                   CASE WHEN s.stands THEN h.scope ELSE excluded.scope END,
                   CASE WHEN s.stands THEN h.until ELSE excluded.until END
            FROM (SELECT {schema}.hopper_unique_holds(h.job_id, h.scope, h.until, now.ms)
                             AS stands
                  FROM now) AS s
        )
        RETURNING h.queue, h.key, h.job_id
    ),
    stored AS (
        SELECT u.*, row_number() OVER (PARTITION BY u.queue, u.okey ORDER BY u.ord) AS nth
        FROM u
        WHERE u.key IS NULL OR u.id IN (SELECT job_id FROM taken)
    ),
    ins AS (
        INSERT INTO {schema}.hopper_jobs
            (id, queue, payload, priority, run_at, max_attempts, headers, created_at,
             unique_key, rate_key, ordering_key)
        SELECT s.id, s.queue, s.payload, s.priority,
               coalesce(s.run_at, now.ms + s.delay_ms)
                   + CASE WHEN s.okey IS NULL THEN 0
                          WHEN s.nth = 1 AND NOT EXISTS (
                              SELECT FROM {schema}.hopper_jobs AS o
                              WHERE o.queue = s.queue AND o.ordering_key = s.okey
                                AND o.state <= 1) THEN 0
                          ELSE 4611686018427387904 END,
               s.max_attempts, s.headers::jsonb, now.ms, s.key, s.rate_key, s.okey
        FROM stored AS s, now
        ORDER BY s.ord
        RETURNING queue, ordering_key, run_at > 253402300799999 AS blocked
    )
    SELECT array_agg(u.id ORDER BY u.ord), array_agg(taken.job_id ORDER BY u.ord),
           array_agg(u.ord ORDER BY u.ord),
           (SELECT array_agg(ins.queue) FILTER (WHERE ins.blocked) FROM ins),
           (SELECT array_agg(ins.ordering_key) FILTER (WHERE ins.blocked) FROM ins)
    INTO ids, holders, ords, blocked_queues, blocked_keys
    FROM u LEFT JOIN taken ON taken.queue = u.queue AND taken.key = u.key;
    RETURN QUERY SELECT * FROM unnest(ids, holders, ords);
    IF blocked_keys IS NOT NULL THEN
        PERFORM {schema}.hopper_unblock(blocked_queues, blocked_keys, p_now);
    END IF;
END
$$;
