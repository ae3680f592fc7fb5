"""A source task's idle time (taskmanager.task_body.SourceIdleClock): time in the source's own code off the
CPU (sleeping, waiting for its rate) is idle; time in emit (chained operators, even sleeping ones) is not."""
from __future__ import annotations

import time

from millstream.client.stream_graph import display_name
from millstream.taskmanager.task_body import source_idle_clock


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_sleeping_outside_emit_is_idle_and_inside_emit_or_on_the_cpu_is_not() -> None:
    clock = source_idle_clock()
    assert clock is not None  # Linux: every thread has a CPU clock
    sleepy_emit = clock.timed(lambda batch: time.sleep(0.6))  # a chained map that sleeps: busy, as in Flink
    time.sleep(0.3)           # the SourceFunction waits for its next record: idle
    sleepy_emit([1])
    _spin(0.1)                # the source computes its next record: busy (off the CPU only if the host is loaded)
    idle = clock.idle_s()
    assert 0.25 <= idle < 0.6, idle  # the sleep, not emit's 0.6 s
    time.sleep(0.2)           # the current stretch outside emit counts before the next emit
    assert clock.idle_s() >= idle + 0.15
    earlier = clock.idle_s()
    assert clock.idle_s() >= earlier  # never decreasing


def test_display_names_drop_object_addresses() -> None:
    class MyTrigger:
        pass

    def extractor(x):  # noqa: ANN001, ANN202
        return x

    name = f"Window(Dynamic({extractor!r}), PurgingTrigger({MyTrigger()!r}), {(lambda: 0)!r})"
    assert display_name(name) == "Window(Dynamic(extractor), PurgingTrigger(MyTrigger), lambda)"
    assert display_name("Window(TumblingEventTimeWindows(1000, 0), EventTimeTrigger(), ReduceFunction)") == \
        "Window(TumblingEventTimeWindows(1000, 0), EventTimeTrigger(), ReduceFunction)"
