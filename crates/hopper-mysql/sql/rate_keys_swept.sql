-- Notes when a queue's key windows were swept.
UPDATE hopper_rate_per_key SET swept_at = ? WHERE queue = ?
