"""A TaskManager's Spark: the local or standalone Spark it runs tasks on, and the worker daemon."""
