"""Stand-in for ``pyflink.testing.test_case_utils``: the test-case base classes over Millstream.

PyFlink's IT cases start a Java MiniCluster per class; here every test runs on the embedded
cluster that Millstream starts on a process's first ``execute()`` and keeps for the process, so
one cluster (one Spark) serves the whole run. As in PyFlink, the streaming and batch cases share
one environment per class (``setUpClass``) with parallelism 2; ``tempdir`` is a fresh folder per
class. Helpers that only make sense on Java objects raise JavaObjectNeeded.
"""
import os
import shutil
import tempfile
import unittest

from millstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from tests.pyflink_compat.classify import JavaObjectNeeded, MillstreamLacks


class PyFlinkTestCase(unittest.TestCase):
    """Base class for unit tests."""

    @classmethod
    def setUpClass(cls):
        cls.tempdir = tempfile.mkdtemp()
        os.environ["FLINK_TESTING"] = "1"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tempdir, ignore_errors=True)

    @classmethod
    def assert_equals(cls, actual, expected):
        actual_py_list = cls.to_py_list(actual) if hasattr(actual, "size") else actual
        actual_py_list.sort()
        expected.sort()
        assert len(actual_py_list) == len(expected)
        assert all(x == y for x, y in zip(actual_py_list, expected))

    @classmethod
    def to_py_list(cls, actual):
        return [actual.get(i) for i in range(actual.size())]


class PyFlinkITTestCase(PyFlinkTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env = StreamExecutionEnvironment.get_execution_environment()


class PyFlinkUTTestCase(PyFlinkTestCase):
    def setUp(self) -> None:
        self.env = StreamExecutionEnvironment.get_execution_environment()
        self.env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
        self.env.set_parallelism(2)


class PyFlinkStreamingTestCase(PyFlinkITTestCase):
    """Base class for streaming tests."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env.set_parallelism(2)
        cls.env.set_runtime_mode(RuntimeExecutionMode.STREAMING)


class PyFlinkBatchTestCase(PyFlinkITTestCase):
    """Base class for batch tests."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env.set_parallelism(2)
        cls.env.set_runtime_mode(RuntimeExecutionMode.BATCH)


class PyFlinkStreamTableTestCase(PyFlinkITTestCase):
    @classmethod
    def setUpClass(cls):
        raise MillstreamLacks("Millstream lacks pyflink.table (StreamTableEnvironment)")


PyFlinkBatchTableTestCase = PyFlinkStreamTableTestCase


class PythonAPICompletenessTestCase(object):
    """PyFlink's check that a Python class has its Java class's methods: needs the Java class."""

    @classmethod
    def python_class(cls):
        pass

    @classmethod
    def java_class(cls):
        pass

    @classmethod
    def excluded_methods(cls):
        return {"equals", "hashCode", "toString"}

    @classmethod
    def java_method_name(cls, python_method_name):
        return python_method_name

    def test_completeness(self):
        raise JavaObjectNeeded(f"compares against the Java class {self.java_class()}")


def invoke_java_object_method(obj, method_name):
    raise JavaObjectNeeded(f"invokes the Java method {method_name}")


def exec_insert_table(table, table_path):
    raise MillstreamLacks("Millstream lacks pyflink.table")
