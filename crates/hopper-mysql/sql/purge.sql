DELETE FROM hopper_jobs WHERE queue = ?
