-- A queue's limit is no longer one per key (lifted, or set for the whole queue).
DELETE FROM hopper_rate_per_key WHERE queue = ?
