-- Queue $1's jobs by state: due, delayed, leased and dead. Each state is counted over the
-- range of its own partial index that holds the queue (`state >= 2` names the finished
-- jobs' index), so a small queue in a large table is counted in its own rows: counted
-- with one scan of the table filtered by state, a queue of ten jobs beside 1,300,000
-- others took 340 ms.
WITH now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms)
SELECT w.pending, w.scheduled,
       (SELECT count(*) FROM {schema}.hopper_jobs WHERE state = 1 AND queue = $1),
       (SELECT count(*) FROM {schema}.hopper_jobs
        WHERE queue = $1 AND state = 3 AND state >= 2)
FROM now, LATERAL (
    SELECT count(*) FILTER (WHERE run_at <= now.ms) AS pending,
           count(*) FILTER (WHERE run_at > now.ms) AS scheduled
    FROM {schema}.hopper_jobs
    WHERE state = 0 AND queue = $1
) AS w
