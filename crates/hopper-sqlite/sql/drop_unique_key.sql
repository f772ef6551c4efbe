-- Deletes key ?2 of queue ?1 while job ?3 still holds it (the sweep found its hold stale).
DELETE FROM hopper_unique WHERE queue = ?1 AND key = ?2 AND job_id = ?3
