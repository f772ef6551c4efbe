-- A batch in which some jobs have ordering keys ($9; NULL for a job without): stored in
-- input order by hopper_enqueue_ordered (see 0010_ordering_keys.sql), which blocks each
-- keyed job behind its key's earlier ones. Returns the ids in input order.
SELECT e.id
FROM {schema}.hopper_enqueue_ordered($1::text[], $2::bytea[], $3::int[], $4::bigint[],
                                     $5::bigint[], $6::int[], $7::text[], $8::bigint,
                                     $9::text[]) AS e(id),
     (SELECT pg_notify($10, '')) AS wake
ORDER BY e.id
