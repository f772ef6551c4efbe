-- Enqueues the completion jobs of up to $1 sealed groups left with nothing unsettled and
-- none enqueued (hopper_group_sweep, 0012_groups.sql).
SELECT {schema}.hopper_group_sweep($1::bigint, $2::bigint, $3::text)
