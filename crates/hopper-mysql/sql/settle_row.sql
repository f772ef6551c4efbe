-- Typed casts: a bare placeholder in a derived table takes its type from the first values
-- the statement is prepared with, which truncated long error messages. `kept_error` is the
-- error as the history keeps it (`bounded_error`), NULL when that is the whole error.
SELECT CAST(? AS SIGNED) AS id, CAST(? AS SIGNED) AS lease_id, CAST(? AS SIGNED) AS kind,
       CAST(? AS SIGNED) AS delay_ms, CAST(? AS CHAR) AS error, CAST(? AS CHAR) AS kept_error
