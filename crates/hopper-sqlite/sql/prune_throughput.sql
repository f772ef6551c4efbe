DELETE FROM hopper_throughput WHERE bucket < ?1
