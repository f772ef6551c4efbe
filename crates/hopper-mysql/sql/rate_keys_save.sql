-- Writes the key windows a claim changed: `{rows}` of `rate_keys_row.sql`. A row repeated
-- to pad the list writes the same values twice.
INSERT INTO hopper_rate_keys (queue, rate_key, starts, last_start, booked_at)
VALUES {rows}
ON DUPLICATE KEY UPDATE starts = VALUES(starts), last_start = VALUES(last_start),
                        booked_at = VALUES(booked_at)
