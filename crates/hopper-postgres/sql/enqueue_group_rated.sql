-- enqueue_group.sql with each job's rate key ($12; NULL for a job without), stored by
-- hopper_enqueue_group_rated (see 0015_rate_keys_beside_lines.sql) in the same
-- statement. Returns the ids in input order, or one row naming a sealed group.
SELECT e.o_id, e.o_refused
FROM {schema}.hopper_enqueue_group_rated($1::text[], $2::bytea[], $3::int[], $4::bigint[],
                                         $5::bigint[], $6::int[], $7::text[], $8::bigint,
                                         $9::text[], $10::text[], $12::text[]) AS e,
     (SELECT pg_notify($11, '')) AS wake
ORDER BY e.o_id
