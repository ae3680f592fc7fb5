"""The PyFlink test harness's own parts (tests/pyflink_compat): outcome sorting, the import alias,
the stand-in test sink. No cluster: the harness's end-to-end run is
tests/integration/test_pyflink_compat.py."""
from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from millstream.common import Row, Types
from tests.pyflink_compat import alias
from tests.pyflink_compat.classify import (FAILED, JAVA, PASSED, REMOVED, SKIPPED, TABLE, JavaObjectNeeded, MillstreamLacks,
                                           format_table, summarize, verdict)


# -- outcome sorting ---------------------------------------------------------------------------

def test_a_test_that_raised_nothing_passed() -> None:
    assert verdict(None).outcome == PASSED


def test_the_harness_marker_and_javas_handles_mean_java() -> None:
    assert verdict(JavaObjectNeeded("calls get_gateway()")).outcome == JAVA
    assert verdict(AttributeError("'DataStream' object has no attribute '_j_data_stream'")).outcome == JAVA
    assert verdict(TypeError("__init__() got an unexpected keyword argument 'j_configuration'")).reason == \
        "passes a Java object as j_configuration="


def test_a_java_cause_anywhere_in_the_chain_counts() -> None:
    try:
        try:
            raise JavaObjectNeeded("calls get_gateway()")
        except JavaObjectNeeded as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert verdict(outer).outcome == JAVA


def test_everything_else_is_a_failure_with_a_one_line_reason() -> None:
    v = verdict(AssertionError("Lists differ: [1] != [2]\n\nmore detail"))
    assert (v.outcome, v.reason) == (FAILED, "AssertionError: Lists differ: [1] != [2]")
    # a missing Millstream attribute that is not a Java handle is Millstream's gap, not Java's
    assert verdict(AttributeError("'DataStream' object has no attribute 'project'")).outcome == FAILED
    assert verdict(MillstreamLacks("Millstream lacks pyflink.datastream.SlotSharingGroup")).outcome == FAILED


def test_summary_counts_per_module() -> None:
    results = {
        "a/test_x.py::T::test_1": {"outcome": PASSED, "reason": ""},
        "a/test_x.py::T::test_2": {"outcome": JAVA, "reason": "j"},
        "a/test_y.py::T::test_1": {"outcome": FAILED, "reason": "f"},
        "a/test_y.py::T::test_2": {"outcome": SKIPPED, "reason": "s"},
        "a/test_y.py::T::test_3": {"outcome": REMOVED, "reason": "r"},
    }
    table = summarize(results)
    assert table["test_x.py"] == {PASSED: 1, FAILED: 0, JAVA: 1, REMOVED: 0, TABLE: 0, SKIPPED: 0}
    last = format_table(table).splitlines()[-1].split()
    assert last == ["total", "1", "1", "1", "1", "0", "1", "5"]


# -- the import alias ----------------------------------------------------------------------------

@pytest.fixture
def pyflink_root(tmp_path, monkeypatch):
    """A fake flink-python/pyflink with one test module; the alias installed over it, then removed."""
    tests = tmp_path / "pyflink" / "datastream" / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "test_sample.py").write_text(textwrap.dedent("""
        from pyflink.common import Row
        from pyflink.datastream import TimeCharacteristicThatDoesNotExist

        def uses_py4j():
            from py4j.protocol import Py4JJavaError
            return Py4JJavaError
    """))
    monkeypatch.setenv("MILLSTREAM_PYFLINK_COMPAT_RESULTS", str(tmp_path / "results"))
    alias.install(str(tmp_path / "pyflink"))
    yield tmp_path / "pyflink"
    alias.uninstall()


def test_pyflink_names_are_millstreams_own_objects(pyflink_root) -> None:
    import millstream.datastream

    common = importlib.import_module("pyflink.common")
    assert common.Row is Row
    from pyflink.datastream import StreamExecutionEnvironment  # type: ignore[import-not-found]

    assert StreamExecutionEnvironment is millstream.datastream.StreamExecutionEnvironment


def test_a_name_millstream_lacks_fails_only_where_it_is_used(pyflink_root) -> None:
    from pyflink.datastream import NoSuchApi  # type: ignore[import-not-found]

    with pytest.raises(MillstreamLacks, match="Millstream lacks pyflink.datastream.NoSuchApi"):
        NoSuchApi.builder("x")
    with pytest.raises(MillstreamLacks):
        NoSuchApi()
    # a whole module Millstream lacks imports, its names are placeholders too
    from pyflink.datastream.connectors.cassandra import CassandraSink  # type: ignore[import-not-found]

    with pytest.raises(MillstreamLacks, match="pyflink.datastream.connectors.cassandra.CassandraSink"):
        CassandraSink.add_sink(None)


def test_the_java_gateway_is_a_java_object(pyflink_root) -> None:
    from pyflink.java_gateway import get_gateway  # type: ignore[import-not-found]

    with pytest.raises(JavaObjectNeeded):
        get_gateway()


def test_test_modules_come_from_the_tests_root_and_cannot_import_py4j(pyflink_root) -> None:
    module = importlib.import_module("pyflink.datastream.tests.test_sample")
    assert module.__file__ == str(pyflink_root / "datastream" / "tests" / "test_sample.py")
    assert module.Row is Row
    with pytest.raises(JavaObjectNeeded, match="py4j"):
        module.uses_py4j()
    import py4j  # noqa: F401  (outside a test module py4j, PySpark's, imports as usual)


def test_uninstall_removes_the_alias(pyflink_root) -> None:
    importlib.import_module("pyflink.common")
    alias.uninstall()
    assert not any(n == "pyflink" or n.startswith("pyflink.") for n in sys.modules)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pyflink.common")
    alias.install(str(pyflink_root))  # the fixture uninstalls again


# -- the stand-in test sink ----------------------------------------------------------------------

def test_the_test_sink_returns_javas_text_or_the_python_objects(pyflink_root) -> None:
    from pyflink.datastream.tests.test_util import DataStreamTestSinkFunction  # type: ignore[import-not-found]

    sink = DataStreamTestSinkFunction()
    typed = sink.for_stream(Types.TUPLE([Types.STRING(), Types.INT()]))
    typed.invoke(("a", 1))
    typed.invoke(("b", 2))
    typed.close()
    assert sink.get_results() == ["(a,1)", "(b,2)"]
    assert sink.get_results() == []  # collected and cleared, as PyFlink's collectAndClear

    untyped = sink.for_stream(None)
    untyped.invoke(Row("x", 1))
    assert sink.get_results(True) == ["<Row('x', 1)>"]
    untyped.invoke(Row("x", 1))
    assert sink.get_results(True, stringify=False) == [Row("x", 1)]
    untyped.close()


def test_each_test_sink_keeps_its_own_records(pyflink_root) -> None:
    from pyflink.datastream.tests.test_util import DataStreamTestSinkFunction  # type: ignore[import-not-found]

    main, side = DataStreamTestSinkFunction(), DataStreamTestSinkFunction()
    main.for_stream(Types.STRING()).invoke("a")
    side.for_stream(Types.INT()).invoke(1)
    assert (main.get_results(), side.get_results()) == (["a"], ["1"])


def test_a_module_millstream_declines_to_provide_is_an_empty_proxy(pyflink_root, monkeypatch) -> None:
    # Millstream may refuse a PyFlink module with a ModuleNotFoundError that names no module
    real = importlib.import_module

    def refusing(name, package=None):
        if name == "millstream.table":
            raise ModuleNotFoundError("No module named 'millstream.table': not provided by Millstream yet")
        if name == "millstream.broken":
            raise ModuleNotFoundError("No module named 'somedependency'", name="somedependency")
        return real(name, package)

    monkeypatch.setattr(alias.importlib, "import_module", refusing)
    from pyflink.table import DataTypes  # type: ignore[import-not-found]

    with pytest.raises(MillstreamLacks, match="pyflink.table.DataTypes"):
        DataTypes.INT()
    with pytest.raises(ModuleNotFoundError, match="somedependency"):  # a real missing dependency surfaces
        alias.PyFlinkAliasFinder.millstream_module("pyflink.broken")


def test_a_test_cannot_pass_by_swallowing_a_missing_name_or_java(pyflink_root) -> None:
    # PyFlink's tests write `with self.assertRaises(Exception): <bad config>`: a placeholder or the
    # gateway must not satisfy that
    import unittest

    from pyflink.datastream import NoSuchApi  # type: ignore[import-not-found]
    from pyflink.java_gateway import get_gateway  # type: ignore[import-not-found]

    case = unittest.TestCase()
    with pytest.raises(MillstreamLacks):
        with case.assertRaises(Exception):
            NoSuchApi.builder("x").build()
    with pytest.raises(JavaObjectNeeded):
        with case.assertRaises(Exception):
            get_gateway()
    import pickle

    with pytest.raises(MillstreamLacks):
        pickle.dumps(NoSuchApi)


def test_a_long_reason_keeps_the_root_cause_at_its_end() -> None:
    message = "Job 'x' FAILED: OperatorError: Operator '" + "A -> " * 40 + "B': TypeError: unhashable type: 'list'"
    reason = verdict(RuntimeError(message)).reason
    assert len(reason) <= 200
    assert reason.startswith("RuntimeError: Job 'x' FAILED") and reason.endswith("TypeError: unhashable type: 'list'")


def test_apis_pyflink_2_removed_are_their_own_outcome_with_the_reason() -> None:
    from tests.pyflink_compat.classify import REMOVED

    v = verdict(AttributeError("'StreamExecutionEnvironment' object has no attribute 'set_stream_time_characteristic'"))
    assert v.outcome == REMOVED and "Flink 2.0" in v.reason and v.reason.startswith("set_stream_time_characteristic:")
    assert verdict(AttributeError("'StreamExecutionEnvironment' object has no attribute 'register_type'")).outcome == REMOVED
    assert verdict(MillstreamLacks("Millstream lacks pyflink.datastream.MemoryStateBackend")).outcome == REMOVED
    lacks = MillstreamLacks("Millstream lacks pyflink.datastream.ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION")
    assert verdict(lacks).outcome == REMOVED
    # names PyFlink 2.x still has are Millstream's gaps: failures
    assert verdict(AttributeError("'StreamExecutionEnvironment' object has no attribute 'get_state_backend'")).outcome == FAILED
    assert verdict(MillstreamLacks("Millstream lacks pyflink.datastream.EmbeddedRocksDBStateBackend")).outcome == FAILED
    assert verdict(AttributeError("'X' object has no attribute 'register_types_somehow'")).outcome == FAILED


def test_millstreams_java_code_error_means_java() -> None:
    from millstream import JavaCodeNotSupported
    from millstream.datastream import SourceFunction

    with pytest.raises(JavaCodeNotSupported) as info:
        SourceFunction("org.apache.flink.python.util.MyCustomSourceFunction")
    assert verdict(info.value).outcome == JAVA
    assert verdict(TypeError("SourceFunction() takes no arguments")).outcome == FAILED  # a plain TypeError is not


def test_the_table_api_is_its_own_outcome_not_a_datastream_failure() -> None:
    v = verdict(MillstreamLacks("Millstream lacks pyflink.table.StreamTableEnvironment"))
    assert (v.outcome, v.reason) == (TABLE, "uses the Table API (pyflink.table.StreamTableEnvironment)")
    assert verdict(MillstreamLacks("Millstream lacks pyflink.table.DataTypes")).outcome == TABLE
    try:  # found through the exception's chain too
        try:
            raise MillstreamLacks("Millstream lacks pyflink.table")
        except MillstreamLacks as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as wrapped:
        assert verdict(wrapped).outcome == TABLE
    # other missing names are still failures, and a name that merely starts alike is not the Table API
    assert verdict(MillstreamLacks("Millstream lacks pyflink.datastream.SlotSharingGroup")).outcome == FAILED
    assert verdict(MillstreamLacks("Millstream lacks pyflink.tablet.X")).outcome == FAILED
