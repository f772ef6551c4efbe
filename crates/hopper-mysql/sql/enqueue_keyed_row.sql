-- One job's values, as `enqueue_row.sql` has them, then its unique key, its ordering key,
-- its group and its rate key. The `run_at` is moved by the third value: `ordering::BLOCKED` for a job that waits
-- behind an earlier job of its ordering key, else 0.
(?, 0, ?, COALESCE(?, {now} + ?) + ?, 0, ?, ?, ?, COALESCE(?, {now}), ?, ?, ?, ?)
