-- Ordering keys (hopper_core::job::ordering): jobs of a queue sharing a key run one at a
-- time, in enqueue order. Of a key's pending and leased jobs only one is ever claimable;
-- the others wait *blocked*, pending with `run_at` moved 2^62 ms (4611686018427387904)
-- into the future, where no claim reaches them: a `run_at` past the end of the year 9999
-- (253402300799999), the latest time a job can be given, is a blocked job's. So the
-- claim is unchanged, and a job without a key (NULL here) enters neither index below.
--
-- Nullable without a default: adding it rewrites no row.
ALTER TABLE {schema}.hopper_jobs ADD COLUMN ordering_key text COLLATE "C";

-- A key's unfinished jobs by id: whether a key has any, and which comes first.
CREATE INDEX hopper_jobs_ordering ON {schema}.hopper_jobs (queue, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state <= 1;
-- A key's unblocked unfinished jobs: at most one, its head, pending or leased.
CREATE INDEX hopper_jobs_ordering_heads ON {schema}.hopper_jobs (queue, ordering_key)
    WHERE ordering_key IS NOT NULL AND state <= 1 AND run_at <= 253402300799999;

-- Serializes everything that blocks or unblocks the jobs of the keys given (pairs of
-- queue and key; NULL keys are skipped) until the transaction ends: transaction-level
-- advisory locks, taken in one order so that two callers cannot deadlock. The two-key
-- form, with this table's name as the first key, keeps them apart from the locks of
-- other programs and other schemas; keys whose hashes collide only wait for each other.
CREATE FUNCTION {schema}.hopper_lock_lines(p_queues text[], p_keys text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    -- One statement, the locks taken row by row in the sorted order of the subquery: half
    -- the time of a loop that runs a statement per key (0.2 against 0.5 ms for 100 keys).
    PERFORM pg_advisory_xact_lock(hashtext('{schema}.hopper_jobs'), s.h)
    FROM (SELECT DISTINCT hashtext(u.q || ' ' || u.k) AS h
          FROM unnest(p_queues, p_keys) AS u(q, k)
          WHERE u.k IS NOT NULL
          ORDER BY 1) AS s;
END
$$;

-- Unblocks the next job of each key given, under the keys' locks: the key's first
-- unfinished job by id, when it is blocked and no unblocked job of the key is pending or
-- leased. Returns how many it unblocked. Run after a keyed job ends, and after keyed
-- jobs are stored blocked; it can run any time and does no harm.
--
-- PL/pgSQL for its snapshot: the update starts after the locks are taken, so it sees
-- every job a producer of these keys committed before it, blocked as it is. A single
-- statement would read a snapshot taken before it waited for the locks, and could leave
-- such a job blocked with nothing left to unblock it.
CREATE FUNCTION {schema}.hopper_unblock(p_queues text[], p_keys text[]) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    n integer;
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    UPDATE {schema}.hopper_jobs AS t
    SET run_at = t.run_at - 4611686018427387904
    FROM (SELECT DISTINCT u.q, u.k FROM unnest(p_queues, p_keys) AS u(q, k)
          WHERE u.k IS NOT NULL) AS l
    WHERE t.id = (SELECT o.id FROM {schema}.hopper_jobs AS o
                  WHERE o.queue = l.q AND o.ordering_key = l.k AND o.state <= 1
                  ORDER BY o.id
                  LIMIT 1)
      AND t.state = 0 AND t.run_at > 253402300799999
      AND NOT EXISTS (SELECT FROM {schema}.hopper_jobs AS o
                      WHERE o.queue = l.q AND o.ordering_key = l.k AND o.state <= 1
                        AND o.run_at <= 253402300799999);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- Stores a batch in which some jobs have ordering keys, in input order (ids ascend with
-- it), and returns their ids. Every keyed job goes in blocked, under its key's lock, and
-- hopper_unblock then frees the first of each key that has no other job running or
-- waiting. Taking the locks before the insert gives a key's jobs ids in the order their
-- producers committed them, so the key's order is the enqueue order across producers.
CREATE FUNCTION {schema}.hopper_enqueue_ordered(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_keys text[]
) RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    PERFORM {schema}.hopper_lock_lines(p_queues, p_keys);
    RETURN QUERY
    WITH now AS (SELECT coalesce(p_now, {schema}.hopper_now_ms()) AS ms),
    ins AS (
        INSERT INTO {schema}.hopper_jobs
            (queue, payload, priority, run_at, max_attempts, headers, created_at, ordering_key)
        SELECT u.queue, u.payload, u.priority,
               coalesce(u.run_at, now.ms + u.delay_ms)
                   + CASE WHEN u.okey IS NULL THEN 0 ELSE 4611686018427387904 END,
               u.max_attempts, u.headers::jsonb, now.ms, u.okey
        FROM unnest(p_queues, p_payloads, p_priorities, p_run_at, p_delay_ms,
                    p_max_attempts, p_headers, p_keys)
                 WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms,
                                      max_attempts, headers, okey, ord),
             now
        ORDER BY u.ord
        RETURNING id
    )
    SELECT ins.id FROM ins ORDER BY ins.id;
    PERFORM {schema}.hopper_unblock(p_queues, p_keys);
END
$$;

-- A blocked job's `run_at` lies past the range of times a job can be given. Checked
-- without a scan under the exclusive lock: the new rule only widens the old one, and
-- VALIDATE reads the table while writes go on.
ALTER TABLE {schema}.hopper_jobs
    DROP CONSTRAINT hopper_jobs_run_at,
    ADD CONSTRAINT hopper_jobs_run_at CHECK (
        run_at BETWEEN -62135596800000 AND 253402300799999
        OR ordering_key IS NOT NULL
           AND run_at BETWEEN 4611686018427387904 - 62135596800000
                          AND 4611686018427387904 + 253402300799999
    ) NOT VALID;
ALTER TABLE {schema}.hopper_jobs VALIDATE CONSTRAINT hopper_jobs_run_at;
