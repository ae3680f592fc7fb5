"""Checkpoints on the JobManager: the CheckpointCoordinator (pure), its driver, a job's settings."""
