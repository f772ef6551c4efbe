-- Unblocks the next job of each key ($1 queues, $2 keys) whose job just ended, under the
-- keys' locks (see hopper_unblock in 0017_retries_step_aside.sql), judging which jobs are
-- due at $4 (NULL: the server's time), and wakes the workers of every process when one
-- was.
SELECT n, CASE WHEN n > 0 THEN pg_notify($3, '') IS NOT NULL END AS woke
FROM (SELECT {schema}.hopper_unblock($1::text[], $2::text[], $4::bigint) AS n) AS u
