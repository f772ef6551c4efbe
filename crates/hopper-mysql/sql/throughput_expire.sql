-- Forgets the buckets past the last hour and the one running (a range of
-- hopper_throughput_bucket).
DELETE FROM hopper_throughput WHERE bucket < COALESCE(?, {now}) - {kept}
