"""Protobuf messages and gRPC services: the contracts between client, JobManager and TaskManagers."""
