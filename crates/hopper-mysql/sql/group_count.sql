-- Counts settled members of a group, locking its row.
UPDATE hopper_groups
SET succeeded = succeeded + ?, dead = dead + ?, cancelled = cancelled + ?
WHERE name = ?
