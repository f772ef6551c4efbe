-- Claims up to $2 jobs of queue $1, limited per key, under lease $4 for $5 ms, at $3
-- (the database's clock when NULL): see hopper_rate_claim_keyed in
-- 0016_rate_claim_by_sets.sql.
SELECT * FROM {schema}.hopper_rate_claim_keyed($1, $2, $3, $4, $5)
