-- Deletes the dead letters among ?1 (a JSON array of ids).
DELETE FROM hopper_jobs WHERE state = 3 AND id IN (SELECT value FROM json_each(?1))
