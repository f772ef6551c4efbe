DELETE FROM hopper_jobs WHERE state = 3 AND id IN ({ids})
