-- Lifts queue $1's rate limit, forgetting its window and its keys' windows; when it had
-- one, wakes the workers of every process, as resume.sql does, so they take its jobs at
-- once.
WITH lifted AS (DELETE FROM {schema}.hopper_rate_limits WHERE queue = $1 RETURNING queue),
keys_dropped AS (DELETE FROM {schema}.hopper_rate_keys WHERE queue = $1),
done AS (SELECT count(*) AS n FROM lifted)
SELECT n, CASE WHEN n > 0 THEN pg_notify($2, '') IS NOT NULL END AS woke
FROM done
