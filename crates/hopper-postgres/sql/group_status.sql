-- A group as counted, with its dead members in the order they died.
SELECT g.members, g.succeeded, g.cancelled, g.sealed, g.completion_id,
       ARRAY(SELECT d.job_id FROM {schema}.hopper_group_dead AS d
             WHERE d.group_name = g.name ORDER BY d.seq) AS dead
FROM {schema}.hopper_groups AS g
WHERE g.name = $1
