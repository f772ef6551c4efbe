-- Locks the named jobs and reads their state and lease, to tell which settlements apply,
-- their ordering keys, whose next jobs may run once they end, and their groups, which
-- count them once they end.
SELECT id, state, lease_id, queue, ordering_key, group_name FROM hopper_jobs WHERE id IN ({ids}) FOR UPDATE
