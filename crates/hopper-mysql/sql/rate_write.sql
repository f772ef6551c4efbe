-- A limited queue's window after its claim, written back under the row's lock: the starts
-- still within the window, and this claim's; and the limit the claim went by, which is the
-- row's own unless that was out of range.
UPDATE hopper_rate_limits SET starts = ?, `max` = ?, per_ms = ? WHERE queue = ?
