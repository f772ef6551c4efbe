-- Locks a group's row, making it if the group is new (with nothing counted).
INSERT INTO hopper_groups (name) VALUES (?) ON DUPLICATE KEY UPDATE members = members
