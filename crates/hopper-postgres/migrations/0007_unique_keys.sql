-- Unique keys (hopper_core::UniqueScope): each key of a queue and the job holding it.
-- `scope` is UniqueScope::code (0 queued, 1 unfinished, 2 for a period) and `until` the
-- end of a period (ms). Only enqueue_unique.sql writes a row, when a job with a key is
-- stored, and only maintenance deletes one (prune_unique.sql): claims and settlements
-- never touch this table, so a hold ends lazily, decided from its holder's row when the
-- next job with the key arrives. Names compare byte by byte, as the other tables' do, and
-- the primary key is the order in which producers lock keys.
CREATE TABLE {schema}.hopper_unique (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    job_id bigint   NOT NULL,
    scope  smallint NOT NULL CONSTRAINT hopper_unique_scope CHECK (scope BETWEEN 0 AND 2),
    until  bigint,
    PRIMARY KEY (queue, key)
);

-- Whether a hold still stands at `at`, by the rule of hopper_core::UniqueScope::holds:
-- queued (0) while the holder is pending and was never charged an attempt; unfinished (1)
-- while it is pending or leased; a period (2) until `until`. A holder whose row is gone
-- (acknowledged, purged) holds nothing, unless for a period.
--
-- A function, and a volatile one, for its snapshot: each of its queries reads what was
-- committed when it starts. The statements that call it lock the key's row first, so the
-- holder they ask about may have been stored by a transaction that committed after their
-- own statement began. A join or subquery in that statement would not see that job and
-- take the key from it; this function does. PL/pgSQL, so that it is never inlined into
-- the caller's query (which would bring back the caller's snapshot).
CREATE FUNCTION {schema}.hopper_unique_holds(
    holder bigint, hold_scope smallint, hold_until bigint, at bigint
) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    IF hold_scope = 2 THEN
        RETURN coalesce(at < hold_until, false);
    END IF;
    RETURN EXISTS (
        SELECT FROM {schema}.hopper_jobs AS j
        WHERE j.id = holder
          AND (j.state = 0 AND (hold_scope = 1 OR j.attempt = 0)
               OR j.state = 1 AND hold_scope = 1)
    );
END
$$;
