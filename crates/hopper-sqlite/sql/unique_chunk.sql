-- The next ?3 keys after (?1, ?2) in key order, each with whether its hold still stands at
-- ?4 (the rule of unique_holder.sql; 0 for a holder gone): one step of the sweep that
-- deletes stale keys. A range of the primary key, so a step reads ?3 keys and as many
-- job lookups, however many keys are held.
SELECT u.queue, u.key, u.job_id,
       coalesce(CASE u.scope
                    WHEN 0 THEN j.state = 0 AND j.attempt = 0
                    WHEN 1 THEN j.state IN (0, 1)
                    ELSE ?4 < u.until
                END, 0)
FROM hopper_unique AS u
LEFT JOIN hopper_jobs AS j ON j.id = u.job_id
WHERE (u.queue, u.key) > (?1, ?2)
ORDER BY u.queue, u.key
LIMIT ?3
