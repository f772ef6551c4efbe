-- `{each}` is one parenthesised next_due.sql per queue, joined by UNION ALL: each is a single
-- index dive, which one MIN over `queue IN (…)` would not be.
SELECT MIN(due) FROM ({each}) AS due_by_queue
