-- One budget's candidates, locked, skipping what other claimers hold. FORCE INDEX: a plan
-- that sorts would read and lock every due job of the queue before applying the LIMIT.
--
-- A paused queue yields nothing: the NOT EXISTS names the queue again rather than the row's
-- column, so the server reads it once, as a constant, before it touches an index (a paused
-- queue's claim reads no job at all). A locking read does not lock what its subqueries
-- read, so claims neither take nor skip `hopper_paused` rows: each reads the committed
-- pauses.
--
-- Jobs waiting behind an earlier job of their ordering key sit past every `run_at` a claim
-- reaches (`ordering::BLOCKED`). `ordering_key` tells the fetch whether it took a job with
-- one, which its lease then says (see `MySqlBroker::fetch`); `group_name` likewise tells
-- it whether it took a member of a group not counted yet (`queries::groups`).
--
-- `limited` says whether the queue has a rate limit, read once as a constant like the
-- pause (and, like it, neither locked nor skipped): a claim that took jobs of a limited
-- queue without holding its limit's row takes none of them and claims again under the
-- row's lock (see `queries::rate`). The queue comes first among the parameters, since the
-- column does. `rate_key` is what a queue limited per key counts the job under
-- (`queries::rate_keys`).
(SELECT id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at,
        ordering_key,
        CAST(EXISTS (SELECT 1 FROM hopper_rate_limits WHERE queue = ?) AS SIGNED) AS limited,
        group_name, rate_key
 FROM hopper_jobs FORCE INDEX (hopper_jobs_ready)
 WHERE state = 0 AND queue = ? AND run_at <= COALESCE(?, {now})
   AND NOT EXISTS (SELECT 1 FROM hopper_paused WHERE queue = ?)
 ORDER BY priority DESC, run_at, id
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
