-- Moves jobs that their keys' full windows held back to the times those windows have room
-- for them: `{rows}` of `rate_defer_row.sql`, each job locked by the claim already. A pair
-- repeated to pad the list moves its job to the same time twice.
UPDATE hopper_jobs AS t
JOIN ({rows}) AS m ON t.id = m.id
SET t.run_at = m.at
WHERE t.state = 0
