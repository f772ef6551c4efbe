-- A batch in which some jobs are members of groups ($10; NULL for a job of none), with
-- their ordering keys ($9): stored and counted by hopper_enqueue_group (see
-- 0012_groups.sql). Returns the ids in input order, or one row naming a sealed group
-- (`refused`), storing nothing.
SELECT e.o_id, e.o_refused
FROM {schema}.hopper_enqueue_group($1::text[], $2::bytea[], $3::int[], $4::bigint[],
                                   $5::bigint[], $6::int[], $7::text[], $8::bigint,
                                   $9::text[], $10::text[]) AS e,
     (SELECT pg_notify($11, '')) AS wake
ORDER BY e.o_id
