INSERT INTO hopper_paused (queue, paused_at) VALUES (?1, ?2) ON CONFLICT (queue) DO NOTHING
