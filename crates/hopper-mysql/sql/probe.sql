-- Whether a claim would find anything, in one statement outside a transaction: asked
-- before a fetch whose queues all came back short last time with no wake-up since, so a
-- worker waiting on empty queues asks one question per poll rather than a transaction of
-- four or five statements (see `MySqlBroker::fetch`).
--
-- `{each}` is one parenthesised `probe_queue.sql` per queue. The columns: the earliest
-- run_at among the queues' pending jobs (NULL: none pending); whether a lease has expired,
-- asked only when the first parameter after the queues is true (the reaper is due); and
-- the clock both were read against.
SELECT (SELECT MIN(first_run_at) FROM ({each}) AS by_queue) AS first_run_at,
       CAST(? AND EXISTS (SELECT 1 FROM hopper_jobs
                          WHERE state = 1 AND lease_expires <= COALESCE(?, {now}))
            AS SIGNED) AS expired,
       CAST(COALESCE(?, {now}) AS SIGNED) AS now_ms
