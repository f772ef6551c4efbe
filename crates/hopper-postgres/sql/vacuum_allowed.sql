-- Whether this session may vacuum the jobs table: its role owns the table (or is a member
-- of the owning role), owns the database, or is a superuser. Otherwise the server skips
-- the table with a warning on every attempt.
SELECT pg_has_role(c.relowner, 'MEMBER')
    OR coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)
    OR coalesce((SELECT pg_has_role(d.datdba, 'MEMBER')
                 FROM pg_database AS d WHERE d.datname = current_database()), false)
FROM pg_class AS c
WHERE c.oid = '{schema}.hopper_jobs'::regclass
