-- The schedules a worker reports (`hopper_core::ScheduleBeat`), beside its queues.
--
-- `schedules`: the report's schedules, a JSON array like `queues`, replaced by each
-- report. Rows written before this column, or by a worker of an older version, read '[]':
-- a worker with no schedules. A column with a constant default is added in place, without
-- rewriting a row.
ALTER TABLE hopper_workers ADD COLUMN schedules TEXT NOT NULL DEFAULT '[]';
