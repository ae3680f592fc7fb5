"""Kafka at PyFlink's path ``pyflink.datastream.connectors.kafka``: the source's names live in
``.source``, the sink's in ``.sink``; this package exports both, as PyFlink's module does."""
from millstream.datastream.connectors.kafka.sink import *  # noqa: F401,F403
from millstream.datastream.connectors.kafka.sink import __all__ as _sink_names
from millstream.datastream.connectors.kafka.source import *  # noqa: F401,F403
from millstream.datastream.connectors.kafka.source import __all__ as _source_names

__all__ = [*_source_names, *_sink_names]
