"""PyFlink's record and file formats (``pyflink.datastream.formats``).

``json``, ``csv`` and ``avro`` hold the row (de)serialization schemas a connector hands its records
to. They are pure Python here: a schema is a picklable value whose ``serialize(row) -> bytes`` and
``deserialize(bytes) -> Row`` the task calls, with Flink's conversions per field type. ``csv``,
``avro``, ``parquet`` and ``orc`` also hold file formats: stream and bulk formats a FileSource
reads, and bulk writer factories for ``FileSink.for_bulk_format`` (fastavro and pyarrow underneath).
"""
