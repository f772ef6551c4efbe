-- Gives the jobs just stored by hopper_enqueue_ordered or hopper_enqueue_group their rate
-- keys ($2, NULL for a job without), by id ($1): in the enqueue's own transaction, so no
-- claim sees a job without its key.
UPDATE {schema}.hopper_jobs AS t
SET rate_key = u.key
FROM unnest($1::bigint[], $2::text[]) AS u(id, key)
WHERE t.id = u.id AND u.key IS NOT NULL
