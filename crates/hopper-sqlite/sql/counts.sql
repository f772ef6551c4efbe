SELECT
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 0 AND queue = ?1 AND run_at <= ?2),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 0 AND queue = ?1 AND run_at > ?2),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 1 AND queue = ?1),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state >= 2 AND state = 3 AND queue = ?1)
