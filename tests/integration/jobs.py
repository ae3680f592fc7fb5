"""Jobs and checks shared by integration modules (and tests/compose): the keyed running count whose
exact FileSink output is known ("k,1" ... "k,n_k" for every key k, each once), the user functions
that slow it or make it fail, and the checks of its output. Its functions run on TaskManagers,
which cannot import this repository's tests: tests/conftest.py registers them to pickle by value."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from millstream.client.cluster_client import ClusterClient
from millstream.common import Encoder, WatermarkStrategy
from millstream.common.restart_strategy import RestartStrategies
from millstream.datastream import MapFunction, SourceFunction, StreamExecutionEnvironment
from millstream.datastream.functions import ParallelSourceFunction
from millstream.datastream.connectors.datagen import DataGeneratorSource
from millstream.datastream.connectors.file_system import FileSink
from millstream.runtime.execution_state import JobStatus

from .harness import poll_for

KEYS = 7



class FailWhenMarked(MapFunction):
    """Raises on its ``at``-th record of an attempt while ``marker`` exists; ``once``: the one subtask
    that removes it raises."""

    def __init__(self, marker: str, at: int = 1, once: bool = True) -> None:
        self.marker, self.at, self.once = marker, at, once

    def open(self, runtime_context) -> None:
        self.seen = 0

    def map(self, value):
        self.seen += 1
        if self.seen >= self.at and os.path.exists(self.marker):
            if self.once:
                try:
                    os.unlink(self.marker)
                except FileNotFoundError:
                    return value  # another subtask claimed it: one injected failure, not one per subtask
            raise RuntimeError(f"injected failure (marker {self.marker})")
        return value



def visible_lines(out: Path) -> list[str]:
    return [line for path in out.rglob("*") if path.is_file() and not path.name.startswith(".")
            for line in path.read_text().splitlines()]



def assert_exactly_once(out: Path, count: int) -> None:
    lines = visible_lines(out)
    expected = [f"{k},{j}" for k in range(KEYS) for j in range(1, len(range(k, count, KEYS)) + 1)]
    duplicated = sorted({line for line in lines if lines.count(line) > 1}) if len(lines) != len(set(lines)) else []
    assert not duplicated, f"{len(duplicated)} duplicated lines, e.g. {duplicated[:5]}"
    missing = sorted(set(expected) - set(lines))
    assert not missing, f"{len(missing)} missing lines, e.g. {missing[:5]}"
    assert sorted(lines) == sorted(expected)



def ended(client: ClusterClient, job_id: bytes):  # noqa: ANN201
    summary = client.status(job_id)
    return summary if JobStatus.from_proto(summary.status).is_terminal() else None



def fail_after_checkpoints(address: str, env: StreamExecutionEnvironment, name: str, marker: Path) -> Any:
    """Submits the job, lets it complete two checkpoints, makes its FailWhenMarked fail, and
    returns its summary once it ended."""
    with ClusterClient(address) as client:
        job_id = client.submit(env.get_job_graph(name).proto)
        poll_for(lambda: client.status(job_id).checkpoints.num_completed >= 2, 60, what="two completed checkpoints")
        marker.touch()
        return poll_for(lambda: ended(client, job_id), 120, interval=0.2, what="the job to end")



class NotePid(MapFunction):
    """Writes its worker's pid to ``<directory>/pid-<subtask>-<attempt>`` on open: which process
    to kill -9, and (a second attempt's file) that the subtask came back."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, runtime_context: Any) -> None:
        name = f"pid-{runtime_context.get_index_of_this_subtask()}-{runtime_context.get_attempt_number()}"
        Path(self.directory, name).write_text(str(os.getpid()))

    def map(self, value: Any) -> Any:
        return value


class Throttle(MapFunction):
    """Sleeps ``pause_s`` per record while ``marker`` exists (looked at every 256 records)."""

    def __init__(self, marker: str, pause_s: float) -> None:
        self.marker, self.pause_s = marker, pause_s

    def open(self, runtime_context) -> None:
        self.seen, self.slow = 0, True

    def map(self, value):
        if self.seen % 256 == 0:
            self.slow = os.path.exists(self.marker)
        self.seen += 1
        if self.slow:
            time.sleep(self.pause_s)
        return value



def failover_job(env: StreamExecutionEnvironment, out: Path, count: int, before: list[MapFunction],
                 after: list[MapFunction]) -> None:
    """test_checkpoints.counting_job with functions in the source chain (``before`` the keyed
    exchange) and in the sink chain (``after`` the running count)."""
    stream = env.from_source(DataGeneratorSource(lambda i: i, count), WatermarkStrategy.no_watermarks(), "numbers")
    for function in before:
        stream = stream.map(function)
    counted = (stream.map(lambda i: (i % KEYS, 1))
               .key_by(lambda t: t[0])
               .reduce(lambda a, b: (a[0], a[1] + b[1])))
    for function in after:
        counted = counted.map(function)
    (counted.map(lambda t: f"{t[0]},{t[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()))



def throttled_failover_graph(name: str, out: Path, count: int, marker: str | None, pause_s: float,
                             before: Sequence[MapFunction] = (), after: Sequence[MapFunction] = (),
                             restarts: int = 20, delay_ms: int = 500) -> Any:
    """The JobGraph of :func:`failover_job` at parallelism 2, checkpointing every 300 ms with a
    fixed-delay restart strategy, pausing ``pause_s`` per record while ``marker`` (a path as the
    tasks see it) exists, then ``before``."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, delay_ms))
    throttle = [Throttle(marker, pause_s)] if marker is not None else []
    failover_job(env, out, count, [*throttle, *before], list(after))
    return env.get_job_graph(name)


class Endless(SourceFunction):
    """Emits 0, 1, 2, ... until cancelled, sleeping ``pause_s`` after every ``every`` records (a
    job that runs until the test cancels it, without filling a core)."""

    def __init__(self, every: int = 1, pause_s: float = 0.01) -> None:
        self.every, self.pause_s = every, pause_s
        self.running = True

    def run(self, ctx) -> None:  # noqa: ANN001
        i = 0
        while self.running:
            ctx.collect(i)
            i += 1
            if i % self.every == 0:
                time.sleep(self.pause_s)

    def cancel(self) -> None:
        self.running = False


class ParallelEndless(Endless, ParallelSourceFunction):
    """:class:`Endless` in every subtask of the source: a job of parallelism n fills n slots."""
