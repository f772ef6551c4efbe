-- Named locks are server-wide: the database name keeps migrations of other databases apart.
SELECT GET_LOCK(LEFT(CONCAT('hopper_migrate.', DATABASE()), 64), 30)
