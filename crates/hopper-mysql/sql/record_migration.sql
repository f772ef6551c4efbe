INSERT INTO hopper_migrations (version, applied_at) VALUES (?, {now})
