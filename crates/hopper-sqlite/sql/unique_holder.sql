-- The job holding key ?2 of queue ?1, if its hold still stands at ?3, by the rule of
-- `UniqueScope::holds`: a queued hold (0) while the holder is pending and was never
-- charged an attempt, an unfinished one (1) while it is pending or leased, a period (2)
-- until `until`. A holder gone from the jobs (acknowledged, purged) finds no row in the
-- LEFT JOIN: its state is NULL, so only a period still holds.
SELECT u.job_id
FROM hopper_unique AS u
LEFT JOIN hopper_jobs AS j ON j.id = u.job_id
WHERE u.queue = ?1 AND u.key = ?2
  AND CASE u.scope
          WHEN 0 THEN j.state = 0 AND j.attempt = 0
          WHEN 1 THEN j.state IN (0, 1)
          ELSE ?3 < u.until
      END
