"""Connectors at PyFlink's paths: ``millstream.datastream.connectors`` exports the file connector's
names (and the Kafka and JDBC names PyFlink sets on it for backward compatibility), as
``pyflink.datastream.connectors`` does; ``.file_system``, ``.kafka``, ``.number_seq``, ``.jdbc`` and
``.datagen`` hold them."""
from millstream.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    FileSourceBuilder,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
    StreamingFileSink,
)
from millstream.datastream.connectors.jdbc import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSink
from millstream.datastream.connectors.kafka.source import FlinkKafkaConsumer, KafkaSource
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.connectors.kafka.sink import FlinkKafkaProducer, Semantic

__all__ = [
    "BucketAssigner",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FlinkKafkaConsumer",
    "JdbcConnectionOptions",
    "JdbcExecutionOptions",
    "JdbcSink",
    "KafkaSource",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
    "DeliveryGuarantee",
    "FlinkKafkaProducer",
    "Semantic",
]
