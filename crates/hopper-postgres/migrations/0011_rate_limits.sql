-- Rate limits (hopper_core::rate): at most `max` claims of a queue's jobs in any window
-- of `per_ms` milliseconds, whoever claims them. A row per limited queue; a queue without
-- one is not limited, and costs a claim one probe of this table's key.
--
-- The window is two arrays read side by side: a claim at `start_at[i]` took `start_n[i]`
-- jobs, oldest first (hopper_core::rate::Window's pairs). Only claims write them, under
-- the row's lock (hopper_rate_record): each drops the pairs that left the window and
-- appends its own. Setting the limit again or changing it keeps them, so that no change
-- lets a burst through; lifting it deletes the row. The checks mirror
-- hopper_core::RateLimit::new (1 to MAX_RATE starts, a window from 1 ms to MAX_DELAY).
-- Names compare byte by byte, as the other tables' do, and the primary key is the order
-- in which claims lock rows.
CREATE TABLE {schema}.hopper_rate_limits (
    queue    text COLLATE "C" PRIMARY KEY,
    max      integer NOT NULL CONSTRAINT hopper_rate_limits_max CHECK (max BETWEEN 1 AND 100000),
    per_ms   bigint  NOT NULL
             CONSTRAINT hopper_rate_limits_per CHECK (per_ms BETWEEN 1 AND 3153600000000),
    start_at bigint[] NOT NULL DEFAULT '{}',
    start_n  integer[] NOT NULL DEFAULT '{}'
);

-- A stored limit and window as a claim at `p_now` reads them, with `p_took` more starts
-- added (0: none): the limit brought into range (another program may have dropped the
-- checks), the pairs still inside the window in time order, and the jobs they started. A
-- window that is not what a claim writes (arrays of different lengths, nulls, counts out
-- of range, starts later than now by more than the window) reads as empty, and `broken`
-- says why. SQL that the statements calling it inline: no plan of its own.
--
-- New starts are recorded at the end of their slot of 1/256 of the window (`slot`, at
-- least 1 ms), joined to the last pair when that is in the same slot or later (a clock
-- that went back). A start recorded up to a slot late only holds the window that much
-- longer, so the limit still holds, and a window keeps at most 257 pairs however many
-- claims of one job fill it: each claim reads and writes them all under the queue's
-- lock (measured: a claim of one job took 0.8 ms with one pair, 1.3 ms with 257, 20 ms
-- with 10,000).
CREATE FUNCTION {schema}.hopper_rate_window(
    p_max integer, p_per_ms bigint, p_at bigint[], p_n integer[], p_now bigint, p_took bigint
) RETURNS TABLE (max integer, per_ms bigint, at bigint[], n integer[], used bigint, broken text)
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT k.max, k.per_ms,
           CASE WHEN p_took = 0 THEN w.at
                WHEN w.at[cardinality(w.at)] >= k.slot THEN w.at
                ELSE w.at || k.slot END,
           CASE WHEN p_took = 0 THEN w.n
                WHEN w.at[cardinality(w.at)] >= k.slot
                    THEN w.n[1:(cardinality(w.n) - 1)] || (w.n[cardinality(w.n)] + p_took)::int
                ELSE w.n || p_took::int END,
           w.used + p_took,
           w.broken
    FROM (VALUES (least(greatest(coalesce(p_max, 1), 1), 100000),
                  least(greatest(coalesce(p_per_ms, 1), 1), 3153600000000))) AS l (max, per_ms)
    CROSS JOIN LATERAL (
        SELECT l.max, l.per_ms, (p_now + g.ms - 1) / g.ms * g.ms AS slot
        FROM (SELECT greatest(l.per_ms / 256, 1) AS ms) AS g
    ) AS k
    CROSS JOIN LATERAL (
        SELECT s.broken,
               CASE WHEN s.broken IS NULL THEN s.at ELSE '{}' END AS at,
               CASE WHEN s.broken IS NULL THEN s.n ELSE '{}' END AS n,
               CASE WHEN s.broken IS NULL THEN s.used ELSE 0 END AS used
        FROM (
            SELECT CASE
                       WHEN cardinality(p_at) IS DISTINCT FROM cardinality(p_n)
                           THEN format('%s start times for %s counts',
                                       cardinality(p_at), cardinality(p_n))
                       WHEN bool_or(p.t IS NULL OR p.c IS NULL OR p.c NOT BETWEEN 1 AND 100000)
                           THEN 'a start time or count missing or out of range'
                       WHEN max(p.t) > p_now + k.per_ms THEN 'start times later than now'
                   END AS broken,
                   coalesce(array_agg(p.t ORDER BY p.t, p.i)
                                FILTER (WHERE p.t > p_now - k.per_ms), '{}') AS at,
                   coalesce(array_agg(p.c ORDER BY p.t, p.i)
                                FILTER (WHERE p.t > p_now - k.per_ms), '{}') AS n,
                   coalesce(sum(p.c) FILTER (WHERE p.t > p_now - k.per_ms), 0) AS used
            FROM unnest(p_at, p_n) WITH ORDINALITY AS p(t, c, i)
        ) AS s
    ) AS w
$$;

-- For a claim at `p_now` of the queues `p_queues`: locks the rows of those that are
-- limited, in queue order so that two claims cannot deadlock, until the claim's
-- transaction ends, and says how many jobs each may start: `max` less the starts within
-- its window.
--
-- PL/pgSQL for two reasons. Its statement reads the rows as committed when it runs, after
-- waiting for the lock: a claim waiting here reads the window the claim before it left.
-- And a claim calls it only when one of its queues has a limit, so a claim of queues
-- without one never starts (nor plans) any of the windows' work.
CREATE FUNCTION {schema}.hopper_rate_take(p_queues text[], p_now bigint)
    RETURNS TABLE (queue text, room bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT l.queue, greatest(w.max - w.used, 0)
    FROM (
        SELECT r.queue, r.max, r.per_ms, r.start_at, r.start_n
        FROM {schema}.hopper_rate_limits AS r
        WHERE r.queue = ANY (p_queues)
        ORDER BY r.queue
        FOR UPDATE
    ) AS l
    CROSS JOIN LATERAL {schema}.hopper_rate_window(
        l.max, l.per_ms, l.start_at, l.start_n, p_now, 0) AS w;
END
$$;

-- Records a claim at `p_now` that was asked for `p_asked[i]` jobs of queue `p_queues[i]`
-- and took `p_took[i]`, whose rows hopper_rate_take locked in the same transaction: each
-- window drops the pairs that left it and gains the claim's (one written wrong is
-- written afresh). Returns a row of kind 6 with the time a window has room again when
-- it is full and cut the queue's budget: once enough of its oldest starts have left it
-- for one more (hopper_core::rate::Window::next_room), that is, the pairs up to the one
-- that brings what is left below `max`. And a row of kind 4 for each limit or window
-- stored wrong, saying what is wrong.
CREATE FUNCTION {schema}.hopper_rate_record(
    p_queues text[], p_asked bigint[], p_took bigint[], p_now bigint
) RETURNS TABLE (kind smallint, queue text, at bigint, why text)
    LANGUAGE plpgsql VOLATILE
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH windows AS MATERIALIZED (
        SELECT r.queue, t.asked, t.took, w.max, w.per_ms, w.at, w.n, w.used,
               w.broken IS NOT NULL AS broken,
               nullif(concat_ws('; ', w.broken || ': counted afresh',
                                CASE WHEN (r.max, r.per_ms) IS DISTINCT FROM (w.max, w.per_ms)
                                     THEN format('a limit out of range, %s per %s ms: '
                                                 'read as %s per %s ms',
                                                 r.max, r.per_ms, w.max, w.per_ms) END),
                      '') AS why
        FROM unnest(p_queues, p_asked, p_took) AS t(queue, asked, took)
        JOIN {schema}.hopper_rate_limits AS r ON r.queue = t.queue
        CROSS JOIN LATERAL {schema}.hopper_rate_window(
            r.max, r.per_ms, r.start_at, r.start_n, p_now, t.took) AS w
    ),
    written AS (
        UPDATE {schema}.hopper_rate_limits AS r
        SET start_at = w.at, start_n = w.n
        FROM windows AS w
        WHERE r.queue = w.queue AND (w.took > 0 OR w.broken)
    )
    SELECT 4::smallint, w.queue, NULL::bigint, w.why
    FROM windows AS w
    WHERE w.why IS NOT NULL
    UNION ALL
    SELECT 6::smallint, w.queue, x.at, NULL
    FROM windows AS w
    CROSS JOIN LATERAL (
        SELECT p.t + w.per_ms AS at
        FROM (SELECT u.t, u.i, sum(u.c) OVER (ORDER BY u.i) AS gone
              FROM unnest(w.at, w.n) WITH ORDINALITY AS u(t, c, i)) AS p
        WHERE w.used - p.gone < w.max
        ORDER BY p.i
        LIMIT 1
    ) AS x
    WHERE w.took < w.asked AND w.used >= w.max;
END
$$;
