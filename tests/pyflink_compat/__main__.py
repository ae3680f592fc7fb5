"""``python -m tests.pyflink_compat``: run PyFlink's DataStream tests on Millstream, print counts.

    MILLSTREAM_PYFLINK_TESTS=/path/to/flink/flink-python/pyflink python -m tests.pyflink_compat
    python -m tests.pyflink_compat --tests DIR [--failures] [--report out.json] [-k EXPR] [MODULE ...]

MODULE names a test module under ``DIR/datastream/tests`` (``test_data_stream``); without one,
every ``test_*.py`` there runs. The run is one pytest process (one embedded Millstream cluster for
all of it), with the plugin :mod:`tests.pyflink_compat.plugin`; the alias to Millstream exists only
in that process.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

from tests.pyflink_compat.classify import FAILED, JAVA, PASSED, REMOVED, TABLE, format_table, summarize

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline_passing.txt")
ENV_VAR = "MILLSTREAM_PYFLINK_TESTS"


def test_files(tests_root: str, modules: list[str]) -> list[str]:
    """The PyFlink test modules to run (``datastream/tests/test_*.py`` under ``tests_root``)."""
    folder = os.path.join(tests_root, "datastream", "tests")
    if modules:
        files = [os.path.join(folder, m if m.endswith(".py") else m + ".py") for m in modules]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise FileNotFoundError(f"no such PyFlink test module: {', '.join(missing)}")
        return files
    return sorted(f for f in glob.glob(os.path.join(folder, "test_*.py")) if not f.endswith("test_util.py"))


def run(tests_root: str, modules: list[str], report: str, keyword: str | None = None,
        timeout_s: int = 300) -> tuple[int, dict[str, dict[str, str]]]:
    """Runs the modules in a child pytest; returns its exit code and the per-test results."""
    files = test_files(tests_root, modules)
    env = dict(os.environ)
    env[ENV_VAR] = os.path.abspath(tests_root)
    env["MILLSTREAM_PYFLINK_COMPAT_REPORT"] = report
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.pyflink_compat.plugin", "-p", "no:cacheprovider",
           "--noconftest", "-q", "-rN", f"--timeout={timeout_s}", "--rootdir", tests_root, *files]
    if keyword:
        cmd += ["-k", keyword]
    code = subprocess.call(cmd, cwd=REPO, env=env, stdout=sys.stderr)
    with open(report, encoding="utf-8") as f:
        return code, json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pyflink_compat", description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help="test modules under datastream/tests (default: all)")
    parser.add_argument("--tests", default=os.environ.get(ENV_VAR), help=f"flink-python/pyflink (default: ${ENV_VAR})")
    parser.add_argument("--report", help="write the per-test results (JSON) here")
    parser.add_argument("--failures", action="store_true", help="list each failing, Java-needing, removed-API and Table-API test with its reason")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--write-baseline", action="store_true",
                        help=f"record the passing tests in {os.path.relpath(BASELINE, REPO)} (the CI test's floor)")
    args = parser.parse_args(argv)
    if not args.tests or not os.path.isdir(os.path.join(args.tests, "datastream", "tests")):
        print(f"no PyFlink tests: set {ENV_VAR} (or --tests) to a Flink checkout's flink-python/pyflink "
              f"(got {args.tests!r}); PyPI's apache-flink does not ship them", file=sys.stderr)
        return 2
    report = args.report or tempfile.mkstemp(prefix="pyflink-compat-", suffix=".json")[1]
    try:
        _, results = run(args.tests, args.modules, report, args.keyword)
    finally:
        if not args.report:
            os.remove(report)
    if args.failures:
        for outcome in (FAILED, JAVA, REMOVED, TABLE):
            for nodeid in sorted(n for n, r in results.items() if r["outcome"] == outcome):
                print(f"{outcome:<7} {nodeid.split('::', 1)[-1]}: {results[nodeid]['reason']}")
        print()
    print(format_table(summarize(results)))
    if args.write_baseline:
        with open(BASELINE, "w", encoding="utf-8") as f:
            f.write("# PyFlink tests that passed on Millstream (python -m tests.pyflink_compat --write-baseline)\n")
            f.writelines(n + "\n" for n in sorted(n for n, r in results.items() if r["outcome"] == PASSED))
    return 0


def read_baseline() -> list[str]:
    """The node ids recorded as passing (empty when no baseline was written)."""
    if not os.path.isfile(BASELINE):
        return []
    with open(BASELINE, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


if __name__ == "__main__":
    sys.exit(main())
