-- IGNORE: an existing row is no change (queue names are checked before they get here).
INSERT IGNORE INTO hopper_paused (queue, paused_at) VALUES (?, COALESCE(?, {now}))
