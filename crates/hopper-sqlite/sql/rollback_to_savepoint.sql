ROLLBACK TO hopper_command
