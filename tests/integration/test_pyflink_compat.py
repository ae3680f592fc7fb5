"""PyFlink's own DataStream tests on Millstream (tests/pyflink_compat), end to end.

Runs every PyFlink test module under ``$MILLSTREAM_PYFLINK_TESTS/datastream/tests`` in one child
pytest process (one embedded cluster, one Spark for the whole run) and fails when a test recorded
in tests/pyflink_compat/baseline_passing.txt no longer passes. PyFlink's test modules live only in
the Flink repository (PyPI's apache-flink wheel and sdist ship none), so without a checkout this
test skips and says so.
"""
from __future__ import annotations

import os

import pytest

from tests.pyflink_compat.__main__ import ENV_VAR, read_baseline, run
from tests.pyflink_compat.classify import FAILED, JAVA, PASSED, REMOVED, SKIPPED, TABLE, format_table, summarize

ROOT = os.environ.get(ENV_VAR, "")

pytestmark = pytest.mark.skipif(
    not os.path.isdir(os.path.join(ROOT, "datastream", "tests")),
    reason=f"PyFlink's test modules are not on this machine: set {ENV_VAR} to a Flink checkout's "
           "flink-python/pyflink (PyPI's apache-flink ships no tests; README: PyFlink's own tests)",
)


@pytest.mark.timeout(900)
def test_pyflink_datastream_tests_keep_passing(tmp_path) -> None:
    _, results = run(ROOT, [], str(tmp_path / "results.json"))
    print(format_table(summarize(results)))
    assert results, "the harness ran no PyFlink test"
    assert {r["outcome"] for r in results.values()} <= {PASSED, FAILED, JAVA, REMOVED, TABLE, SKIPPED}
    regressed = [n for n in read_baseline() if n in results and results[n]["outcome"] != PASSED]
    assert not regressed, "PyFlink tests that passed before fail now:\n" + "\n".join(
        f"{n}: {results[n]['reason']}" for n in regressed)
