-- One fetch, one statement: the claim itself, and with it what an idle worker would
-- otherwise ask in statements of their own, so a backstop poll costs one round trip.
--
-- `reaped` (only when $6, at most once a second per broker): jobs of expired leases go
-- back to pending, or to the dead letters on their final attempt, with its error added to
-- their history as settle.sql adds it, keeping the latest $8. It touches leased rows
-- and the claim pending ones, so the two never update the same row; a job reaped here is
-- claimed by the next fetch (the broker wakes its workers for it).
--
-- The result is the claimed jobs (kind 0), then one row of kind 1 carrying the earliest
-- run_at of a delayed job when fewer than $7 jobs were claimed, then one row of kind 2
-- carrying how many jobs the reaper returned to pending, when there were any, then a row
-- of kind 3 for each job with an ordering key the reaper dead-lettered: its queue and key,
-- whose next job the broker then unblocks (a row of kind 2 also when the reaper's dead
-- letters completed a group, see `grouped`), then the rows of kinds 4 and 6 about rate
-- limits (below). Jobs blocked behind their key (`run_at` past the year 9999, see
-- 0010_ordering_keys.sql) are never due, nor a delayed job's due time.
--
-- `levels`: each queue's priority levels among its pending jobs, highest first, one index
-- descent each (a loose index scan). The claim and the next-due time read each level as a
-- range of `run_at`, so they never walk over jobs delayed into the future: with 200,000
-- delayed jobs and none due, a claim read all of them twice (34 ms per poll). A paused
-- queue (hopper_paused) has no levels: nothing is claimed from it and no due time given,
-- for one probe of that small table's key per queue asked.
--
-- Rate limits (0011_rate_limits.sql): when one of the queues asked has a limit (one probe
-- of that table's key per queue), `windows` calls hopper_rate_take, which locks the
-- limited queues' rows until the claim commits and gives each one's room, and `budgets`
-- cuts each queue's budget to it; once the jobs are claimed, hopper_rate_record adds the
-- claim's starts to those windows, `now` being the `started_at` they get. A claim waiting
-- for a window's lock reads it as the claim before it left it, and the jobs that claim
-- took are no longer pending when this one locks them, so claimers in any number of
-- processes take no more than the window allows between them. A claim of queues without
-- a limit runs neither function. hopper_rate_record returns rows of kind 6 carrying the
-- time a full window that cut a budget has room again (the broker takes the earliest of
-- them and kind 1 as the next due time), and of kind 4 naming a queue whose limit or
-- window another program stored wrong, and what is wrong, which the broker logs: the
-- claim reads it as the nearest good one and goes on.
WITH RECURSIVE now AS (SELECT coalesce($3::bigint, {schema}.hopper_now_ms()) AS ms),
levels (queue, priority) AS (
    SELECT b.queue,
           (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = b.queue)
    FROM (SELECT DISTINCT queue FROM unnest($1::text[]) AS u(queue)) AS b
    WHERE NOT EXISTS (SELECT FROM {schema}.hopper_paused AS p WHERE p.queue = b.queue)
    UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = l.queue AND priority < l.priority)
    FROM levels AS l
    WHERE l.priority IS NOT NULL
),
reaped AS (
    UPDATE {schema}.hopper_jobs AS t
    SET state = CASE WHEN t.attempt >= t.max_attempts THEN 3 ELSE 0 END,
        last_error = CASE WHEN t.attempt >= t.max_attempts
                          THEN 'lease expired on the final attempt' ELSE t.last_error END,
        errors = CASE WHEN t.attempt >= t.max_attempts THEN jsonb_path_query_array(
            CASE jsonb_typeof(t.errors) WHEN 'array' THEN t.errors ELSE '[]'::jsonb END
                || jsonb_build_array(jsonb_build_object(
                       'attempt', t.attempt, 'at', now.ms,
                       'error', 'lease expired on the final attempt')),
            '$[last - $keep + 1 to last]', jsonb_build_object('keep', $8::int)
        ) ELSE t.errors END,
        finished_at = CASE WHEN t.attempt >= t.max_attempts THEN now.ms END,
        lease_id = NULL,
        lease_expires = NULL
    FROM (
        SELECT id FROM {schema}.hopper_jobs
        WHERE $6::bool AND state = 1 AND lease_expires <= (SELECT ms FROM now)
        FOR UPDATE SKIP LOCKED
    ) AS expired, now
    WHERE t.id = expired.id
    RETURNING t.id, t.state, t.queue, t.ordering_key, t.group_name
),
-- Members of groups the reaper dead-lettered, counted here (see settle.sql); a row of kind
-- 2 says a completion job was enqueued, so the broker claims again and wakes its workers.
grouped AS (
    SELECT {schema}.hopper_group_count(array_agg(group_name), array_agg(state::smallint),
                                       array_agg(id), $3::bigint, $9::text) AS fired
    FROM reaped
    WHERE reaped.state = 3 AND reaped.group_name IS NOT NULL
    HAVING count(*) > 0
),
windows AS MATERIALIZED (
    SELECT w.* FROM {schema}.hopper_rate_take($1::text[], (SELECT ms FROM now)) AS w
    WHERE EXISTS (SELECT FROM {schema}.hopper_rate_limits AS r WHERE r.queue = ANY ($1::text[]))
),
-- Each queue's budget (`asked`) cut to its window's room (`n`). The room by a subquery,
-- not a join: a hash join's table costs every claim, with a limit or without. A room of
-- -1 is a queue limited per key (0014_rate_keys.sql): none of its jobs here, and a row
-- of kind 7 naming it for the broker to claim with hopper_rate_claim_keyed.
budgets AS MATERIALIZED (
    SELECT x.queue, x.asked, x.room >= 0 AS limited, x.room < 0 AS keyed,
           CASE WHEN x.room IS NULL THEN x.asked ELSE least(x.asked, greatest(x.room, 0)) END
               AS n
    FROM (SELECT b.queue, b.n AS asked,
                 (SELECT w.room FROM windows AS w WHERE w.queue = b.queue) AS room
          FROM unnest($1::text[], $2::int[]) AS b(queue, n)) AS x
),
picked AS MATERIALIZED (
    SELECT j.id
    FROM budgets AS b
    CROSS JOIN LATERAL (
        SELECT x.id
        -- No ORDER BY: `levels` yields each queue's levels highest first (each step of the
        -- recursion finds the next one down), and a sort would compute every level of the
        -- queue before the first claim; unsorted, the levels are found only until the
        -- budget is filled, usually one.
        FROM (SELECT priority FROM levels
              WHERE levels.queue = b.queue AND levels.priority IS NOT NULL) AS l
        CROSS JOIN LATERAL (
            SELECT id FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = b.queue AND priority = l.priority
              AND run_at <= (SELECT ms FROM now)
            ORDER BY run_at, id
            LIMIT b.n
            FOR UPDATE SKIP LOCKED
        ) AS x
        LIMIT b.n
    ) AS j
),
claimed AS (
    UPDATE {schema}.hopper_jobs AS t
    SET state = 1,
        lease_id = $4,
        lease_expires = now.ms + $5,
        started_at = now.ms,
        attempt = t.attempt + 1
    FROM now
    -- By key, as an array: joined to `picked` instead, a plan made without knowing how
    -- many were picked may hash the whole table (measured: 40 ms for a claim of 100).
    WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING t.id, t.queue, t.payload, t.priority, t.run_at, t.attempt, t.max_attempts,
              t.headers::text AS headers, t.created_at
)
SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
       0::smallint AS kind, NULL::bigint AS extra, NULL::text AS ordering_key
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1::smallint,
       (SELECT min(d.at)
        FROM levels AS l
        CROSS JOIN LATERAL (
            SELECT run_at AS at FROM {schema}.hopper_jobs
            WHERE state = 0 AND queue = l.queue AND priority = l.priority
              AND run_at > (SELECT ms FROM now) AND run_at <= 253402300799999
            ORDER BY run_at
            LIMIT 1
        ) AS d
        WHERE l.priority IS NOT NULL), NULL
WHERE (SELECT count(*) FROM claimed) < $7::int
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2::smallint, count(*), NULL
FROM reaped
WHERE reaped.state = 0
HAVING count(*) > 0
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2::smallint, fired::bigint, NULL
FROM grouped
WHERE fired > 0
UNION ALL
SELECT NULL, queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 3::smallint, NULL, ordering_key
FROM reaped
WHERE reaped.state = 3 AND reaped.ordering_key IS NOT NULL
UNION ALL
SELECT NULL, r.queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, r.kind, r.at, r.why
FROM (SELECT array_agg(b.queue) AS queues, array_agg(b.asked::bigint) AS asked,
             array_agg(c.n) AS took
      FROM budgets AS b
      CROSS JOIN LATERAL (SELECT count(*) AS n FROM claimed WHERE claimed.queue = b.queue) AS c
      WHERE b.limited) AS t
CROSS JOIN LATERAL {schema}.hopper_rate_record(t.queues, t.asked, t.took, (SELECT ms FROM now))
    AS r
WHERE t.queues IS NOT NULL
UNION ALL
SELECT NULL, b.queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 7::smallint, b.asked::bigint, NULL
FROM budgets AS b
WHERE b.keyed
