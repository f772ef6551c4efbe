-- Claims and settlements update and delete rows all day, so a vacuum often finds empty
-- pages at the end of the table. Giving them back to the system takes an ACCESS EXCLUSIVE
-- lock on the table, and every claim queues behind it (and behind the vacuum's wait for
-- it) until it is released: seconds of no claims at all. Hopper's own vacuum already runs
-- with TRUNCATE OFF; this keeps autovacuum from truncating the table as well. The pages
-- stay allocated and are reused by the next jobs. Needs PostgreSQL 12 or later.
ALTER TABLE {schema}.hopper_jobs SET (vacuum_truncate = false);
