-- One key's window: the queue, the key, the starts, the latest start, the latest time
-- given to a job held back.
(?, ?, ?, ?, ?)
