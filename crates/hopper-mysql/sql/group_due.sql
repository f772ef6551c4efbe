-- Whether a group, whose row the caller locked, is sealed with nothing unsettled and no
-- completion job enqueued yet; no row for a group never heard of.
SELECT CAST(sealed = 1 AND members <= succeeded + dead + cancelled AND completion_id IS NULL
            AS SIGNED)
FROM hopper_groups WHERE name = ?
