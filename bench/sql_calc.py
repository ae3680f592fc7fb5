"""The vectorized Calc end to end: ``python bench/sql_calc.py`` (also ``bench/run.py --only sql_calc``).

One SQL job, a projection and a filter of several expressions over ``--rows`` rows of CSV files
(``--files`` files, made once per size; a bounded filesystem source, so nothing rate-limits it),
into the blackhole sink, in batch mode at parallelism 2 on one embedded MiniCluster::

    SELECT id, price * qty, price * 1.2 - 3.0, MOD(qty, 7), UPPER(name), CHAR_LENGTH(name) + qty
    FROM orders WHERE price > 10.0 AND qty < 40 AND name NOT LIKE 'item1%'

run with ``table.exec.millstream.vectorized-calc.enabled`` true (the Calc over Arrow arrays,
millstream/table/arrow_calc.py) and false (row by row), in alternating pairs (``--pairs``), the
order flipped every pair, on the same cluster. Times are wall seconds from submitting the job to
its end. The load average is printed with the results (the machine may be shared). Before timing,
the same query's rows are collected from a small file both ways and compared.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ROWS, FILES, PAIRS, SEED = 1_000_000, 2, 3, 37
OPTION = "table.exec.millstream.vectorized-calc.enabled"
QUERY = ("SELECT id, price * qty AS total, price * 1.2 - 3.0 AS adjusted, MOD(qty, 7) AS bucket, UPPER(name) AS "
         "upper_name, CHAR_LENGTH(name) + qty AS score FROM orders "
         "WHERE price > 10.0 AND qty < 40 AND name NOT LIKE 'item1%'")


def orders_ddl(directory: Path) -> str:
    return ("CREATE TABLE orders (id BIGINT, price DOUBLE, qty INT, name STRING) WITH ("
            f"'connector' = 'filesystem', 'path' = '{directory}', 'format' = 'csv')")


def order_files(rows: int, files: int, seed: int) -> Path:
    """A directory of ``files`` CSV files of ``rows`` orders in all (made once per size and seed)."""
    directory = Path(tempfile.gettempdir()) / "millstream-bench" / f"sql-calc-{rows}-{files}-{seed}"
    done = directory.parent / (directory.name + ".complete")
    if done.exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_file = rows // files
    for f in range(files):
        with open(directory / f"part-{f}.csv", "w") as out:
            lines = []
            for i in range(f * per_file, (f + 1) * per_file if f < files - 1 else rows):
                lines.append(f"{i},{rng.uniform(0, 100):.2f},{rng.randint(1, 50)},item{rng.randint(0, 9999)}\n")
                if len(lines) == 100_000:
                    out.writelines(lines)
                    lines.clear()
            out.writelines(lines)
    done.touch()
    return directory


def _table_environment(vectorized: bool) -> Any:
    from millstream.table import EnvironmentSettings, TableEnvironment
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", "2")
    t_env.get_config().set(OPTION, "true" if vectorized else "false")
    return t_env


def run_job(directory: Path, vectorized: bool) -> float:
    """Seconds from submitting the INSERT to the job's end."""
    t_env = _table_environment(vectorized)
    t_env.execute_sql(orders_ddl(directory))
    t_env.execute_sql("CREATE TABLE sink (id BIGINT, total DOUBLE, adjusted DOUBLE, bucket INT, upper_name STRING, "
                      "score INT) WITH ('connector' = 'blackhole')")
    t0 = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {QUERY}").wait()
    return time.perf_counter() - t0


def collected(directory: Path, vectorized: bool) -> list[tuple[Any, ...]]:
    t_env = _table_environment(vectorized)
    t_env.execute_sql(orders_ddl(directory))
    with t_env.execute_sql(QUERY).collect() as rows:
        return sorted(tuple(r) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--seed", type=int, default=SEED)
    a = parser.parse_args()
    report(a.rows, a.files, a.pairs, a.seed)


def report(rows: int = ROWS, files: int = FILES, pairs: int = PAIRS, seed: int = SEED) -> dict[str, float]:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.runtime import config as cfg

    directory = order_files(rows, files, seed)
    small = order_files(20_000, 1, seed)
    size = sum(p.stat().st_size for p in directory.iterdir())
    with MiniCluster(cfg.Configuration.from_dict(cfg.env_overrides(os.environ)), num_slots=2) as cluster:
        os.environ[ENV_JOBMANAGER] = cluster.address
        by_arrays, by_rows = collected(small, True), collected(small, False)
        if by_arrays != by_rows:
            raise SystemExit(f"the vectorized Calc's rows differ from the row path's "
                             f"({len(by_arrays)} vs {len(by_rows)} rows)")
        load = os.getloadavg()
        print(f"\nsql_calc: projection + filter (6 expressions, 3 conditions) over {rows:,} CSV rows "
              f"({size / 1e6:.0f} MB, {files} files), batch mode, p=2; {len(by_rows):,} rows checked equal both ways; "
              f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
        return alternating_pairs(lambda vectorized: run_job(directory, vectorized), pairs, rows, "vectorized")


def alternating_pairs(run: Any, pairs: int, rows: int, label: str) -> dict[str, float]:
    """``run(vectorized)`` and ``run(not vectorized)`` in ``pairs`` alternating pairs (the order
    flips each pair); the medians, their ratio and the load at the end."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for pair in range(pairs):
        for vectorized in ((True, False) if pair % 2 == 0 else (False, True)):
            s = run(vectorized)
            times[vectorized].append(s)
            print(f"  pair {pair + 1}: {label if vectorized else 'row path':<10} {s:7.1f} s "
                  f"({rows / s:,.0f} rows/s)  load {os.getloadavg()[0]:.2f}", flush=True)
    v, r = statistics.median(times[True]), statistics.median(times[False])
    load = os.getloadavg()
    print(f"  median: {label} {v:.1f} s, row path {r:.1f} s: {r / v:.2f}x; "
          f"load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return {"vectorized_s": v, "row_path_s": r, "speedup": r / v, "load": load[0]}


def headline(r: dict[str, float]) -> list[Any]:
    from table import Figure

    return [Figure("sql_calc.vectorized_s", "SQL projection + filter, 1 M rows: vectorized Calc, job only",
                   r["vectorized_s"], "s", "lower"),
            Figure("sql_calc.speedup", "SQL projection + filter: row path / vectorized Calc, job time",
                   r["speedup"], "x", "higher")]


if __name__ == "__main__":
    main()
