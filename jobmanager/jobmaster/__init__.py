"""The JobMaster: one job's ExecutionGraph, its scheduling, deployment and failover."""
