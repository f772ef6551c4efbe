-- Kinds: 0 ack, 1 retry, 2 dead letter, 3 release, 4 cancel, 5 snooze, 6 retry stepping
-- aside. A snooze is a retry after $4's delay that charges no attempt (as a release) and
-- records no error. A retry stepping aside is a retry whose job, when it has an ordering
-- key, then lets the key's next job run (see hopper_settle_lines in
-- 0017_retries_step_aside.sql).
-- Returns each settled job's id, and a NULL for each of `grouped` and `lines` that put a
-- job in reach of the workers (who are then woken).
--
-- A keyed job (0010_ordering_keys.sql) that ended (completed, dead or cancelled) frees its
-- key's next job in `lines`, where the jobs stepping aside step aside under the same
-- locks, and a member of a group (0012_groups.sql) that ended is counted in `grouped`,
-- which enqueues the completion job of a group it leaves done. Both run in this statement,
-- so no crash can come between a job's end and its key's next or its group's count, and
-- keyed jobs pay no second round trip. The functions' statements take snapshots of their
-- own, after this statement's changes, and for plain jobs each is an aggregate over no
-- rows: the function is not run.
--
-- `t.state + 0 = 1` rather than `t.state = 1`: it keeps the planner on the primary key. The
-- plain form lets it use the partial index of leased jobs, which statistics taken while
-- few jobs were leased make look empty, and walk every leased job for each settlement.
--
-- A retry or dead letter appends its error to the job's history (`errors`), keeping the
-- latest $10. The history takes errors cut to hopper_core::admin::MAX_ERROR_BYTES: those
-- longer come cut in $9, for the jobs of $8 (usually none), and `last_error` keeps them
-- whole. Acks carry no array for it, and only failures evaluate its one expression: no
-- subquery, whose plan every execution would start, acks included.
WITH now AS (SELECT coalesce($6::bigint, {schema}.hopper_now_ms()) AS ms),
s AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[], $5::text[])
        AS s(id, lease, kind, delay_ms, error)
),
acked AS (
    DELETE FROM {schema}.hopper_jobs AS t
    USING s
    WHERE NOT $7::bool AND s.kind = 0
      AND t.id = s.id AND t.state + 0 = 1 AND t.lease_id = s.lease
    RETURNING t.id, t.queue, t.ordering_key, t.group_name
),
changed AS (
    UPDATE {schema}.hopper_jobs AS t
    SET state = CASE s.kind WHEN 0 THEN 2 WHEN 2 THEN 3 WHEN 4 THEN 4 ELSE 0 END,
        run_at = CASE WHEN s.kind IN (1, 5, 6) THEN now.ms + s.delay_ms ELSE t.run_at END,
        attempt = CASE WHEN s.kind IN (3, 5) THEN greatest(t.attempt - 1, 0) ELSE t.attempt END,
        last_error = CASE WHEN s.kind IN (1, 2, 6) THEN s.error ELSE t.last_error END,
        -- A history that is not an array (another program wrote it) starts over.
        errors = CASE WHEN s.kind IN (1, 2, 6) THEN jsonb_path_query_array(
            CASE jsonb_typeof(t.errors) WHEN 'array' THEN t.errors ELSE '[]'::jsonb END
                || jsonb_build_array(jsonb_build_object(
                       'attempt', t.attempt, 'at', now.ms, 'error', coalesce(
                           ($9::text[])[array_position($8::bigint[], s.id)], s.error))),
            '$[last - $keep + 1 to last]', jsonb_build_object('keep', $10::int)
        ) ELSE t.errors END,
        finished_at = CASE WHEN s.kind IN (0, 2, 4) THEN now.ms END,
        lease_id = NULL,
        lease_expires = NULL
    FROM s, now
    WHERE ($7::bool OR s.kind <> 0)
      AND t.id = s.id AND t.state + 0 = 1 AND t.lease_id = s.lease
    RETURNING t.id, t.queue,
              CASE WHEN t.state >= 2 THEN t.ordering_key END AS ordering_key,
              CASE WHEN t.state >= 2 THEN t.group_name END AS group_name, t.state,
              CASE WHEN s.kind = 6 AND t.ordering_key IS NOT NULL THEN t.id END AS aside
),
grouped AS (
    SELECT {schema}.hopper_group_count(e.names, e.states, e.ids, $6::bigint, $11::text) AS fired
    FROM (SELECT array_agg(m.group_name) AS names, array_agg(m.state) AS states,
                 array_agg(m.id) AS ids
          FROM (SELECT id, group_name, 2::smallint AS state FROM acked
                WHERE group_name IS NOT NULL
                UNION ALL
                SELECT id, group_name, state::smallint FROM changed
                WHERE group_name IS NOT NULL) AS m) AS e
    WHERE e.names IS NOT NULL
),
lines AS (
    -- The retry's own time for the jobs stepping aside: the server's clock, read again,
    -- would have moved on.
    SELECT {schema}.hopper_settle_lines(e.queues, e.keys, e.aside, (SELECT ms FROM now)) AS n
    FROM (SELECT array_agg(k.queue) FILTER (WHERE k.ordering_key IS NOT NULL) AS queues,
                 array_agg(k.ordering_key) FILTER (WHERE k.ordering_key IS NOT NULL) AS keys,
                 array_agg(k.aside) FILTER (WHERE k.aside IS NOT NULL) AS aside
          FROM (SELECT queue, ordering_key, NULL::bigint AS aside FROM acked
                WHERE ordering_key IS NOT NULL
                UNION ALL
                SELECT queue, ordering_key, aside FROM changed
                WHERE ordering_key IS NOT NULL OR aside IS NOT NULL) AS k) AS e
    WHERE e.keys IS NOT NULL OR e.aside IS NOT NULL
)
SELECT id FROM acked
UNION ALL
SELECT id FROM changed
UNION ALL
SELECT NULL FROM grouped WHERE fired > 0
UNION ALL
SELECT NULL FROM lines WHERE CASE WHEN n > 0 THEN pg_notify($11, '') IS NOT NULL END
