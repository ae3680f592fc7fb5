"""Basic operations on named rows: map, filter, key_by + reduce (PyFlink-style; `python examples/basic_operations.py`).

The source declares its records as ``Types.ROW_NAMED(["id", "info"], ...)``, so functions read
``order.id`` and ``order.info`` as in PyFlink. Each step runs as its own job and prints its result.
"""
from __future__ import annotations

import json

from millstream.common import Types
from millstream.datastream import StreamExecutionEnvironment

ORDERS = [
    (1, json.dumps({"customer": "ada", "total": 120, "ship_to": {"country": "UK", "city": "London"}})),
    (2, json.dumps({"customer": "linus", "total": 35, "ship_to": {"country": "FI", "city": "Helsinki"}})),
    (3, json.dumps({"customer": "grace", "total": 80, "ship_to": {"country": "US", "city": "Arlington"}})),
    (4, json.dumps({"customer": "alan", "total": 60, "ship_to": {"country": "UK", "city": "Manchester"}})),
]


def with_tax(order):
    info = json.loads(order.info)
    info["total"] = round(info["total"] * 1.2)
    return order.id, info["total"]


def country_total(order):
    info = json.loads(order.info)
    return info["ship_to"]["country"], info["total"]


def run_step(title: str, stream, env: StreamExecutionEnvironment) -> None:
    print(f"-- {title}", flush=True)
    stream.print()
    env.execute(title)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    orders = env.from_collection(ORDERS, type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]))

    run_step("map", orders.map(with_tax), env)
    run_step("filter", orders.filter(lambda order: order.id % 2 == 0).map(with_tax), env)
    totals = (
        orders.map(country_total, output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    run_step("running total per country", totals, env)
    run_step("rows as they are", orders.filter(lambda order: order.id == 1), env)


if __name__ == "__main__":
    main()
