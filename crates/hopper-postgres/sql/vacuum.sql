-- Removes the dead entries claims leave in the index of pending jobs (see
-- PgOptions::vacuum_after). SKIP_LOCKED: another vacuum of the table is already doing it.
-- INDEX_CLEANUP ON: the indexes are the point, even when few heap pages changed.
-- TRUNCATE OFF: giving empty pages back would take a lock every claim would queue behind.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF) {schema}.hopper_jobs
