-- Rate keys beside ordering keys and groups, stored by the enqueue's one statement.
--
-- hopper_enqueue_ordered and hopper_enqueue_group take no rate keys. These two functions
-- call them, then give the jobs they stored their rate keys by id (NULL for a job
-- without): inside one function, each statement sees what the one before it wrote, and
-- the client sends one statement, so no claim ever sees such a job without its key and no
-- transaction of the client's is needed. Ids ascend in input order, as both functions
-- store their jobs in it.
CREATE FUNCTION {schema}.hopper_enqueue_ordered_rated(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_keys text[], p_rate_keys text[]
) RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    ids bigint[];
BEGIN
    SELECT array_agg(e.id ORDER BY e.id) INTO ids
    FROM {schema}.hopper_enqueue_ordered(p_queues, p_payloads, p_priorities, p_run_at,
                                         p_delay_ms, p_max_attempts, p_headers, p_now,
                                         p_keys) AS e(id);
    UPDATE {schema}.hopper_jobs AS t
    SET rate_key = u.key
    FROM unnest(ids, p_rate_keys) AS u(id, key)
    WHERE t.id = u.id AND u.key IS NOT NULL;
    RETURN QUERY SELECT unnest(ids);
END
$$;

CREATE FUNCTION {schema}.hopper_enqueue_group_rated(
    p_queues text[], p_payloads bytea[], p_priorities integer[], p_run_at bigint[],
    p_delay_ms bigint[], p_max_attempts integer[], p_headers text[], p_now bigint,
    p_keys text[], p_groups text[], p_rate_keys text[]
) RETURNS TABLE (o_id bigint, o_refused text)
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    ids bigint[];
    refused text;
BEGIN
    SELECT array_agg(e.o_id ORDER BY e.o_id), max(e.o_refused) INTO ids, refused
    FROM {schema}.hopper_enqueue_group(p_queues, p_payloads, p_priorities, p_run_at,
                                       p_delay_ms, p_max_attempts, p_headers, p_now,
                                       p_keys, p_groups) AS e;
    IF refused IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, refused;
        RETURN;
    END IF;
    UPDATE {schema}.hopper_jobs AS t
    SET rate_key = u.key
    FROM unnest(ids, p_rate_keys) AS u(id, key)
    WHERE t.id = u.id AND u.key IS NOT NULL;
    RETURN QUERY SELECT unnest(ids), NULL::text;
END
$$;
