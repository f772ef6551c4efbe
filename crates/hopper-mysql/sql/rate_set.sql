-- Sets a queue's rate limit. A queue already limited keeps its window, whatever the new
-- limit: setting one again, or changing it, never lets a burst through. (A row that
-- changes nothing counts no row; the broker does not ask.)
INSERT INTO hopper_rate_limits (queue, `max`, per_ms, starts)
VALUES (?, ?, ?, '')
ON DUPLICATE KEY UPDATE `max` = VALUES(`max`), per_ms = VALUES(per_ms)
