"""Connectors at PyFlink's paths: ``millstream.datastream.connectors`` exports the file connector's
names, as ``pyflink.datastream.connectors`` does; ``.file_system``, ``.number_seq``, ``.jdbc`` and ``.datagen`` hold them."""
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
from millstream.datastream.connectors.number_seq import NumberSequenceSource
from millstream.datastream.connectors.base import DeliveryGuarantee
from millstream.datastream.connectors.kafka.sink import FlinkKafkaProducer, Semantic

__all__ = [
    "BucketAssigner",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "JdbcConnectionOptions",
    "JdbcExecutionOptions",
    "JdbcSink",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
    "DeliveryGuarantee",
    "FlinkKafkaProducer",
    "Semantic",
]
