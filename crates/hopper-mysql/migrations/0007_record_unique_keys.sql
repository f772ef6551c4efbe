-- The unique key a job was enqueued with, shown in its record (`JobRecord::unique_key`)
-- whether or not the job still holds it: written by the insert of enqueues in which some
-- job has a key (`enqueue_keyed.sql`), NULL for a job enqueued without one and for the jobs
-- stored before this version. Only records read it; holds stay in `hopper_unique`.
--
-- Appended, nullable, without a default: MariaDB (10.3 and later) and MySQL (8.0.12 and
-- later) add such a column instantly, in the table's metadata, without rewriting its rows.
-- VARCHAR(255) in the table's utf8mb4 holds the longest key (`MAX_UNIQUE_KEY` bytes).
--
-- One statement: a second run that finds the column there counts the migration as applied.
ALTER TABLE hopper_jobs
    ADD COLUMN unique_key VARCHAR(255) NULL;
