-- The database clock, read once by an enqueue of jobs with unique keys, so that their
-- `created_at`, the ends of their holds and the holds they find lapsed are one instant.
SELECT {now}
