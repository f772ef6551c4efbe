-- Removes a queue's members not counted yet, returning each one's group, so that they
-- count as cancelled; purge.sql then removes the rest.
DELETE FROM hopper_jobs WHERE queue = ?1 AND group_name IS NOT NULL
RETURNING group_name
