-- A queue's members not counted yet, locked, each with its group: a purge deletes these
-- by id and counts them as cancelled.
SELECT id, group_name FROM hopper_jobs WHERE queue = ? AND group_name IS NOT NULL FOR UPDATE
