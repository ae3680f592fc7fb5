"""The pytest plugin that runs PyFlink's test modules on Millstream (``-p tests.pyflink_compat.plugin``).

Loaded only in the harness's own pytest process. On load it:
- installs the ``pyflink`` -> ``millstream`` import alias (:mod:`.alias`) over the test modules
  under ``MILLSTREAM_PYFLINK_TESTS``;
- has cloudpickle carry every ``pyflink.*`` class and function by value, since the Spark workers
  that run the job have no such module;
- gives each environment the ``_j_stream_execution_environment`` handle the tests hand to
  ``get_j_env_configuration`` (:mod:`.java_handles`);
- binds the stream's declared type to a test sink in ``add_sink`` (PyFlink converts each record to
  that type's Java object before its Java test sink sees it).
Each test's result is sorted by :func:`classify.verdict`: a test that needs a Java object, or
uses an API PyFlink 2.x removed, or uses the Table API, is reported as skipped with the reason. ``MILLSTREAM_PYFLINK_COMPAT_REPORT`` names a JSON file that
receives ``{nodeid: {"outcome", "reason"}}`` at the end of the session.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import cloudpickle
import pytest

from tests.pyflink_compat import alias
from tests.pyflink_compat.classify import FAILED, JAVA, PASSED, REMOVED, SKIPPED, TABLE, verdict
from tests.pyflink_compat.java_handles import JavaEnvHandle

_results: dict[str, dict[str, str]] = {}


def _patch_millstream() -> None:
    from millstream.datastream.data_stream import DataStream
    from millstream.datastream.stream_execution_environment import StreamExecutionEnvironment

    StreamExecutionEnvironment._j_stream_execution_environment = property(JavaEnvHandle)  # type: ignore[attr-defined]
    add_sink = DataStream.add_sink

    def add_sink_binding_type(self: DataStream, sink_func: Any) -> Any:
        from pyflink.datastream.tests.test_util import DataStreamTestSinkFunction

        if isinstance(sink_func, DataStreamTestSinkFunction):
            sink_func = sink_func.for_stream(self.get_type())
        return add_sink(self, sink_func)

    DataStream.add_sink = add_sink_binding_type  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    alias.install(os.environ.get("MILLSTREAM_PYFLINK_TESTS"))
    import pyflink  # noqa: F401  (the proxy package: registered by value below)

    cloudpickle.register_pickle_by_value(sys.modules["pyflink"])
    _patch_millstream()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    entry = _results.setdefault(item.nodeid, {"outcome": PASSED, "reason": ""})
    if report.skipped and entry["outcome"] == PASSED and call.excinfo is not None:
        if call.excinfo.errisinstance(pytest.skip.Exception):
            entry.update(outcome=SKIPPED, reason=str(call.excinfo.value))
        return
    if not report.failed or call.excinfo is None:
        return
    v = verdict(call.excinfo.value)
    if entry["outcome"] in (FAILED, JAVA, REMOVED, TABLE):
        return  # the first failing phase decides (teardown after a failed call adds nothing)
    entry.update(outcome=v.outcome, reason=v.reason)
    if v.outcome == JAVA:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs a Java object: {v.reason}")
    elif v.outcome == REMOVED:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"removed in PyFlink 2.x: {v.reason}")
    elif v.outcome == TABLE:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs the Table API: {v.reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that cannot even be collected counts as one failure, with its reason."""
    if report.failed:
        text = str(report.longrepr).strip().splitlines()
        _results[f"{report.nodeid}::<collection>"] = {"outcome": FAILED, "reason": text[-1] if text else "collection failed"}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    results_dir = os.environ.get("MILLSTREAM_PYFLINK_COMPAT_RESULTS")  # the test sinks' files
    if results_dir:
        shutil.rmtree(results_dir, ignore_errors=True)
    path = os.environ.get("MILLSTREAM_PYFLINK_COMPAT_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_results, f, indent=1, sort_keys=True)
