SELECT
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 0 AND queue = ? AND run_at <= COALESCE(?, {now})),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 0 AND queue = ? AND run_at > COALESCE(?, {now})),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 1 AND queue = ?),
    (SELECT COUNT(*) FROM hopper_jobs WHERE state = 3 AND queue = ?)
