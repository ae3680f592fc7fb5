"""Connectors at PyFlink's paths (``millstream.datastream.connectors.file_system``)."""
