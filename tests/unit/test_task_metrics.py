"""A task's I/O metrics (Flink's names): computed from the task loop's counters, carried to the
JobMaster's execution attempts."""
from __future__ import annotations

import queue
from types import SimpleNamespace

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime import config as cfg
from millstream.runtime.metrics.task_io import TaskIOMetrics
from millstream.runtime.task.environment import SimpleTaskEnvironment
from millstream.runtime.network.environment import BUFFER, InputGate
from millstream.runtime.task.worker_events import MetricsReported
from millstream.taskmanager.task_body import TaskMetricsReporter
from millstream.taskmanager.taskmanager import network_settings

from .test_live_view import _core, _deployed
from .test_runtime_chain import make_chain, vertex


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_counts_rates_and_time_ratios() -> None:
    clock = FakeClock()
    io = TaskIOMetrics(clock=clock)
    clock.now += 2
    snap = io.snapshot(records_in=2000, records_out=1000, bytes_in=8000, bytes_out=4000, idle_s=0.5, backpressured_s=0.3)
    assert snap["numRecordsIn"] == 2000 and snap["numBytesOut"] == 4000
    assert snap["numRecordsInPerSecond"] == pytest.approx(1000)
    assert snap["numBytesOutPerSecond"] == pytest.approx(2000)
    assert snap["idleTimeMsPerSecond"] == pytest.approx(250)
    assert snap["backPressuredTimeMsPerSecond"] == pytest.approx(150)
    assert snap["busyTimeMsPerSecond"] == pytest.approx(600)
    assert snap["accumulateBusyTimeMs"] == pytest.approx(1200)
    clock.now += 1  # the next interval: all idle
    snap = io.snapshot(2000, 1000, 8000, 4000, idle_s=1.5, backpressured_s=0.3)
    assert (snap["idleTimeMsPerSecond"], snap["busyTimeMsPerSecond"], snap["backPressuredTimeMsPerSecond"]) == (
        pytest.approx(1000), pytest.approx(0), pytest.approx(0))
    assert "currentInputWatermark" not in snap


def test_time_ratios_stay_within_a_second_and_add_up() -> None:
    clock = FakeClock()
    io = TaskIOMetrics(clock=clock)
    clock.now += 1
    snap = io.snapshot(0, 0, 0, 0, idle_s=0.9, backpressured_s=0.4)  # overlapping clock readings
    parts = [snap[k] for k in ("busyTimeMsPerSecond", "idleTimeMsPerSecond", "backPressuredTimeMsPerSecond")]
    assert all(p >= 0 for p in parts) and sum(parts) == pytest.approx(1000)
    again = io.snapshot(0, 0, 0, 0, idle_s=0.9, backpressured_s=0.4)  # the final report, same instant
    assert again["idleTimeMsPerSecond"] == snap["idleTimeMsPerSecond"]


def test_without_time_accounting_only_counts_and_watermarks() -> None:
    io = TaskIOMetrics(time_accounting=False, clock=FakeClock())
    snap = io.snapshot(1, 2, 3, 4, input_watermark=5, output_watermark=4)
    assert not any("Time" in k for k in snap)
    assert snap["currentInputWatermark"] == 5 and snap["currentOutputWatermark"] == 4


def _gate(time_waits: bool) -> InputGate:
    return InputGate([], resolve=lambda spec: None, time_waits=time_waits)


def test_the_input_gate_times_its_waits_for_input() -> None:
    gate = _gate(True)
    assert gate.poll(0.05) is None
    assert gate.idle_s >= 0.04
    untimed = _gate(False)
    assert untimed.poll(0.05) is None
    assert untimed.idle_s == 0.0


def test_the_input_gate_counts_no_idle_time_for_a_ready_buffer() -> None:
    gate = _gate(True)
    channel = SimpleNamespace(spec="spec")
    from millstream.runtime.serialization import RecordSerializer
    payload = RecordSerializer().serialize([1, 2, 3])
    gate._queue = queue.SimpleQueue()
    gate._queue.put((channel, BUFFER, payload, len(payload)))  # type: ignore[arg-type]
    item = gate.poll(1.0)
    assert item is not None and item[2] == [1, 2, 3]
    assert gate.idle_s < 0.05 and gate.bytes_in == len(payload)


def test_chain_tracks_input_and_output_watermarks() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).rebalance().map(lambda x: x).rebalance().map(lambda x: x).print()
    run = make_chain(vertex(env, index=1))
    chain = run.chain
    assert chain.current_input_watermark is None and chain.current_output_watermark is None
    chain.open()
    chain.process_watermark(1_000)
    assert chain.current_input_watermark == 1_000
    assert chain.current_output_watermark == 1_000


def test_the_reporter_sends_io_and_user_metrics_and_descriptors_once() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).rebalance().map(lambda x: x).rebalance().map(lambda x: x).print()
    task_env = SimpleTaskEnvironment()
    run = make_chain(vertex(env, index=1))
    hits = task_env.metrics.operator_group("Map").counter("hits")
    hits.inc(7)
    gate = SimpleNamespace(bytes_in=100, idle_s=0.0)
    partitions = {b"r": SimpleNamespace(bytes_out=40, blocked_s=0.0), b"s": SimpleNamespace(bytes_out=2, blocked_s=0.0)}
    reporter = TaskMetricsReporter(run.chain, task_env, gate, partitions, io_timing=True)  # type: ignore[arg-type]
    message = reporter.message(10, 5)
    assert type(message) is MetricsReported and (message.records_in, message.records_out) == (10, 5)
    values, descriptors = message.metrics, message.descriptors
    assert values["numRecordsIn"] == 10 and values["numBytesIn"] == 100 and values["numBytesOut"] == 42
    assert values["Map.hits"] == 7 and "busyTimeMsPerSecond" in values
    assert descriptors == {"Map.hits": ("operator_hits", {"operator_name": "Map"})}
    assert reporter.message(10, 5).descriptors is None  # unchanged: not sent again
    untimed = TaskMetricsReporter(run.chain, task_env, gate, partitions, io_timing=False)  # type: ignore[arg-type]
    assert "busyTimeMsPerSecond" not in untimed.message(10, 5).metrics


def test_the_jobmaster_keeps_each_current_attempts_latest_snapshot_and_state_times() -> None:
    core = _core(parallelism=2)
    _deployed(core)
    execution = core.current_executions()[0]
    assert "CREATED" in execution.state_times and "DEPLOYING" in execution.state_times
    core.update_records(execution.attempt_id, 10, 10, {"numRecordsIn": 10.0, "busyTimeMsPerSecond": 500.0})
    assert execution.metrics == {"numRecordsIn": 10.0, "busyTimeMsPerSecond": 500.0}
    core.update_records(execution.attempt_id, 5, 5, {"numRecordsIn": 5.0})  # an older heartbeat, overtaken
    assert execution.metrics["numRecordsIn"] == 10.0
    core.update_records(b"unknown".ljust(16, b"\0"), 5, 5, {"x": 1.0})  # not an attempt: ignored


def test_io_timing_option_reaches_the_tasks_network_settings() -> None:
    assert network_settings(cfg.Configuration()).io_timing is True
    conf = cfg.Configuration.from_dict({"metrics.task.io-timing": "false"})
    assert network_settings(conf).io_timing is False
    assert cfg.METRICS_TASK_IO_TIMING.key == "metrics.task.io-timing"


def test_a_quiet_source_still_reports_and_the_reports_stop_with_the_task() -> None:
    import threading
    import time

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2]).rebalance().map(lambda x: x).rebalance().map(lambda x: x).print()
    run = make_chain(vertex(env, index=1))
    reporter = TaskMetricsReporter(run.chain, SimpleTaskEnvironment(), None, {}, io_timing=True)
    sent: list[tuple] = []
    channel = SimpleNamespace(send=sent.append)
    ended = threading.Event()
    ticker = threading.Thread(target=reporter.report_while_quiet, args=(channel, ended), daemon=True)
    ticker.start()
    time.sleep(1.8)  # quiet for more than one reporting interval (1 s)
    ended.set()
    ticker.join(2)
    assert not ticker.is_alive()
    assert 1 <= len(sent) <= 2 and all(type(m) is MetricsReported for m in sent)
    count = len(sent)
    reporter.send(channel, 3, 4)  # the task thread's own report
    time.sleep(0.6)
    assert len(sent) == count + 1 and (sent[-1].records_in, sent[-1].records_out) == (3, 4)
