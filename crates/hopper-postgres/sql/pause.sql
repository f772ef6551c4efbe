-- Pauses queue $1 for every worker of the schema (claim.sql skips it); a row only when it
-- was not paused already.
INSERT INTO {schema}.hopper_paused (queue, paused_at)
VALUES ($1, coalesce($2::bigint, {schema}.hopper_now_ms()))
ON CONFLICT (queue) DO NOTHING
RETURNING queue
