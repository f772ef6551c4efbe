-- Cheaper ordering keys where keys are seldom shared (one per customer or document).
--
-- A keyed job that is its key's only unfinished job is stored unblocked, as the head it
-- is, rather than blocked and then unblocked by hopper_unblock: one write of the row, not
-- two. With a key per job that halves the rows written at enqueue, and the enqueue's
-- share of the server's time.
--
-- The insert runs after the keys' locks are taken, in a statement of its own, so its
-- snapshot holds every job of these keys that a producer or settlement committed before:
-- "no unfinished job of the key" is what hopper_unblock would also find, and a batch's
-- later jobs of the key go in blocked behind its first. hopper_unblock still runs for the
-- keys stored blocked, which frees nothing unless a key was left with blocked jobs only.
CREATE OR REPLACE FUNCTION {schema}.hopper_enqueue_ordered(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_keys text[]
) RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    ids bigint[];
    blocked_queues text[];
    blocked_keys text[];
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    WITH now AS (SELECT coalesce(p_now, {schema}.hopper_now_ms()) AS ms),
    u AS (
        SELECT u.*, row_number() OVER (PARTITION BY u.queue, u.okey ORDER BY u.ord) AS nth
        FROM unnest(p_queues, p_payloads, p_priorities, p_run_at, p_delay_ms,
                    p_max_attempts, p_headers, p_keys)
                 WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms,
                                      max_attempts, headers, okey, ord)
    ),
    ins AS (
        INSERT INTO {schema}.hopper_jobs
            (queue, payload, priority, run_at, max_attempts, headers, created_at, ordering_key)
        SELECT u.queue, u.payload, u.priority,
               coalesce(u.run_at, now.ms + u.delay_ms)
                   + CASE WHEN u.okey IS NULL THEN 0
                          WHEN u.nth = 1 AND NOT EXISTS (
                              SELECT FROM {schema}.hopper_jobs AS o
                              WHERE o.queue = u.queue AND o.ordering_key = u.okey
                                AND o.state <= 1) THEN 0
                          ELSE 4611686018427387904 END,
               u.max_attempts, u.headers::jsonb, now.ms, u.okey
        FROM u, now
        ORDER BY u.ord
        RETURNING id, queue, ordering_key, run_at > 253402300799999 AS blocked
    )
    SELECT array_agg(ins.id ORDER BY ins.id),
           array_agg(ins.queue) FILTER (WHERE ins.blocked),
           array_agg(ins.ordering_key) FILTER (WHERE ins.blocked)
    INTO ids, blocked_queues, blocked_keys
    FROM ins;
    RETURN QUERY SELECT unnest(ids);
    IF blocked_keys IS NOT NULL THEN
        PERFORM {schema}.hopper_unblock(blocked_queues, blocked_keys);
    END IF;
END
$$;

-- The blocked jobs of each key, by id: what hopper_unblock looks for first. Where keys are
-- seldom shared it is empty, or nearly, so that a settlement's unblock of a key with
-- nothing waiting costs one probe of an empty index; before it, each such key cost two
-- probes of the unfinished jobs' index, both landing on the entry of the job just ended,
-- whose row had to be read to learn it was gone.
CREATE INDEX hopper_jobs_blocked ON {schema}.hopper_jobs (queue, ordering_key, id)
    WHERE state = 0 AND run_at > 253402300799999;

-- As in 0010_ordering_keys.sql: unblocks the next job of each key given, under the keys'
-- locks, and returns how many it unblocked. The key's first blocked job by id goes when no
-- unblocked job of the key is pending or leased: the same job as "the key's first
-- unfinished job, when it is blocked", since an earlier unfinished job would be unblocked
-- and fail the second test. Two statements, each with a snapshot taken after the locks:
-- the first finds each key's first blocked job, and when no key has one (a settlement's
-- usual case where keys are seldom shared) the call ends there; the second reaches the
-- jobs found by their ids. Its tests of state and time are written `+ 0` so that they do
-- not match hopper_jobs_blocked's predicate: statistics taken while few jobs were blocked
-- made the planner walk that whole index, filtering by id, for every call (30 to 70 ms a
-- call with 20,000 jobs over 1,000 keys, growing with the backlog).
CREATE OR REPLACE FUNCTION {schema}.hopper_unblock(p_queues text[], p_keys text[])
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    firsts bigint[];
    n integer;
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    SELECT array_agg(f.first) INTO firsts
    FROM (SELECT (SELECT b.id FROM {schema}.hopper_jobs AS b
                  WHERE b.queue = l.q AND b.ordering_key = l.k
                    AND b.state = 0 AND b.run_at > 253402300799999
                  ORDER BY b.id
                  LIMIT 1) AS first
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
