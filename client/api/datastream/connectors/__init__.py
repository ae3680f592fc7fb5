"""Connectors at PyFlink's paths: ``millstream.datastream.connectors`` exports the file connector's
names, as ``pyflink.datastream.connectors`` does; ``.file_system`` and ``.datagen`` hold them."""
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

__all__ = [
    "BucketAssigner",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
]
