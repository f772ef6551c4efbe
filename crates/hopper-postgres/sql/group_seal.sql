-- Seals a group with its completion job, enqueueing that at once when nothing is
-- unsettled (hopper_group_seal, 0012_groups.sql); false when it was sealed already.
SELECT {schema}.hopper_group_seal($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint, $11)
