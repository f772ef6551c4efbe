SELECT coalesce(max(version), 0) FROM {schema}.hopper_migrations
