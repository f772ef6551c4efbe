WITH now AS (SELECT coalesce($1::bigint, {schema}.hopper_now_ms()) AS ms),
expired AS MATERIALIZED (
    SELECT id FROM {schema}.hopper_jobs
    WHERE state = 1 AND lease_expires <= (SELECT ms FROM now)
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.hopper_jobs AS t
SET state = CASE WHEN t.attempt >= t.max_attempts THEN 3 ELSE 0 END,
    last_error = CASE WHEN t.attempt >= t.max_attempts
                      THEN 'lease expired on the final attempt' ELSE t.last_error END,
    finished_at = CASE WHEN t.attempt >= t.max_attempts THEN now.ms END,
    lease_id = NULL,
    lease_expires = NULL
FROM expired, now
WHERE t.id = expired.id
RETURNING t.state
