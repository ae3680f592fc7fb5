"""PyFlink's public modules (apache-flink 2.x, ``flink-python/pyflink``): the one list of them.

``pyflink.X`` is ``millstream.X`` for a PyFlink program. A module of this list that Millstream does
not have fails at import with :class:`millstream.NotProvidedByMillstream` (a ``ModuleNotFoundError``)
naming it and saying it is not provided yet, instead of a bare "No module named ...". The PyFlink
API map (tests/unit/test_pyflink_api_map.py, the README's coverage table) takes its modules from
here too.

Source: the modules under flink-python/pyflink in apache/flink's newest stored tree (found with the
search tool), less tests, internals (``fn_execution``, ``java_gateway``, ``serializers``, ``util``)
and modules that only older releases had.
"""
from __future__ import annotations

PYFLINK_MODULES: tuple[str, ...] = (
    # pyflink.common
    "pyflink.common",
    "pyflink.common.completable_future",
    "pyflink.common.config_options",
    "pyflink.common.configuration",
    "pyflink.common.execution_config",
    "pyflink.common.input_dependency_constraint",
    "pyflink.common.job_client",
    "pyflink.common.job_execution_result",
    "pyflink.common.job_id",
    "pyflink.common.job_status",
    "pyflink.common.restart_strategy",
    "pyflink.common.serialization",
    "pyflink.common.time",
    "pyflink.common.typeinfo",
    "pyflink.common.types",
    "pyflink.common.watermark_strategy",
    # pyflink.datastream
    "pyflink.datastream",
    "pyflink.datastream.async_data_stream",
    "pyflink.datastream.checkpoint_config",
    "pyflink.datastream.checkpoint_storage",
    "pyflink.datastream.checkpointing_mode",
    "pyflink.datastream.data_stream",
    "pyflink.datastream.execution_mode",
    "pyflink.datastream.externalized_checkpoint_retention",
    "pyflink.datastream.functions",
    "pyflink.datastream.output_tag",
    "pyflink.datastream.slot_sharing_group",
    "pyflink.datastream.state",
    "pyflink.datastream.state_backend",
    "pyflink.datastream.stream_execution_environment",
    "pyflink.datastream.time_domain",
    "pyflink.datastream.timerservice",
    "pyflink.datastream.window",
    "pyflink.datastream.connectors",
    "pyflink.datastream.connectors.base",
    "pyflink.datastream.connectors.cassandra",
    "pyflink.datastream.connectors.dynamic_kafka",
    "pyflink.datastream.connectors.elasticsearch",
    "pyflink.datastream.connectors.file_system",
    "pyflink.datastream.connectors.hybrid_source",
    "pyflink.datastream.connectors.jdbc",
    "pyflink.datastream.connectors.kafka",
    "pyflink.datastream.connectors.kinesis",
    "pyflink.datastream.connectors.number_seq",
    "pyflink.datastream.connectors.pulsar",
    "pyflink.datastream.connectors.rabbitmq",
    "pyflink.datastream.formats",
    "pyflink.datastream.formats.avro",
    "pyflink.datastream.formats.csv",
    "pyflink.datastream.formats.json",
    "pyflink.datastream.formats.orc",
    "pyflink.datastream.formats.parquet",
    # pyflink.metrics and the Table API
    "pyflink.metrics",
    "pyflink.table",
    "pyflink.table.expressions",
    "pyflink.table.udf",
)
