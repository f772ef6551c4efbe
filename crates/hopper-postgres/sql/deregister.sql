-- Removes worker $1, which stopped; a row when it was listed.
DELETE FROM {schema}.hopper_workers WHERE id = $1 RETURNING id
