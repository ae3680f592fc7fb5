"""The TaskManager: slot table, task execution inside PySpark executors, the data exchange service."""
