-- A queue's jobs by state, as counts.sql counts them, each reading at most `LIMIT ?` (the
-- bound plus one) entries of its index range: a count of the limit means more than the
-- bound. The derived tables stop at their LIMIT; the same predicates as counts.sql.
SELECT
    (SELECT COUNT(*) FROM (SELECT 1 FROM hopper_jobs WHERE state = 0 AND queue = ? AND run_at <= COALESCE(?, {now}) LIMIT ?) AS pending),
    (SELECT COUNT(*) FROM (SELECT 1 FROM hopper_jobs WHERE state = 0 AND queue = ? AND run_at > COALESCE(?, {now}) LIMIT ?) AS scheduled),
    (SELECT COUNT(*) FROM (SELECT 1 FROM hopper_jobs WHERE state = 1 AND queue = ? LIMIT ?) AS leased),
    (SELECT COUNT(*) FROM (SELECT 1 FROM hopper_jobs WHERE state = 3 AND queue = ? LIMIT ?) AS dead)
