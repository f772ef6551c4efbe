-- One job's values, as `enqueue_row.sql` has them, then its unique key.
(?, 0, ?, COALESCE(?, {now} + ?), 0, ?, ?, ?, COALESCE(?, {now}), ?)
