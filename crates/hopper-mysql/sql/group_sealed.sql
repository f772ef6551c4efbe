-- Whether a group, whose row the caller locked, is sealed.
SELECT sealed FROM hopper_groups WHERE name = ?
