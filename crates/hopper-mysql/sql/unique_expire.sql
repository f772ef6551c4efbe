-- Deletes the lapsed holds a window found, each only while the job it names still holds
-- it: a key an enqueue took over since is kept.
DELETE FROM hopper_unique WHERE (queue, `key`, job_id) IN ({triples})
