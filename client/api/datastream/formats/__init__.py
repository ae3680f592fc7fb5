"""PyFlink's record formats (``pyflink.datastream.formats``): JSON and CSV rows to and from bytes.

``json`` and ``csv`` hold the row (de)serialization schemas a connector hands its records to. They
are pure Python here: a schema is a picklable value whose ``serialize(row) -> bytes`` and
``deserialize(bytes) -> Row`` the task calls, with Flink's conversions per field type.
PyFlink's ``avro``, ``orc`` and ``parquet`` are not provided.
"""
