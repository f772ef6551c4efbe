-- Counts ?2 more members of group ?1, making the group if it is new.
INSERT INTO hopper_groups (name, members) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET members = members + excluded.members
