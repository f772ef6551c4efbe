-- The claim of a queue limited per key, decided for a whole read of jobs at once rather
-- than one job at a time: 0014's hopper_rate_claim_keyed walked its candidates in
-- PL/pgSQL, about 270 µs a job (two window evaluations, a key row read and written, and
-- an UPDATE per job), which held a queue with room to spare to a tenth of a plain drain.
--
-- hopper_rate_claim_pass reads up to p_read due jobs of the queue in claim order, locked,
-- and in one statement:
-- - evaluates each key's window once (`win`; this claim's starts are added to it as
--   hopper_rate_window adds them, without reading its pairs again), and ranks each key's
--   jobs against its room:
--   a key's first `room` jobs start, the rest are held back;
-- - cuts the read in claim order where p_want jobs have started or p_cap were held back
--   (`done`), as the walk stopped;
-- - gives the j-th job a key holds back the time its window has room for it: the next
--   room (when enough of its oldest starts leave, counting this claim's), then `max` jobs
--   a period, as hopper_core::rate::Window::defer spreads them. A key an earlier pass of
--   the same claim handled (p_seen) goes on from that pass's booking when it lies at or
--   after that room; any other key's booking, left by an earlier claim, is spread afresh;
-- - writes each key's window and booking in one upsert, and the jobs in two UPDATEs;
-- - returns the jobs started, then one row with a NULL id carrying the jobs it held back
--   (`priority`), the earliest time it gave one (`run_at`), the jobs it started
--   (`attempt`), the jobs it read (`max_attempts`) and the keys it handled (`headers`, a
--   text[] literal).
--
-- hopper_rate_claim_keyed keeps its signature and its answer (the jobs, then one row with
-- a NULL id whose run_at is the earliest time given). It locks the queue's limits row and
-- sweeps idle windows as before, then reads the budget's worth of jobs: when every key
-- has room that is the claim. Only when that read was full and held jobs back does it
-- read again, past them, each read twice as far as the last, until the budget is full,
-- 4,096 jobs were moved, or the queue has no more due jobs. (One read of everything the
-- budget and the moves allow locked and evaluated up to 4,096 jobs whenever a key was
-- full: 29-34 ms a call where the walk took 2-10 ms.)
CREATE FUNCTION {schema}.hopper_rate_claim_pass(
    p_queue text, p_want integer, p_read integer, p_cap integer, p_seen text[],
    p_now bigint, p_max integer, p_per bigint, p_lease bigint, p_ttl bigint
) RETURNS TABLE (id bigint, queue text, payload bytea, priority integer, run_at bigint,
                 attempt integer, max_attempts integer, headers text, created_at bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT c.id, coalesce(c.rate_key, '') AS key,
               row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.id) AS ord
        FROM (
            SELECT t.id, t.rate_key, t.priority, t.run_at
            FROM {schema}.hopper_jobs AS t
            WHERE t.state = 0 AND t.queue = p_queue AND t.run_at <= p_now
            ORDER BY t.priority DESC, t.run_at, t.id
            LIMIT p_read
            FOR UPDATE SKIP LOCKED
        ) AS c
    ),
    win AS MATERIALIZED (
        SELECT d.key, w.max, w.per_ms, w.at, w.n, w.used, greatest(w.max - w.used, 0) AS room,
               k.booked_at, k.booked_n
        FROM (SELECT DISTINCT cand.key FROM cand) AS d
        LEFT JOIN {schema}.hopper_rate_keys AS k ON k.queue = p_queue AND k.key = d.key
        CROSS JOIN LATERAL {schema}.hopper_rate_window(
            p_max, p_per, coalesce(k.start_at, '{}'), coalesce(k.start_n, '{}'), p_now, 0
        ) AS w
    ),
    ranked AS (
        SELECT c.id, c.key, c.ord,
               row_number() OVER (PARTITION BY c.key ORDER BY c.ord) <= w.room AS takes
        FROM cand AS c
        JOIN win AS w ON w.key = c.key
    ),
    counted AS (
        SELECT r.id, r.key, r.ord, r.takes,
               count(*) FILTER (WHERE r.takes) OVER earlier AS took_before,
               count(*) FILTER (WHERE NOT r.takes) OVER earlier AS held_before
        FROM ranked AS r
        WINDOW earlier AS (ORDER BY r.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ),
    done AS MATERIALIZED (
        SELECT c.id, c.key, c.takes,
               row_number() OVER (PARTITION BY c.key, c.takes ORDER BY c.ord) AS j
        FROM counted AS c
        WHERE c.took_before < p_want AND c.held_before < p_cap
    ),
    per_key AS MATERIALIZED (
        SELECT a.key, a.max, a.per_ms, a.at, a.n, a.held,
               CASE WHEN a.key = ANY (p_seen) AND a.booked_at >= e.earliest THEN a.booked_at
                    ELSE e.earliest END AS base,
               CASE WHEN a.key = ANY (p_seen) AND a.booked_at >= e.earliest THEN a.booked_n
                    ELSE 0 END AS booked
        FROM (
            -- Each key's window with this claim's starts, recorded as hopper_rate_window
            -- records them (at the end of their slot of 1/256 of the period, joined to the
            -- last pair when that is in the same slot or later) without reading the pairs
            -- again.
            SELECT w.key, w.max, w.per_ms, w.booked_at, w.booked_n, h.held,
                   w.used + h.took AS used,
                   CASE WHEN h.took = 0 OR w.at[cardinality(w.at)] >= s.slot THEN w.at
                        ELSE w.at || s.slot END AS at,
                   CASE WHEN h.took = 0 THEN w.n
                        WHEN w.at[cardinality(w.at)] >= s.slot
                            THEN w.n[1:(cardinality(w.n) - 1)]
                                 || (w.n[cardinality(w.n)] + h.took)::int
                        ELSE w.n || h.took::int END AS n
            FROM win AS w
            JOIN (SELECT done.key,
                         count(*) FILTER (WHERE done.takes) AS took,
                         count(*) FILTER (WHERE NOT done.takes) AS held
                  FROM done
                  GROUP BY done.key) AS h ON h.key = w.key
            CROSS JOIN LATERAL (
                SELECT (p_now + g.ms - 1) / g.ms * g.ms AS slot
                FROM (SELECT greatest(w.per_ms / 256, 1) AS ms) AS g
            ) AS s
        ) AS a
        -- For a key that held jobs back: when enough of the oldest starts (this claim's
        -- included) leave for one more.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN a.held = 0 THEN p_now + 1 ELSE greatest(coalesce((
                SELECT p.t + a.per_ms
                FROM (SELECT u.t, u.i, sum(u.c) OVER (ORDER BY u.i) AS gone
                      FROM unnest(a.at, a.n) WITH ORDINALITY AS u(t, c, i)) AS p
                WHERE a.used - p.gone < a.max
                ORDER BY p.i
                LIMIT 1), p_now), p_now + 1) END AS earliest
        ) AS e
    ),
    saved AS (
        INSERT INTO {schema}.hopper_rate_keys AS k
            (queue, key, start_at, start_n, booked_at, booked_n)
        SELECT p_queue, pk.key, pk.at, pk.n,
               CASE WHEN pk.held > 0 THEN least(
                   pk.base + ((pk.booked + pk.held - 1) / pk.max) * pk.per_ms,
                   253402300799999) END,
               CASE WHEN pk.held > 0 THEN ((pk.booked + pk.held - 1) % pk.max) + 1
                    ELSE 0 END
        FROM per_key AS pk
        ON CONFLICT (queue, key) DO UPDATE
        SET start_at = excluded.start_at, start_n = excluded.start_n,
            booked_at = excluded.booked_at, booked_n = excluded.booked_n
    ),
    moved AS (
        UPDATE {schema}.hopper_jobs AS t
        SET run_at = least(pk.base + ((pk.booked + d.j - 1) / pk.max) * pk.per_ms,
                           253402300799999)
        FROM done AS d
        JOIN per_key AS pk ON pk.key = d.key
        WHERE NOT d.takes AND t.id = d.id
        RETURNING t.run_at
    ),
    taken AS (
        UPDATE {schema}.hopper_jobs AS t
        SET state = 1, lease_id = p_lease, lease_expires = p_now + p_ttl,
            started_at = p_now, attempt = t.attempt + 1
        FROM done AS d
        WHERE d.takes AND t.id = d.id
        RETURNING t.id, t.queue, t.payload, t.priority, t.run_at, t.attempt,
                  t.max_attempts, t.headers::text, t.created_at
    )
    SELECT tk.id, tk.queue, tk.payload, tk.priority, tk.run_at, tk.attempt,
           tk.max_attempts, tk.headers, tk.created_at
    FROM taken AS tk
    UNION ALL
    SELECT NULL::bigint, p_queue, NULL::bytea,
           (SELECT count(*) FROM done WHERE NOT done.takes)::integer,
           (SELECT min(moved.run_at) FROM moved),
           (SELECT count(*) FROM done WHERE done.takes)::integer,
           (SELECT count(*) FROM cand)::integer,
           (SELECT array_agg(per_key.key) FROM per_key)::text, NULL::bigint;
END
$$;

CREATE OR REPLACE FUNCTION {schema}.hopper_rate_claim_keyed(
    p_queue text, p_n integer, p_now bigint, p_lease bigint, p_ttl bigint
) RETURNS TABLE (id bigint, queue text, payload bytea, priority integer, run_at bigint,
                 attempt integer, max_attempts integer, headers text, created_at bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(p_now, {schema}.hopper_now_ms());
    lim record;
    r record;
    took integer := 0;
    moved integer := 0;
    pass_took integer;
    pass_moved integer;
    pass_read integer;
    to_read integer := p_n;
    seen text[] := '{}';
    next_at bigint;
BEGIN
    SELECT * INTO lim FROM {schema}.hopper_rate_limits AS l
    WHERE l.queue = p_queue AND l.per_key
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF now_ms - lim.swept_at >= lim.per_ms THEN
        DELETE FROM {schema}.hopper_rate_keys AS x
        WHERE x.queue = p_queue
          AND coalesce(x.start_at[cardinality(x.start_at)], 0) <= now_ms - lim.per_ms
          AND coalesce(x.booked_at, 0) <= now_ms;
        UPDATE {schema}.hopper_rate_limits AS l SET swept_at = now_ms WHERE l.queue = p_queue;
    END IF;
    LOOP
        FOR r IN
            SELECT * FROM {schema}.hopper_rate_claim_pass(
                p_queue, p_n - took, to_read, 4096 - moved, seen, now_ms,
                greatest(lim.max, 1), greatest(lim.per_ms, 1), p_lease, p_ttl) AS x
        LOOP
            IF r.id IS NULL THEN
                pass_moved := r.priority;
                pass_took := r.attempt;
                pass_read := r.max_attempts;
                seen := seen || coalesce(r.headers::text[], '{}');
                next_at := least(next_at, r.run_at);
            ELSE
                id := r.id;
                queue := r.queue;
                payload := r.payload;
                priority := r.priority;
                run_at := r.run_at;
                attempt := r.attempt;
                max_attempts := r.max_attempts;
                headers := r.headers;
                created_at := r.created_at;
                RETURN NEXT;
            END IF;
        END LOOP;
        took := took + pass_took;
        moved := moved + pass_moved;
        EXIT WHEN took >= p_n OR moved >= 4096 OR pass_moved = 0 OR pass_read < to_read;
        -- The jobs held back are no longer due: read on past them, further each time.
        to_read := least(to_read * 2, (p_n - took) + (4096 - moved));
    END LOOP;
    RETURN QUERY
    SELECT NULL::bigint, p_queue, NULL::bytea, NULL::integer, next_at,
           NULL::integer, NULL::integer, NULL::text, NULL::bigint;
END
$$;
