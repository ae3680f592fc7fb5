"""Millstream: Apache Flink's architecture for Python.

User programs import the API from PyFlink's module paths with ``pyflink`` replaced by
``millstream`` (``millstream.datastream``, ``millstream.common``). The runtime components live in
``millstream.client``, ``millstream.jobmanager`` and ``millstream.taskmanager``.
"""

import os as _os

# gRPC's C core logs fork() notices at INFO when Spark or a subprocess forks: keep consoles clean.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

__version__ = "0.1.0"

# A PyFlink module Millstream lacks fails at import naming it (not a bare "No module named").
from millstream._not_provided import NotProvidedByMillstream, install as _install_not_provided  # noqa: E402

_install_not_provided()

# PyFlink calls that wrap Java code (a Java source function's class name) fail naming the class.
from millstream._java_code import JavaCodeNotSupported  # noqa: E402
