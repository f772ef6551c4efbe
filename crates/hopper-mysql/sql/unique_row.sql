-- One key: the queue, the key, the job that takes it, the scope, the end of a period.
(?, ?, ?, ?, ?)
