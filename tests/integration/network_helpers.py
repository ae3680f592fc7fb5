"""Helpers of the data-plane tests (test_network, test_tls_transport): producers and consumers as
threads of this process, channel specs, draining a gate."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from millstream.runtime.network.environment import BUFFER, ChannelSpec, InputGate, ResultPartition

RESULT = bytes.fromhex("0123456789abcdef0123456789abcdef")

ATTEMPT = b"attempt-1"



def poll_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)



class InThread:
    """Runs ``fn(*args)`` in a thread and hands back its result or exception."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self.result = fn(*args)
        except BaseException as e:
            self.error = e
        self.ended_at = time.monotonic()

    def join(self, timeout_s: float = 10.0) -> Any:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the thread did not end in time"
        if self.error is not None:
            raise self.error
        return self.result



def spec(subpartition: int = 0, partition: int = 0, location: str = "tm-0", attempt: bytes = ATTEMPT) -> ChannelSpec:
    return ChannelSpec(RESULT, partition, subpartition, attempt, target_node_id=7, input_index=0, producer_location=location)



def drain(gate: InputGate, timeout_s: float = 10.0,
          on_buffer: Callable[[], None] | None = None) -> list[tuple[ChannelSpec, int, Any]]:
    """Everything the gate delivers until every channel ended."""
    items: list[tuple[ChannelSpec, int, Any]] = []
    deadline = time.monotonic() + timeout_s
    while not gate.all_finished:
        assert time.monotonic() < deadline, f"gate not finished after {timeout_s} s; got {len(items)} items"
        item = gate.poll(0.1)
        if item is not None:
            items.append(item)
            if item[1] == BUFFER and on_buffer is not None:
                on_buffer()
    return items



def emit_all(partition: ResultPartition, records: list[Any], batch: int = 500) -> None:
    """The producer task: emits ``records`` in batches, then ends the partition."""
    for start in range(0, len(records), batch):
        partition.emit(records[start : start + batch])
    partition.finish()



def records_of(items: list[tuple[ChannelSpec, int, Any]]) -> list[Any]:
    return [r for _, kind, payload in items if kind == BUFFER for r in payload]
