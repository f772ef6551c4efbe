-- A queue's leased jobs and dead letters, each counted up to ?2: counts.sql's predicates,
-- each read no further than the limit.
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM hopper_jobs WHERE state = 1 AND queue = ?1 LIMIT ?2
    )),
    (SELECT count(*) FROM (
        SELECT 1 FROM hopper_jobs WHERE state >= 2 AND state = 3 AND queue = ?1 LIMIT ?2
    ))
