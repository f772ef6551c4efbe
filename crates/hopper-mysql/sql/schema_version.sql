SELECT CAST(COALESCE(MAX(version), 0) AS SIGNED) FROM hopper_migrations
