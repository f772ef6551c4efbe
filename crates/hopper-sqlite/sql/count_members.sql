-- Counts members of group ?1 as settled: ?2 succeeded, ?3 dead, ?4 cancelled. Returns
-- whether the group's completion job is now due: sealed, nothing unsettled, and not
-- enqueued yet.
UPDATE hopper_groups
SET succeeded = succeeded + ?2, dead = dead + ?3, cancelled = cancelled + ?4
WHERE name = ?1
RETURNING sealed = 1 AND completion_id IS NULL AND succeeded + dead + cancelled >= members
