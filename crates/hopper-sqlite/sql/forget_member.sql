-- Takes a counted member out of its group, so that nothing counts it again (a dead one
-- re-driven runs as a job of no group).
UPDATE hopper_jobs SET group_name = NULL WHERE id = ?1
