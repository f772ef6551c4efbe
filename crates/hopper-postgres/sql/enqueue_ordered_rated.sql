-- enqueue_ordered.sql with each job's rate key ($11; NULL for a job without), stored by
-- hopper_enqueue_ordered_rated (see 0015_rate_keys_beside_lines.sql) in the same
-- statement. Returns the ids in input order.
SELECT e.id
FROM {schema}.hopper_enqueue_ordered_rated($1::text[], $2::bytea[], $3::int[], $4::bigint[],
                                           $5::bigint[], $6::int[], $7::text[], $8::bigint,
                                           $9::text[], $11::text[]) AS e(id),
     (SELECT pg_notify($10, '')) AS wake
ORDER BY e.id
