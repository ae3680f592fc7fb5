"""The two-phase GROUP BY over Arrow arrays end to end: ``python bench/sql_agg.py``.

One SQL GROUP BY job over ``--rows`` rows of the CSV orders bench/sql_calc.py makes (a bounded
filesystem source), into the blackhole sink, in batch mode at parallelism 2 on one embedded
MiniCluster, with ``--keys`` choosing the group key: ``qty`` (50 groups) or ``name`` (10,000)::

    SELECT <key>, SUM(qty), COUNT(*), COUNT(id), AVG(qty), MIN(id), MAX(id) FROM orders GROUP BY <key>

run with ``table.exec.millstream.vectorized-agg.enabled`` true (a local phase per batch over Arrow
arrays before the keyed exchange, millstream/table/arrow_agg.py) and false (row by row after the
exchange), in alternating pairs, the order flipped every pair, on the same cluster. Times are wall
seconds from submitting the job to its end; the load average is printed with them. Before timing,
the query's rows over a small file are collected both ways and compared.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from sql_calc import alternating_pairs, order_files, orders_ddl  # noqa: E402  (the same data and pairs)

ROWS, FILES, PAIRS, SEED = 1_000_000, 2, 3, 37
OPTION = "table.exec.millstream.vectorized-agg.enabled"


def query(key: str) -> str:
    return (f"SELECT {key}, SUM(qty) AS total, COUNT(*) AS n, COUNT(id) AS m, AVG(qty) AS mean, MIN(id) AS lo, "
            f"MAX(id) AS hi FROM orders GROUP BY {key}")


def _table_environment(vectorized: bool) -> Any:
    from millstream.table import EnvironmentSettings, TableEnvironment
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", "2")
    t_env.get_config().set(OPTION, "true" if vectorized else "false")
    return t_env


def run_job(directory: Path, vectorized: bool, key: str) -> float:
    t_env = _table_environment(vectorized)
    t_env.execute_sql(orders_ddl(directory))
    key_type = "INT" if key == "qty" else "STRING"
    t_env.execute_sql(f"CREATE TABLE sink (k {key_type}, total INT, n BIGINT, m BIGINT, mean INT, lo BIGINT, "
                      "hi BIGINT) WITH ('connector' = 'blackhole')")
    t0 = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {query(key)}").wait()
    return time.perf_counter() - t0


def collected(directory: Path, vectorized: bool, key: str) -> list[tuple[Any, ...]]:
    t_env = _table_environment(vectorized)
    t_env.execute_sql(orders_ddl(directory))
    with t_env.execute_sql(query(key)).collect() as rows:
        return sorted((tuple(r) for r in rows), key=repr)


def report(rows: int = ROWS, files: int = FILES, pairs: int = PAIRS, seed: int = SEED, key: str = "qty") -> dict[str, float]:
    from millstream.client.execution import ENV_JOBMANAGER
    from millstream.client.minicluster import MiniCluster
    from millstream.runtime import config as cfg

    directory = order_files(rows, files, seed)
    small = order_files(20_000, 1, seed)
    with MiniCluster(cfg.Configuration.from_dict(cfg.env_overrides(os.environ)), num_slots=2) as cluster:
        os.environ[ENV_JOBMANAGER] = cluster.address
        by_arrays, by_rows = collected(small, True, key), collected(small, False, key)
        if by_arrays != by_rows:
            raise SystemExit(f"the two-phase GROUP BY's rows differ from the row path's ({len(by_arrays)} vs {len(by_rows)})")
        load = os.getloadavg()
        print(f"\nsql_agg: GROUP BY {key} ({len(by_rows):,} groups, 6 aggregates) over {rows:,} CSV rows, batch mode, "
              f"p=2; results checked equal both ways on 20,000 rows; load average at start "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
        return alternating_pairs(lambda vectorized: run_job(directory, vectorized, key), pairs, rows, "two-phase")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--keys", choices=("qty", "name"), default="qty")
    a = parser.parse_args()
    report(a.rows, a.files, a.pairs, a.seed, a.keys)


if __name__ == "__main__":
    main()
