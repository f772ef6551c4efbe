-- What each worker says of its schedules (hopper_core::registry::ScheduleBeat), stored
-- with its report as `queues` is: the JSON of the list, written whole by each report
-- (heartbeat.sql) and read back by workers.sql.
--
-- NOT NULL with a default of an empty list, so the rows of workers that reported before
-- this migration, and the reports of older builds still running against the schema, read
-- as holding no schedule. A constant default is kept in the catalog rather than written
-- into each row, so adding the column rewrites no row: the lock it takes on the table
-- lasts as long as the catalog change, and running workers' reports wait no longer.
ALTER TABLE {schema}.hopper_workers
    ADD COLUMN schedules jsonb NOT NULL DEFAULT '[]'::jsonb;
