-- Hands keys whose hold lapsed to the jobs just enqueued with them: `{rows}` of
-- `unique_row.sql`, each key locked by this transaction since `unique_take.sql`.
INSERT INTO hopper_unique (queue, `key`, job_id, scope, until)
VALUES {rows}
ON DUPLICATE KEY UPDATE
    job_id = VALUES(job_id),
    scope = VALUES(scope),
    until = VALUES(until)
