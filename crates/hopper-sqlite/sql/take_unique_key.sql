-- Makes job ?3 the holder of key ?2 of queue ?1, with its scope's code (?4) and, for a
-- period, its end (?5). The caller found no hold standing (unique_holder.sql) in the same
-- write transaction, so a row already there is stale and is taken over.
INSERT INTO hopper_unique (queue, key, job_id, scope, until)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (queue, key) DO UPDATE
SET job_id = excluded.job_id, scope = excluded.scope, until = excluded.until
