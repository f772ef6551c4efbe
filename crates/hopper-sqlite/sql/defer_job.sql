-- Moves a pending job held back by its key's full window to when the window has room.
UPDATE hopper_jobs SET run_at = ?2 WHERE id = ?1 AND state = 0
