-- Deletes the named jobs: a purged queue's members, locked by `purge_members.sql`.
DELETE FROM hopper_jobs WHERE id IN ({ids})
