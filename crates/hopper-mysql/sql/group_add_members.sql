-- Counts new members of a group, whose row the caller locked.
UPDATE hopper_groups SET members = members + ? WHERE name = ?
