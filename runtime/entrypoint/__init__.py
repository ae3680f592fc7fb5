"""What the JobManager and TaskManager processes share: arguments, logging, log files, loop health."""
