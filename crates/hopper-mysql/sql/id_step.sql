-- The step between the ids one insert generates (not 1 in some multi-primary setups).
SELECT CAST(@@auto_increment_increment AS SIGNED)
