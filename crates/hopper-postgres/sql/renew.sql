WITH now AS (SELECT coalesce($3::bigint, {schema}.hopper_now_ms()) AS ms)
UPDATE {schema}.hopper_jobs AS t
SET lease_expires = now.ms + $2
FROM now
WHERE t.state = 1 AND t.lease_id = ANY($1::bigint[]) AND t.lease_expires > now.ms
RETURNING t.lease_id
