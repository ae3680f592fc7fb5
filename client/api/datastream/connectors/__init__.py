"""Connectors at PyFlink's paths: ``millstream.datastream.connectors`` exports the file connector's
names (and, as PyFlink sets them on it for backward compatibility, ``KafkaSource`` and
``FlinkKafkaConsumer``), as ``pyflink.datastream.connectors`` does; ``.file_system``, ``.kafka``,
``.number_seq`` and ``.datagen`` hold them."""
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
from millstream.datastream.connectors.kafka import FlinkKafkaConsumer, KafkaSource
from millstream.datastream.connectors.number_seq import NumberSequenceSource

__all__ = [
    "BucketAssigner",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FlinkKafkaConsumer",
    "KafkaSource",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
]
