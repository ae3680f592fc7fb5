"""Drives one window operator through a real OperatorChain (built from the public API's JobGraph)
with a ManualClock: records with timestamps in, watermarks and processing time advanced by hand,
the window's output (with its timestamps) and side outputs read back."""
from __future__ import annotations

from typing import Any, Callable

from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime.output_tag import OutputTag
from millstream.runtime.task.environment import ManualClock
from millstream.runtime.timestamps import TimestampedBatch, timestamps_of
from tests.unit.test_runtime_chain import collect, make_chain, vertex


class WindowHarness:
    """``build(stream)`` returns the windowed result; ``side_tags`` are collected under their ids."""

    def __init__(self, build: Callable[[Any], Any], side_tags: tuple[OutputTag, ...] = (), clock_ms: int = 0,
                 **env_kwargs: Any) -> None:
        self.env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
        result = build(self.env.from_collection([("x", 0)]))
        collect(result)
        for tag in side_tags:
            collect(result.get_side_output(tag), tag.tag_id)
        self.vertex = vertex(self.env, "Window")
        self.clock = ManualClock(clock_ms)
        self.env_kwargs = env_kwargs
        self.run = make_chain(self.vertex, clock=self.clock, **env_kwargs)
        self.batches: list[tuple[list[Any], list[int | None] | None]] = []
        self._capture()
        self.run.chain.open()

    def _capture(self) -> None:
        head = self.run.chain.head
        emit = head.output

        def capture(records: list[Any]) -> None:
            self.batches.append((list(records), timestamps_of(records)))
            emit(records)

        head.output = capture

    @property
    def operator(self) -> Any:
        return self.run.chain.head

    def feed(self, *records: tuple[Any, int | None]) -> "WindowHarness":
        batch = TimestampedBatch([r for r, _ in records], [t for _, t in records])
        self.run.chain.process_batch(batch, self.vertex.inputs[0].target_node_id)
        return self

    def feed_plain(self, *records: Any) -> "WindowHarness":
        self.run.chain.process_batch(list(records), self.vertex.inputs[0].target_node_id)
        return self

    def watermark(self, watermark: int) -> "WindowHarness":
        self.run.chain.process_watermark(watermark)
        return self

    def advance_to(self, now_ms: int) -> "WindowHarness":
        self.clock.set(now_ms)
        self.run.chain.between_batches()
        return self

    def end(self) -> "WindowHarness":
        self.run.chain.end_input()
        return self

    def out(self) -> list[Any]:
        self.run.chain.flush()
        return list(self.run.collected())

    def take(self) -> list[Any]:
        """The output so far, then forgotten (to check what each step emits)."""
        out = self.out()
        self.run.env.collected["out"] = []
        return out

    def stamped_out(self) -> list[tuple[Any, int | None]]:
        return [(r, t) for records, ts in self.batches for r, t in zip(records, ts or [None] * len(records))]

    def side(self, tag: OutputTag) -> list[Any]:
        self.run.chain.flush()
        return list(self.run.env.collected.get(tag.tag_id, []))

    def snapshot(self) -> dict[str, dict[int, bytes]]:
        return self.run.chain.snapshot_keyed_state()

    def restored(self, snapshot: dict[str, dict[int, bytes]], watermark: int | None = None) -> "WindowHarness":
        """A new chain of the same vertex restored from ``snapshot`` (a restart from a checkpoint)."""
        other = WindowHarness.__new__(WindowHarness)
        other.env, other.vertex, other.env_kwargs = self.env, self.vertex, self.env_kwargs
        other.clock = ManualClock(self.clock.now_ms())
        other.run = make_chain(self.vertex, clock=other.clock, **self.env_kwargs)
        other.batches = []
        other._capture()
        other.run.chain.restore_keyed_state(snapshot)
        other.run.chain.open()
        return other
