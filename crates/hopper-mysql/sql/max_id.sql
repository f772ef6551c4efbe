SELECT MAX(id) FROM hopper_jobs
