"""The JobMaster's OperatorCoordinators: one KafkaSource split enumerator per source vertex that
asks for one (its JobVertex head's ``coordinator`` settings), run on the JobMaster's loop.

The shell of :mod:`.source_coordinator`: it asks the broker in a thread (``kafka_metadata``),
runs periodic discovery on a timer, sends the enumerator's events to the reader tasks over the
TaskExecutor's SendOperatorEvent RPC and hands the readers' events to it.

Events and checkpoint triggers to a reader task go out **in order, one at a time** per task
attempt (Flink's event valve has the same purpose): the checkpoint driver snapshots the
enumerators just before it triggers the sources, so an assignment made before the snapshot reaches
the task before the barrier (it is in the reader's snapshot) and one made after it comes after
the barrier (it is in the enumerator's assignments since that checkpoint, given back if the reader
restores from it).

A failing discovery (unreachable broker, a topic that does not exist) fails the job, as Flink's
enumerator does; a restarted job discovers again.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc

from millstream.jobmanager.jobmaster.job_master_core import JobMasterCore
from millstream.jobmanager.jobmaster.source_coordinator import CoordinatorCommand, Discover, KafkaSplitEnumerator, SendEvent
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.checkpoint_storage import CompletedCheckpoint
from millstream.runtime.execution_state import ExecutionState
from millstream.runtime.operators.kafka_splits import factory_from_settings, source_options
from millstream.runtime.operators.source_events import ReaderRegistration, decode, encode

log = logging.getLogger(__name__)

__all__ = ["SourceCoordinators"]


@dataclass
class _Vertex:
    name: str
    enumerator: KafkaSplitEnumerator
    client: Any  # kafka_metadata.KafkaMetadataClient, made on first use (confluent-kafka loads only then)
    settings: bytes
    interval_ms: int
    timer: asyncio.TimerHandle | None = None
    # The client is used and closed in threads only: a close waits for the discovery in flight
    # (librdkafka's consumer must not be closed under another thread's call).
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def new_splits(self, command: Discover) -> list[Any]:
        """Blocking: a thread's."""
        with self.lock:
            if self.closed:
                return []
            if self.client is None:
                # lazy: confluent-kafka loads only in JobManagers running a KafkaSource
                from millstream.runtime.operators.kafka_metadata import KafkaMetadataClient
                self.client = KafkaMetadataClient(factory_from_settings(self.settings))
            result: list[Any] = self.client.new_splits(command.known, command.initial)
            return result

    def close(self) -> None:
        """Blocking: a thread's."""
        with self.lock:
            self.closed = True
            client, self.client = self.client, None
        if client is not None:
            client.close()


class SourceCoordinators:
    """Every coordinated source vertex of one job. ``te``: the TaskExecutorClients (gateways, the
    in-flight limit, the RPC timeout); ``fail_job(message)``: a global failure; ``spawn``: the
    JobMaster's tracked background tasks."""

    def __init__(self, core: JobMasterCore, te: Any, fail_job: Callable[[str], None],
                 spawn: Callable[[Any], None]) -> None:
        self._core = core
        self._te = te
        self._fail_job = fail_job
        self._spawn = spawn
        self._vertices: dict[str, _Vertex] = {}
        self._chains: dict[bytes, asyncio.Future[Any]] = {}  # attempt -> its last ordered call
        self._stopped = False
        for jv in core.graph.job_vertices:
            settings = jv.proto.operators[0].coordinator if jv.proto.operators else b""
            if not settings:
                continue
            factory = factory_from_settings(settings)
            options = source_options(factory.properties, factory.bounded_mode)
            self._vertices[jv.id.hex()] = _Vertex(
                jv.name, KafkaSplitEnumerator(jv.parallelism, factory.bounded_mode, options.discovery_interval_ms > 0),
                None, settings, options.discovery_interval_ms)

    def __bool__(self) -> bool:
        return bool(self._vertices)

    # -- lifecycle --------------------------------------------------------------------------------

    def restore(self, point: CompletedCheckpoint | None) -> None:
        """Before the job starts: the enumerators' states of the checkpoint or savepoint restored."""
        if point is None:
            return
        for vertex_hex, vertex in self._vertices.items():
            state = point.coordinator_states.get(vertex_hex)
            if state is not None:
                vertex.enumerator.restore(state)
                log.info("%s: split enumerator restored from checkpoint %d", vertex.name, point.checkpoint_id)

    def job_running(self) -> None:
        """The job is RUNNING (first or after a restart): start the enumerators, or discover again
        where a discovery failed (a one-time discovery that failed never ran)."""
        self.follow_parallelism()
        for vertex_hex, vertex in self._vertices.items():
            self._run(vertex_hex, vertex.enumerator.start())

    def follow_parallelism(self) -> None:
        """Before tasks deploy: an enumerator whose vertex the adaptive scheduler sized anew (its
        first graph at the slots there are, or a rescale) is reset to the restored checkpoint at
        the vertex's parallelism (fresh without one) and discovers again, so every partition has
        its owner among the readers that will register."""
        if self._stopped:
            return
        point = self._core.restore_point
        parallelism = {jv.id.hex(): jv.parallelism for jv in self._core.graph.job_vertices}
        for vertex_hex, vertex in self._vertices.items():
            if parallelism[vertex_hex] == vertex.enumerator.parallelism:
                continue
            state = point.coordinator_states.get(vertex_hex) if point is not None else None
            log.info("%s: split enumerator reset to %s at parallelism %d", vertex.name,
                     f"checkpoint {point.checkpoint_id}" if state is not None else "its start",  # type: ignore[union-attr]
                     parallelism[vertex_hex])
            vertex.enumerator.reset_to_checkpoint(parallelism[vertex_hex], state)
            self._run(vertex_hex, vertex.enumerator.start())

    def stop(self) -> None:
        self._stopped = True
        for vertex in self._vertices.values():
            if vertex.timer is not None:
                vertex.timer.cancel()
                vertex.timer = None
            asyncio.get_running_loop().run_in_executor(None, vertex.close)

    # -- checkpoints ------------------------------------------------------------------------------

    def snapshot(self, checkpoint_id: int) -> dict[str, Any]:
        return {vertex_hex: v.enumerator.snapshot(checkpoint_id) for vertex_hex, v in self._vertices.items()}

    def checkpoint_complete(self, checkpoint_id: int) -> None:
        for vertex in self._vertices.values():
            vertex.enumerator.checkpoint_complete(checkpoint_id)

    # -- readers ----------------------------------------------------------------------------------

    def _vertex_of(self, attempt_id: bytes) -> tuple[str, int] | None:
        execution = self._core.executions.get(attempt_id)
        if execution is None:
            return None
        vertex_hex = execution.vertex.job_vertex.id.hex()
        return (vertex_hex, execution.vertex.subtask_index) if vertex_hex in self._vertices else None

    def is_coordinated(self, attempt_id: bytes) -> bool:
        return self._vertex_of(attempt_id) is not None

    def operator_event(self, attempt_id: bytes, payload: bytes) -> None:
        """A reader's event; one of a stale attempt is dropped."""
        found = self._vertex_of(attempt_id)
        execution = self._core.executions.get(attempt_id)
        if found is None or execution is None or execution.state.is_terminal():
            log.info("ignoring an operator event of stale or unknown attempt %s", attempt_id.hex())
            return
        vertex_hex, subtask = found
        event = decode(payload)
        if not isinstance(event, ReaderRegistration):
            raise ValueError(f"a source reader sent {event!r}; the enumerator takes registrations only")
        vertex = self._vertices[vertex_hex]
        self._run(vertex_hex, vertex.enumerator.reader_registered(subtask, attempt_id, event.restored_checkpoint_id))

    def task_ended(self, attempt_id: bytes) -> None:
        found = self._vertex_of(attempt_id)
        if found is not None:
            self._vertices[found[0]].enumerator.reader_lost(found[1], attempt_id)

    # -- commands ---------------------------------------------------------------------------------

    def _run(self, vertex_hex: str, commands: list[CoordinatorCommand]) -> None:
        vertex = self._vertices[vertex_hex]
        for command in commands:
            if isinstance(command, Discover):
                self._spawn(self._discover(vertex_hex, vertex, command))
            elif isinstance(command, SendEvent):
                execution = self._core.executions.get(command.attempt_id)
                if execution is None or execution.slot is None:
                    continue  # gone: its subtask's next reader gets the splits back
                request = cpb.OperatorEventToTask(execution_attempt_id=command.attempt_id, payload=encode(command.event))
                self.send_ordered(command.attempt_id, execution.slot.tm_address, "send_operator_event", request)

    async def _discover(self, vertex_hex: str, vertex: _Vertex, command: Discover) -> None:
        try:
            splits = await asyncio.to_thread(vertex.new_splits, command)
        except Exception as exc:
            vertex.enumerator.discovery_failed()
            if self._stopped:
                return
            log.warning("%s: partition discovery failed: %s", vertex.name, exc)
            self._fail_job(f"{vertex.name}: the KafkaSource's split enumerator failed: {exc}")
        else:
            if self._stopped:
                return
            self._run(vertex_hex, vertex.enumerator.discovered(splits))
        if vertex.interval_ms > 0 and not self._stopped:
            if vertex.timer is not None:
                vertex.timer.cancel()
            vertex.timer = asyncio.get_running_loop().call_later(vertex.interval_ms / 1000, self._periodic, vertex_hex)

    def _periodic(self, vertex_hex: str) -> None:
        vertex = self._vertices[vertex_hex]
        vertex.timer = None
        if not self._stopped:
            self._run(vertex_hex, vertex.enumerator.discover())

    def send_ordered(self, attempt_id: bytes, address: str, method: str, request: Any) -> None:
        """A TaskExecutor call to a reader task after every earlier one to it ended (see the module
        docstring): operator events and checkpoint triggers."""
        previous = self._chains.get(attempt_id)
        task = asyncio.ensure_future(self._call_after(previous, attempt_id, address, method, request))
        self._chains[attempt_id] = task

        def done(t: asyncio.Future[Any], a: bytes = attempt_id) -> None:
            if self._chains.get(a) is t:
                del self._chains[a]
        task.add_done_callback(done)
        self._spawn(task)

    async def _call_after(self, previous: asyncio.Future[Any] | None, attempt_id: bytes, address: str, method: str,
                          request: Any) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        try:
            async with self._te.in_flight:
                await getattr(self._te.gateway(address), method)(request, timeout=self._te.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return  # the task ended: its subtask's next reader gets its splits back
            log.warning("%s to %s failed: %s", method, address, exc.code().name)
            execution = self._core.executions.get(attempt_id)
            if method == "send_operator_event" and execution is not None and execution.state is ExecutionState.RUNNING:
                # A split the reader never got would never be read: Flink fails the task; so does this.
                self._fail_job(f"{execution.name}: a split assignment could not be delivered: {exc.code().name}")
