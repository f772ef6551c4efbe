-- Lifts queue $1's rate limit, forgetting its window; when it had one, wakes the workers
-- of every process, as resume.sql does, so they take its jobs at once.
WITH lifted AS (DELETE FROM {schema}.hopper_rate_limits WHERE queue = $1 RETURNING queue),
done AS (SELECT count(*) AS n FROM lifted)
SELECT n, CASE WHEN n > 0 THEN pg_notify($2, '') IS NOT NULL END AS woke
FROM done
