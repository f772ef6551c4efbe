INSERT INTO hopper_rate_keys (queue, key, starts, last_start, booked_at, booked_n)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (queue, key) DO UPDATE
SET starts = excluded.starts, last_start = excluded.last_start,
    booked_at = excluded.booked_at, booked_n = excluded.booked_n
