"""The REST API and web UI server: Flink's paths, views over the Dispatcher's records, logs, metrics."""
