"""Metrics overhead (issue 13), one command: ``python bench/metrics_overhead.py``.

run.py's exchange job (generator -> rebalance -> sink, 2 + 2 tasks on two TaskManagers) with the
tasks' time accounting on (``metrics.task.io-timing: true``, the default: the input gate times
each wait for input, the result partitions their waits for credit, giving busy / idle /
backpressured time) and off, measured the same way (wall time of ``env.execute``), alternating
runs so a change of the machine's load hits both sides; the medians' difference is the loss.
Both sides count records and bytes and send their snapshot once a second: that part costs one
addition per batch and is not switchable. On a loaded 2-core machine single runs spread by
+-15 %, more than the accounting can cost, so the cost is also measured directly: an input gate's
``poll`` of ready 1,024-record buffers in this process, timed and untimed (``poll_cost``).

Each run is its own process (one SparkContext per process) and prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RECORDS, PAIRS = 20_000_000, 3  # ~5 minutes on the 2-core machine; shorter runs are mostly noise here
GOAL_PCT = 3.0


def poll_cost(buffers: int = 50_000, rounds: int = 5) -> dict:
    """Microseconds per ``InputGate.poll`` of a ready buffer (1,024 ints, deserialized as in a
    task) with ``time_waits`` off and on; the best of ``rounds`` each, alternating. The buffers
    are put straight into the gate's queue (no sockets: only the poll is measured)."""
    import queue
    import time
    from types import SimpleNamespace

    from millstream.runtime.serialization import RecordSerializer
    from millstream.runtime.network.environment import BUFFER, InputGate

    payload = RecordSerializer().serialize(list(range(1024)))
    channel = SimpleNamespace(spec="bench")

    def run(timed: bool) -> float:
        gate = InputGate([], resolve=lambda spec: None, time_waits=timed)
        gate._return_credit = lambda ch: None  # type: ignore[method-assign]  # no connection to credit
        ready: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(buffers):
            ready.put((channel, BUFFER, payload, len(payload)))
        gate._queue = ready  # type: ignore[assignment]
        started = time.perf_counter()
        for _ in range(buffers):
            gate.poll(0.1)
        return (time.perf_counter() - started) / buffers * 1e6

    off, on = [], []
    for _ in range(rounds):
        off.append(run(False))
        on.append(run(True))
    return {"buffers": buffers, "poll_us_off": min(off), "poll_us_on": min(on), "poll_us_added": min(on) - min(off)}


def overhead(records: int, pairs: int) -> dict:
    from run import _run

    on, off = [], []
    for _ in range(pairs):
        off.append(_run("exchange", str(records), "0", "false"))
        on.append(_run("exchange", str(records), "0", "true"))
    rate_on = statistics.median(r["records_per_s"] for r in on)
    rate_off = statistics.median(r["records_per_s"] for r in off)
    return {"records": records, "pairs": pairs, "on": on, "off": off, "median_records_per_s_on": rate_on,
            "median_records_per_s_off": rate_off, "loss_pct": 100 * (1 - rate_on / rate_off)}


def report(records: int = RECORDS, pairs: int = PAIRS) -> dict:
    load = os.getloadavg()
    result = overhead(records, pairs)
    result["poll"] = poll = poll_cost()
    print(f"\nmetrics overhead (load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores)")
    print(f"exchange, {records:,} records, {pairs} runs each (alternating): time accounting off "
          f"{result['median_records_per_s_off']:,.0f} records/s, on {result['median_records_per_s_on']:,.0f} records/s "
          f"(medians): loss {result['loss_pct']:.1f} % (goal <= {GOAL_PCT:g} %)")
    print("  runs off: " + ", ".join(f"{r['records_per_s']:,.0f}" for r in result["off"]))
    print("  runs on:  " + ", ".join(f"{r['records_per_s']:,.0f}" for r in result["on"]))
    paired = sorted(100 * (1 - a["records_per_s"] / b["records_per_s"]) for a, b in zip(result["on"], result["off"]))
    print(f"  loss per pair (on vs the run before it, sorted): {', '.join(f'{p:.1f} %' for p in paired)}")
    print(f"  one input gate poll of a ready 1,024-record buffer: {poll['poll_us_off']:.2f} us untimed, "
          f"{poll['poll_us_on']:.2f} us timed (best of 5): {poll['poll_us_added']:+.2f} us per buffer")
    return result


def headline(result: dict) -> list:
    """The README table's figures of one report()."""
    from table import Figure

    return [
        Figure("metrics.loss_pct", "throughput lost to task time accounting (medians of alternating runs)",
               result["loss_pct"], "%", "lower", "≤ 3 %", signed=True),
        Figure("metrics.records_per_s_on", f"exchange with time accounting on, {result['records'] / 1e6:g} M records, median",
               result["median_records_per_s_on"], "records/s", "higher"),
        Figure("metrics.poll_us_added", "time accounting's cost per input gate poll", result["poll"]["poll_us_added"], "µs", "lower",
               signed=True),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=RECORDS, help="exchange records per run")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="runs with and without the time accounting")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line too")
    a = parser.parse_args()
    result = report(a.records, a.pairs)
    if a.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
