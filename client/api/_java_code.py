"""The error for PyFlink calls that hand Millstream Java code to run.

PyFlink can wrap a Java class as a function (``SourceFunction("org.example.MySource")``): the
class runs in Flink's JVM. A Millstream job runs no JVM code: every operator runs as Python inside
its task, so such a call fails at once with :class:`JavaCodeNotSupported`, naming the class.
"""
from __future__ import annotations

__all__ = ["JavaCodeNotSupported"]


class JavaCodeNotSupported(TypeError):
    """A Java class (or Java object) was given where Millstream can only run Python code."""
