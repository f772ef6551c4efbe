-- The schedules a worker runs, reported with its queues (`hopper_core::ScheduleBeat`).
--
-- `schedules` is the JSON array of the worker's schedules as it reported them, LONGTEXT for
-- the reason `queues` is: a value another program wrote badly leaves the worker listed,
-- without schedules. Its default is the empty array, so that the rows of workers that
-- reported before this version read as workers with no schedules. The default is written
-- as an expression in parentheses: MySQL (from 8.0.13) takes a default for a text column
-- only in that form, MariaDB in either.
--
-- One statement: a second run that finds the column there counts the migration as applied.
ALTER TABLE hopper_workers
    ADD COLUMN schedules LONGTEXT NOT NULL DEFAULT ('[]');
