-- A batch with unique keys ($11 to $13, as enqueue_unique.sql's $10 to $12) and ordering
-- keys ($9), a job possibly having both, and rate keys ($14): stored by
-- hopper_enqueue_unique_ordered (0017_retries_step_aside.sql) in one statement. Returns,
-- per sent job in input order, its id and its unique key's holder, as enqueue_unique.sql
-- does; workers are woken when a job was stored.
SELECT e.id, e.holder
FROM {schema}.hopper_enqueue_unique_ordered($1::text[], $2::bytea[], $3::int[], $4::bigint[],
                                            $5::bigint[], $6::int[], $7::text[], $8::bigint,
                                            $9::text[], $11::text[], $12::smallint[],
                                            $13::bigint[], $14::text[]) AS e(id, holder, ord),
     (SELECT pg_notify($10, '')) AS wake
ORDER BY e.ord
