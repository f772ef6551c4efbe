-- Sets a queue's limit; a queue limited already keeps its window's starts.
INSERT INTO hopper_rate_limits (queue, max, per_ms, per_key) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (queue) DO UPDATE
SET max = excluded.max, per_ms = excluded.per_ms, per_key = excluded.per_key
