-- Marks a queue's limit as one per key, keeping the time its key windows were last swept
-- when it was one already.
INSERT INTO hopper_rate_per_key (queue, swept_at) VALUES (?, 0)
ON DUPLICATE KEY UPDATE swept_at = swept_at
