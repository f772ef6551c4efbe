-- Resumes queue $1: when it was paused, wakes the workers of every process, as an enqueue
-- does, so they take its jobs at once rather than at their next poll.
WITH resumed AS (DELETE FROM {schema}.hopper_paused WHERE queue = $1 RETURNING queue),
done AS (SELECT count(*) AS n FROM resumed)
SELECT n, CASE WHEN n > 0 THEN pg_notify($2, '') IS NOT NULL END AS woke
FROM done
