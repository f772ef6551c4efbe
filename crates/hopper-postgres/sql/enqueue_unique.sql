-- A batch in which some jobs have unique keys (hopper_core::UniqueKey); a batch without
-- any goes through enqueue.sql, which never reads hopper_unique. The parameters are
-- enqueue.sql's, then per job its key, scope code and period in ms ($10 to $12, NULL
-- without a key), then its rate key ($13, NULL without one; the whole array NULL when no
-- job has one). Each key comes once: a later job of the batch with the same queue and
-- key was answered by the broker, not sent.
--
-- `u`: each job draws its id up front, in input order, so that ids ascend in input order
-- as enqueue.sql's do, and so that a key can name its job before the job is stored.
--
-- `taken`: each key is inserted, in the order of the table's primary key, so that
-- producers racing on the same keys lock them in one order and never wait on each other
-- in a cycle. A key already there is locked (after its producer commits, when it has not
-- yet) and taken over only when its hold no longer stands: hopper_unique_holds, called
-- once per key, reads the holder's row with a snapshot taken after the lock, so it sees a
-- holder stored by a producer that committed while this statement ran (see 0007). A hold
-- that stands is written back unchanged, so that RETURNING names the holder either way.
--
-- `ins`: the jobs without a key and those that took theirs, each with its key in
-- `unique_key` (NULL without one) for its record to show after the hold ends (see 0009).
-- A job whose key is held is never stored, and its id stays unused.
--
-- The result, per job in input order: its id, and the job now holding its key (NULL
-- without a key). It was stored unless the holder is another job. Workers are woken only
-- when a job was stored.
WITH now AS (SELECT coalesce($8::bigint, {schema}.hopper_now_ms()) AS ms),
u AS MATERIALIZED (
    SELECT u.*, nextval('{schema}.hopper_jobs_id_seq'::regclass) AS id
    FROM unnest($1::text[], $2::bytea[], $3::int[], $4::bigint[], $5::bigint[], $6::int[],
                $7::text[], $10::text[], $11::smallint[], $12::bigint[], $13::text[])
             WITH ORDINALITY AS u(queue, payload, priority, run_at, delay_ms, max_attempts,
                                  headers, key, scope, period, rate_key, ord)
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
        FROM (SELECT {schema}.hopper_unique_holds(h.job_id, h.scope, h.until, now.ms) AS stands
              FROM now) AS s
    )
    RETURNING h.queue, h.key, h.job_id
),
ins AS (
    INSERT INTO {schema}.hopper_jobs
        (id, queue, payload, priority, run_at, max_attempts, headers, created_at, unique_key,
         rate_key)
    SELECT u.id, u.queue, u.payload, u.priority,
           coalesce(u.run_at, now.ms + u.delay_ms), u.max_attempts, u.headers::jsonb, now.ms,
           u.key, u.rate_key
    FROM u, now
    WHERE u.key IS NULL OR u.id IN (SELECT job_id FROM taken)
    ORDER BY u.ord
)
SELECT u.id, taken.job_id AS holder
FROM u
     LEFT JOIN taken ON taken.queue = u.queue AND taken.key = u.key,
     (SELECT CASE WHEN EXISTS (SELECT FROM u WHERE u.key IS NULL)
                    OR EXISTS (SELECT FROM taken JOIN u ON u.id = taken.job_id)
                  THEN pg_notify($9, '') END) AS wake
ORDER BY u.ord
