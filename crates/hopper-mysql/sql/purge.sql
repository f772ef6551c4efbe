-- Deletes a queue's jobs of no group (or counted already); its members not counted yet go
-- by id (`purge_ids.sql`), locked first and counted as cancelled.
DELETE FROM hopper_jobs WHERE queue = ? AND group_name IS NULL
