-- Keys whose hold no longer stands (hopper_unique_holds), deleted a chunk at a time by
-- maintenance, never by claims: the next at most $4 keys after ($2, $3) in the order of
-- the primary key. Keys a producer holds locked are skipped, so pruning never waits on an
-- enqueue nor takes part in a cycle of waits; the next round comes back to them.
--
-- One row: how many keys the chunk examined and deleted, and the last key it examined,
-- after which the next chunk starts (NULL when it examined none).
WITH now AS (SELECT coalesce($1::bigint, {schema}.hopper_now_ms()) AS ms),
chunk AS (
    SELECT queue, key, job_id, scope, until
    FROM {schema}.hopper_unique
    WHERE (queue, key) > ($2::text, $3::text)
    ORDER BY queue, key
    LIMIT $4
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM {schema}.hopper_unique AS h
    USING chunk, now
    WHERE h.queue = chunk.queue AND h.key = chunk.key
      AND NOT {schema}.hopper_unique_holds(chunk.job_id, chunk.scope, chunk.until, now.ms)
    RETURNING h.key
),
last AS (
    SELECT queue, key FROM chunk ORDER BY queue DESC, key DESC LIMIT 1
)
SELECT (SELECT count(*) FROM chunk) AS examined,
       (SELECT count(*) FROM gone) AS deleted,
       (SELECT queue FROM last) AS last_queue,
       (SELECT key FROM last) AS last_key
