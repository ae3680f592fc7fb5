"""Millstream: Apache Flink's architecture for Python.

User programs import the API from PyFlink's module paths with ``pyflink`` replaced by
``millstream`` (``millstream.datastream``, ``millstream.common``). The runtime components live in
``millstream.client``, ``millstream.jobmanager`` and ``millstream.taskmanager``.
"""

__version__ = "0.1.0"
