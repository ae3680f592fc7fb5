"""Parquet read throughput (issue 25): a FileSource job against pyarrow alone, on the same file.

    python bench/parquet_read.py [--rows 2000000] [--runs 3]
    python bench/run.py --only parquet

One Parquet file of ``--rows`` rows (id LONG, name STRING, value DOUBLE, flag BOOLEAN; row groups
of 64 Ki rows, pyarrow's default compression), generated once under data/. Measured, each run in a
fresh process, alternating:
- millstream: ``FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(row_type), file)``
  -> ``filter(lambda r: False)`` -> a sink, on an embedded MiniCluster (one TaskManager); one file
  is read by one subtask at parallelism 1 (also printed: parallelism 2, the file's row groups shared
  by the two subtasks, on a 2-core machine that also runs the JobManager). Timed: ``env.execute`` (deployment included),
  and the job alone: ``job_s`` is that minus the same job's over an empty Parquet file (its
  deployment and start-up, measured in the same process after a warm-up job);
- pyarrow_rows: ``ParquetFile.iter_batches`` and each batch to Python row tuples (what a Python
  job has to produce: the floor for any Python engine handing rows to user code);
- pyarrow_table: ``pq.read_table`` (columnar, no Python objects: the library's own speed).
Printed: rows/s of each (medians), and Millstream's over the Python-rows floor.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROWS, RUNS = 2_000_000, 3


def generate(rows: int) -> str:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = os.path.join(ROOT, "data", f"bench-{rows}.parquet")
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ids = pa.array(range(rows), pa.int64())
    table = pa.table({"id": ids, "name": pa.array([f"name-{i % 10_000}" for i in range(rows)]),
                      "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                      "flag": pa.array([i % 3 == 0 for i in range(rows)])})
    tmp = path + ".tmp"
    pq.write_table(table, tmp, row_group_size=1 << 16)
    os.replace(tmp, path)
    return path


def measure_pyarrow_rows(path: str) -> dict:
    import pyarrow.parquet as pq

    started = time.perf_counter()
    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=2048):
        rows = list(zip(*(c.to_pylist() for c in batch.columns)))
        n += len(rows)
    return {"rows": n, "wall_s": time.perf_counter() - started}


def measure_pyarrow_table(path: str) -> dict:
    import pyarrow.parquet as pq

    started = time.perf_counter()
    n = pq.read_table(path).num_rows
    return {"rows": n, "wall_s": time.perf_counter() - started}


def measure_millstream(path: str) -> dict:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.common import WatermarkStrategy
    from millstream.common.typeinfo import Types
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.file_system import FileSource
    from millstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
    from millstream.runtime import config as cfg
    from millstream.taskmanager.spark.host import SparkHost

    import pyarrow.parquet as pq

    row_type = Types.ROW_NAMED(["id", "name", "value", "flag"], [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()])
    empty = os.path.join(tempfile.mkdtemp(prefix="millstream-bench-parquet-"), "empty.parquet")
    pq.write_table(pq.read_schema(path).empty_table(), empty)

    def run(file: str, parallelism: int = 1) -> float:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(parallelism)
        source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(row_type), file).build()
        env.from_source(source, WatermarkStrategy.no_watermarks(), "parquet").filter(lambda r: False).add_sink(lambda r: None)
        started = time.perf_counter()
        env.execute("parquet read bench")
        return time.perf_counter() - started

    config = cfg.Configuration.from_dict(cfg.env_overrides(os.environ))  # MILLSTREAM_CONF_* (e.g. the task placement)
    with SparkHost(slots=2, tasks_per_slot=2, placement=config.get(cfg.SPARK_TASK_PLACEMENT)) as spark, \
            MiniCluster(config, num_slots=2, spark=spark) as cluster:  # type: ignore[arg-type]
        cluster.add_task_manager()
        os.environ[ENV_JOBMANAGER] = cluster.address
        run(empty)  # warm: the first job pays the Python workers' start
        empty_s = run(empty)
        wall_s = run(path)
        p2_s = run(path, 2)
    return {"rows": pq.ParquetFile(path).metadata.num_rows, "wall_s": wall_s, "empty_job_s": empty_s,
            "job_s": max(wall_s - empty_s, 1e-9), "p2_wall_s": p2_s}


def _run(kind: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(rows: int = ROWS, runs: int = RUNS) -> dict:
    path = generate(rows)
    series: dict[str, list[dict]] = {"millstream": [], "pyarrow_rows": [], "pyarrow_table": []}
    for _ in range(runs):
        for kind in series:
            series[kind].append(_run(kind, path))

    def rate(kind: str, key: str = "wall_s") -> float:
        return statistics.median(r["rows"] / r[key] for r in series[kind])

    result = {"rows": rows, "runs": runs, "file_mb": os.path.getsize(path) / 1e6, "series": series,
              "millstream_rows_per_s": rate("millstream"), "millstream_job_rows_per_s": rate("millstream", "job_s"),
              "pyarrow_rows_per_s": rate("pyarrow_rows"), "pyarrow_table_rows_per_s": rate("pyarrow_table")}
    result["vs_pyarrow_rows"] = result["millstream_job_rows_per_s"] / result["pyarrow_rows_per_s"]
    load = os.getloadavg()
    print(f"\nParquet read, {rows:,} rows ({result['file_mb']:.1f} MB), medians of {runs} "
          f"(load average {load[0]:.2f} on {os.cpu_count()} cores):")
    print(f"  Millstream FileSource p=1, execute: {result['millstream_rows_per_s']:,.0f} rows/s; "
          f"job alone (minus an empty file's job, "
          f"{statistics.median(r['empty_job_s'] for r in series['millstream']):.2f} s): "
          f"{result['millstream_job_rows_per_s']:,.0f} rows/s; p=2 (row groups split between the subtasks), "
          f"execute: {rate('millstream', 'p2_wall_s'):,.0f} rows/s")
    print(f"  pyarrow to Python rows: {result['pyarrow_rows_per_s']:,.0f} rows/s; "
          f"pyarrow read_table (columnar): {result['pyarrow_table_rows_per_s']:,.0f} rows/s")
    print(f"  Millstream job / pyarrow to Python rows: {result['vs_pyarrow_rows']:.2f}x")
    return result


def headline(result: dict) -> list:
    """The README table's figures of one report()."""
    from table import Figure

    what = f"Parquet read, {result['rows'] / 1e6:g} M rows"
    return [
        Figure("parquet.millstream_rows_per_s", f"{what}: Millstream FileSource p=1, job alone",
               result["millstream_job_rows_per_s"], "rows/s", "higher"),
        Figure("parquet.pyarrow_rows_per_s", f"{what}: pyarrow to Python rows", result["pyarrow_rows_per_s"],
               "rows/s", "higher"),
        Figure("parquet.vs_pyarrow_rows", "Parquet read: Millstream job / pyarrow to Python rows",
               result["vs_pyarrow_rows"], "x", "higher"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.measure:
        fn = {"millstream": measure_millstream, "pyarrow_rows": measure_pyarrow_rows,
              "pyarrow_table": measure_pyarrow_table}[a.measure]
        print(json.dumps(fn(*a.args)))
        return
    print(json.dumps({k: v for k, v in report(a.rows, a.runs).items() if k != "series"}))


if __name__ == "__main__":
    main()
