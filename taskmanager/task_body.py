"""The body of a deployed task: runs inside a PySpark executor's Python worker.

It unpacks the TaskDeploymentDescriptor, makes the job's artifacts importable, serves its result
partitions, connects its input gates to the producers, builds the operator chain and drives it for
the task's whole life. Everything it tells the TaskManager (state changes, where its partitions
are served, printed lines, collected records) travels in order over the worker's control channel;
the final FINISHED / FAILED / CANCELED is the runner's TaskExit.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import cloudpickle
import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.task import checkpointing
from millstream.taskmanager.archives import task_working_directory
from millstream.runtime.task.barrier_handler import (
    END_OF_PARTITION,
    AbortCheckpoint,
    ChannelEnded,
    CheckpointBarrier,
    Deliver,
    ForwardBarrier,
    Snapshot,
    create_barrier_handler,
)
from millstream.runtime.task.batch_slicer import BatchSlicer
from millstream.runtime.task.worker_events import (
    CollectedBatch,
    Failing,
    LinesPrinted,
    MetricsReported,
    NotifyCheckpoint,
    OperatorEventDelivered,
    OperatorEventSent,
    OutputCaptured,
    PartitionsServed,
    StateChanged,
    TriggerCheckpoint,
)
from millstream.runtime.task.chain import OperatorChain
from millstream.runtime.user_code import LOADING_LOCK
from millstream.runtime.operators.combiner import CombiningWriter
from millstream.runtime.task.environment import SimpleTaskEnvironment
from millstream.runtime.metrics.task_io import TaskIOMetrics
from millstream.runtime.rpc.service import sync_channel
from millstream.taskmanager import python_env
from millstream.runtime.rpc.security import Credentials
from millstream.runtime.rpc.tls import TlsSettings
from millstream.runtime.timestamps import LONG_MAX
from millstream.runtime.watermarks import InputWatermarks
from millstream.taskmanager.user_processes import TaskProcesses
from millstream.taskmanager.task_output import OutputCapture
from millstream.runtime.network.environment import (
    BUFFER,
    ChannelSpec,
    EndOfPartition,
    ExchangeError,
    InputGate,
    PartitionError,
    PartitionServer,
    ResultPartition,
    Watermark,
    WatermarkStatus,
)

SOURCE_BATCH_SIZE = 1024
STOP_POLL_S = 0.005  # how often a task waiting for its stop savepoint's outcome looks for it
RECORDS_PER_BUFFER = 1024
RECORDS_INTERVAL_MS = 1000  # the record totals go to the TaskManager at most this often (and once at the end)
CONNECT_TIMEOUT_S = 60.0
RELAY_POLL_S = 0.05  # the cancel relay checks this often whether its task ended (then it ends too)
CONSUMED_TIMEOUT_S = 3600.0  # a producer waits this long for slow consumers before giving up
# A lookup answered with these may succeed later (the TaskManager is starting, restarting or busy);
# anything else is a real error and fails the channel at once, naming it.
RETRIABLE_LOOKUP_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
TASK_CREDENTIAL_SECRET = "task-credential"  # the attempt's secret (spark_runner's greeting) its lookups carry


@dataclass(frozen=True)
class NetworkSettings:
    """The TaskManager's exchange settings its tasks use (``runtime.network.environment.memory.*``, and
    ``security.ssl.*`` for the data plane and the partition look-ups)."""

    buffers_per_channel: int = 4  # credits a consumer grants each input channel
    max_buffers_per_channel: int = 4  # buffers a producer queues per subpartition before it blocks
    tls: TlsSettings | None = None  # PEM paths (the files must exist where the worker runs)
    io_timing: bool = True  # metrics.task.io-timing: time the waits for input and output (busy/idle/backpressured)


@dataclass(frozen=True)
class ShippedArtifacts:
    """A job's artifacts (``env.add_python_file`` and friends) travelling inside the task payload
    to a worker on another machine, where the TaskManager's download directory does not exist."""

    job_id: str
    files: tuple[tuple[str, bytes], ...]  # (artifact name, content)

    def paths(self) -> list[str]:
        """Writes them once per worker machine and job; the sys.path entries, as the TaskManager's."""
        job_dir = os.path.join(tempfile.gettempdir(), "millstream-artifacts", self.job_id)
        os.makedirs(job_dir, exist_ok=True)
        paths: list[str] = []
        for name, content in self.files:
            target = os.path.join(job_dir, name)
            if not (os.path.exists(target) and os.path.getsize(target) == len(content)):
                part = f"{target}.{os.getpid()}.{threading.get_ident()}.part"
                with open(part, "wb") as f:
                    f.write(content)
                os.replace(part, target)  # tasks of the job on this machine may write it at once
            paths.append(job_dir if name.endswith(".py") else target)
        return list(dict.fromkeys(paths))


def _task_environment(tdd: cpb.TaskDeploymentDescriptor, channel: Any) -> SimpleTaskEnvironment:
    """The chain's TaskEnvironment, with printed lines and collected records sent to the TaskManager."""
    sequence = itertools.count()

    def collect(collect_id: str, payload: bytes) -> None:  # serialized and split by the environment
        channel.send(CollectedBatch(collect_id, tdd.subtask_index, next(sequence), payload))

    return SimpleTaskEnvironment.from_deployment(
        tdd,
        print_sink=lambda lines, to_stderr: channel.send(LinesPrinted(lines, to_stderr)),
        collect_sink=collect,
        source_batch_size=SOURCE_BATCH_SIZE,
        operator_event_sink=lambda payload: channel.send(OperatorEventSent(payload)),
    )


class PartitionResolver:
    """Asks a producer's TaskManager where the producer task serves its partitions."""

    def __init__(self, rpc_timeout_s: float = 5.0, credentials: Credentials | None = None) -> None:
        self._stubs: dict[str, cpb_grpc.TaskExecutorStub] = {}
        self._channels: list[Any] = []
        self._timeout = rpc_timeout_s
        self._credentials = credentials

    def __call__(self, spec: ChannelSpec) -> tuple[str, int] | None:
        stub = self._stubs.get(spec.producer_location)
        if stub is None:
            channel = sync_channel(spec.producer_location, credentials=self._credentials)
            self._channels.append(channel)
            stub = self._stubs[spec.producer_location] = cpb_grpc.TaskExecutorStub(channel)
        try:
            response = stub.LookupPartition(cpb.LookupPartitionRequest(producer_attempt_id=spec.producer_attempt_id), timeout=self._timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code in RETRIABLE_LOOKUP_CODES:
                return None  # the producer's TaskManager is not reachable (yet) or slow: ask again
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise ConnectionError(
                f"looking up partition {spec.result_id.hex()}#{spec.partition_index} at the producer's "
                f"TaskManager {spec.producer_location} failed: {code.name if code else 'error'}: {details}"
            ) from exc
        if response.state == cpb.LookupPartitionResponse.GONE:
            raise ConnectionError(
                f"the producer of partition {spec.result_id.hex()}#{spec.partition_index} ended before this task connected"
            )
        if response.state == cpb.LookupPartitionResponse.READY:
            host, port = response.address.rsplit(":", 1)
            return host, int(port)
        return None

    def close(self) -> None:
        for channel in self._channels:
            channel.close()


def _result_partitions(tdd: cpb.TaskDeploymentDescriptor, is_cancelled: Any,
                       network: NetworkSettings = NetworkSettings()) -> tuple[dict[bytes, ResultPartition], dict[bytes, Any]]:
    """The task's result partitions, and the writers the chain emits into (a combiner in front of a
    partition whose consumer aggregates per key in BATCH mode)."""
    produced = {r.id: r for r in tdd.vertex.produced}
    partitions: dict[bytes, ResultPartition] = {}
    writers: dict[bytes, Any] = {}
    for descriptor in tdd.produced_partitions:
        dataset = produced[descriptor.result_id]
        partitioner = cloudpickle.loads(dataset.partitioner.payload)
        partition = partitions[descriptor.result_id] = ResultPartition(
            descriptor.result_id,
            descriptor.partition_index,
            descriptor.num_subpartitions,
            partitioner,
            tdd.execution_attempt_id,
            records_per_buffer=RECORDS_PER_BUFFER,
            max_backlog_per_subpartition=network.max_buffers_per_channel,
            is_cancelled=is_cancelled,
        )
        writers[descriptor.result_id] = partition
        if dataset.combiner:
            name = f"{tdd.vertex.name} -> pre-aggregation for node {dataset.target_node_id}"
            writers[descriptor.result_id] = CombiningWriter(partition, cloudpickle.loads(dataset.combiner), partitioner.key_selector, name)
    return partitions, writers


def _channel_specs(tdd: cpb.TaskDeploymentDescriptor) -> list[ChannelSpec]:
    """One channel per partition of each gate's consumed partition group, reading the gate's subpartition."""
    specs: list[ChannelSpec] = []
    for gate in tdd.input_gates:
        group = cpb.ConsumedPartitionGroupDescriptor.FromString(gate.consumed_partition_group)
        specs.extend(
            ChannelSpec(
                result_id=gate.result_id,
                partition_index=p.partition_index,
                subpartition_index=gate.subpartition_index,
                producer_attempt_id=p.producer_attempt_id,
                target_node_id=gate.target_node_id,
                input_index=gate.input_index,
                producer_location=p.producer_data_address,
            )
            for p in group.partitions
        )
    return specs


def _input_gate(tdd: cpb.TaskDeploymentDescriptor, resolve: PartitionResolver, is_cancelled: Any,
                network: NetworkSettings = NetworkSettings()) -> InputGate:
    return InputGate(_channel_specs(tdd), resolve, initial_credit=network.buffers_per_channel, is_cancelled=is_cancelled,
                     connect_timeout_s=CONNECT_TIMEOUT_S, tls=network.tls, time_waits=network.io_timing)


class StoppedWithSavepoint(BaseException):
    """Raised on the task thread once the stop savepoint the task snapshotted is complete: it
    unwinds the task loop (a BaseException, so no operator or user ``except Exception`` stops it)
    and the task ends FINISHED without an end of input, its sinks committed by the savepoint."""


class CheckpointControl:
    """The task thread's side of the checkpoint control messages (polled between batches).

    A source injects barrier n where the trigger finds it, between two batches. A task triggered
    directly because its inputs all finished snapshots only once it processed them to their end
    (its producers' records are in no other snapshot). A finishing task (end-of-partition sent)
    declines: its consumers saw the end of its data already.
    """

    def __init__(self, channel: Any, checkpointer: checkpointing.TaskCheckpointer | None, is_source: bool,
                 env: SimpleTaskEnvironment | None = None) -> None:
        """``checkpointer`` None: the job takes no checkpoints; only operator events come (to ``env``)."""
        self.channel = channel
        self.env = env
        self.checkpointer = checkpointer
        self.inputs_ended = is_source
        self.closing = False
        self._deferred: CheckpointBarrier | None = None

    def poll(self) -> None:
        while (msg := self.channel.recv_nowait()) is not None:
            if type(msg) is OperatorEventDelivered:  # in order with the triggers: see OperatorEventDelivered
                self._deliver(msg.payload)
            elif self.checkpointer is None:
                continue
            elif type(msg) is TriggerCheckpoint:
                self._trigger(CheckpointBarrier(msg.checkpoint_id, msg.timestamp_ms, stop=msg.stop, drain=msg.drain,
                                                savepoint=msg.savepoint))
            elif type(msg) is NotifyCheckpoint:
                self.checkpointer.notify(msg.checkpoint_id, msg.aborted)
        if self.checkpointer is not None and self.checkpointer.stop_savepoint is not None and not self.closing:
            self._await_stop_savepoint()

    def _await_stop_savepoint(self) -> None:
        """The task snapshotted stop-with-savepoint's synchronous savepoint: nothing more is
        processed (a source emits nothing after its barrier) until it completes, then the task ends
        (StoppedWithSavepoint), or it is aborted, then the task goes on (Flink's stop that failed).
        A cancel ends the wait; the task loops see it."""
        checkpointer = self.checkpointer
        assert checkpointer is not None
        while checkpointer.stop_savepoint is not None:
            msg = self.channel.recv_nowait()
            if msg is None:
                if self.channel.wait_cancelled(STOP_POLL_S):
                    return
            elif type(msg) is NotifyCheckpoint:
                checkpointer.notify(msg.checkpoint_id, msg.aborted)
            elif type(msg) is OperatorEventDelivered:
                self._deliver(msg.payload)
            elif type(msg) is TriggerCheckpoint:  # cannot come before the savepoint's outcome: refuse it
                checkpointer.decline(msg.checkpoint_id, "CHECKPOINT_DECLINED_TASK_CLOSING", "the task is stopping with a savepoint")
        if checkpointer.stopped:
            raise StoppedWithSavepoint(checkpointer.last_completed_id)

    def _deliver(self, payload: bytes) -> None:
        if self.env is None:
            raise RuntimeError("an operator event reached a task that takes none")
        self.env.deliver_operator_event(payload)

    def _trigger(self, barrier: CheckpointBarrier) -> None:
        assert self.checkpointer is not None
        if self.closing:
            self.checkpointer.decline(barrier.checkpoint_id, "CHECKPOINT_DECLINED_TASK_CLOSING", "the task is finishing")
        elif self.inputs_ended:
            self.checkpointer.checkpoint(barrier)
        else:
            self._deferred = barrier

    def all_inputs_ended(self) -> None:
        """A trigger deferred to the end of the inputs snapshots now; a stop savepoint's after the
        chain's end of input (the input really ended: what that emits must be in the savepoint)."""
        self.inputs_ended = True
        if self._deferred is not None and self.checkpointer is not None:
            barrier, self._deferred = self._deferred, None
            self.checkpointer.checkpoint(barrier, end_input_first=barrier.stop)


def _consume(chain: OperatorChain, gate: InputGate, env: SimpleTaskEnvironment,
             checkpointer: checkpointing.TaskCheckpointer | None = None, mode: str = "EXACTLY_ONCE") -> bool:
    """Feeds input buffers to the chain until every channel ended; False when cancelled. A buffer
    goes in slices of about a buffer timeout's work each, so a slow function's output is flushed in
    time (see BatchSlicer). With checkpoints, barriers go through the barrier handler: a channel
    blocked by alignment has its buffers held back (their credit with them) and replayed after."""
    slicer = BatchSlicer(env.buffer_timeout_ms) if env.buffer_timeout_ms > 0 else None

    def process(payload: list[Any], spec: ChannelSpec) -> None:
        if slicer is None:
            chain.process_batch(payload, spec.target_node_id, spec.input_index)
        else:
            run = functools.partial(chain.process_batch, target_node_id=spec.target_node_id, input_index=spec.input_index)
            for part in slicer.slices(payload):
                slicer.timed(run, part)
                chain.between_batches()

    specs = gate.channels
    index = {spec: i for i, spec in enumerate(specs)}
    valves = InputWatermarks([spec.input_index for spec in specs])

    def time_event(channel: int, event: Any) -> None:  # a watermark, an idleness change, a channel's end
        if type(event) is Watermark:
            events = valves.watermark(channel, event.timestamp)
        elif type(event) is WatermarkStatus:
            events = valves.status(channel, event.idle)
        elif type(event) is EndOfPartition or event is END_OF_PARTITION:
            events = valves.end_of_input(channel)
        else:
            return
        for input_index, out in events:
            if type(out) is int:
                chain.process_watermark(out, input_index)
            else:
                chain.process_watermark_status(out is WatermarkStatus.IDLE, input_index)

    handler = create_barrier_handler(len(specs), mode) if checkpointer is not None else None
    while not gate.all_finished:
        if env.is_cancelled():
            return False
        item = gate.poll(0)
        if item is None:  # nothing ready: send what is staged before waiting (low latency at low rates)
            chain.flush_when_idle()
            item = gate.poll(chain.wait_bound_ms(100) / 1000)
        if item is not None:
            spec, kind, payload = item
            if handler is None:
                if kind == BUFFER:
                    process(payload, spec)
                else:
                    time_event(index[spec], payload)
            else:
                event = payload if kind == BUFFER or type(payload) is not EndOfPartition else END_OF_PARTITION
                if type(event) is CheckpointBarrier:
                    checkpointer.barrier_arrived(event)  # type: ignore[union-attr]
                delivered = False
                for action in handler.on_event(index[spec], event):
                    if isinstance(action, Deliver):
                        if not isinstance(action.item, list):  # a watermark or status, in order
                            time_event(action.channel, action.item)
                            continue
                        if action.item is payload:
                            delivered = True
                            process(payload, spec)
                        else:  # a held-back buffer of a channel that was blocked
                            process(action.item, specs[action.channel])
                            gate.release(specs[action.channel])
                    elif isinstance(action, ChannelEnded):
                        time_event(action.channel, END_OF_PARTITION)
                    elif isinstance(action, ForwardBarrier):
                        pass  # the checkpointer forwards it with the snapshot, after flushing
                    elif isinstance(action, Snapshot):
                        checkpointer.checkpoint(action.barrier)  # type: ignore[union-attr]
                    elif isinstance(action, AbortCheckpoint):
                        checkpointer.abort(action.checkpoint_id, action.reason.value)  # type: ignore[union-attr]
                if kind == BUFFER and not delivered:
                    gate.defer_ack()
        chain.between_batches()
    return True


def _broken_exchange(exc: BaseException | None) -> bool:
    """Whether the failure is a data exchange that broke (an operator error may wrap it): the sign
    of a neighbour's failure rather than this task's own."""
    while exc is not None:
        if isinstance(exc, ExchangeError):
            return True
        exc = exc.__cause__
    return False


def run_task(tdd_bytes: bytes, artifact_paths: list[str] | ShippedArtifacts, data_host: str | None,
             network: NetworkSettings, channel: Any) -> None:
    """Runs the task (see :func:`_run_task`) with its prints and log records captured for the
    TaskManager; the last of them go out before the task's end."""
    if isinstance(artifact_paths, ShippedArtifacts):
        artifact_paths = artifact_paths.paths()
    tdd = cpb.TaskDeploymentDescriptor.FromString(tdd_bytes)
    # a slot's subtasks share their worker: the slot ends the processes its user code started
    processes = contextlib.nullcontext() if getattr(channel, "shared_process", False) else TaskProcesses()
    with OutputCapture(lambda lines, dropped: channel.send(OutputCaptured(lines, dropped))), processes:
        # add_python_archive's zips: extracted, and the task runs in their working directory;
        # processes the task starts end with it
        with task_working_directory(tdd, artifact_paths) as importable:
            with python_env.executable_variable(dict(tdd.execution_config.configuration)):
                _run_task(tdd_bytes, importable, data_host, network, channel)


def _run_task(tdd_bytes: bytes, artifact_paths: list[str] | ShippedArtifacts, data_host: str | None,
              network: NetworkSettings, channel: Any) -> None:
    """``data_host``: where this task serves its partitions to consumers: the TaskManager's host
    when the worker runs beside it (embedded Spark); None when it runs on another machine (an
    external Spark cluster): every interface, advertised as the worker's own address towards its
    TaskManager. ``network``: the TaskManager's exchange settings."""
    tdd = cpb.TaskDeploymentDescriptor.FromString(tdd_bytes)
    if isinstance(artifact_paths, ShippedArtifacts):
        artifact_paths = artifact_paths.paths()
    # the job's interpreter check and its requirements (installed once per job and machine)
    artifact_paths = python_env.prepare(dict(tdd.execution_config.configuration), list(artifact_paths))
    for path in reversed(artifact_paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    channel.send(StateChanged("INITIALIZING"))
    env = _task_environment(tdd, channel)
    chain: OperatorChain | None = None
    metrics: TaskMetricsReporter | None = None
    ticker: threading.Thread | None = None

    task_ended = threading.Event()

    def relay_cancel() -> None:  # the channel's cancel reaches the environment and the source loop
        # It ends with the task: Spark reuses this worker for later tasks, and a relay left waiting
        # would pin this task's chain and state for the worker's whole life.
        while not channel.wait_cancelled(RELAY_POLL_S):
            if task_ended.is_set():
                return
        env.cancel()
        if chain is not None:
            chain.cancel()  # a SourceFunction's run() only stops when told through cancel()

    relay = threading.Thread(target=relay_cancel, name="millstream-cancel-relay", daemon=True)
    relay.start()
    failure: str | None = None
    partitions: dict[bytes, ResultPartition] = {}
    server: PartitionServer | None = None
    resolver = PartitionResolver(credentials=Credentials(network.tls, channel.secrets.get(TASK_CREDENTIAL_SECRET)))
    gate: InputGate | None = None
    checkpointer: checkpointing.TaskCheckpointer | None = None
    try:
        with LOADING_LOCK:
            partitions, writers = _result_partitions(tdd, env.is_cancelled, network)
        # a slot's subtasks share this process: those consuming from this one read through memory
        in_slot = bool(getattr(channel, "shared_process", False))
        server = (PartitionServer(data_host, tls=network.tls, local=in_slot) if data_host
                  else PartitionServer("0.0.0.0", advertised_host=channel.local_host, tls=network.tls, local=in_slot))
        gate = _input_gate(tdd, resolver, env.is_cancelled, network) if tdd.input_gates else None
        for partition in partitions.values():
            server.register(partition)
        server.start()
        channel.send(PartitionsServed("%s:%d" % server.address))
        with LOADING_LOCK:
            chain = OperatorChain(tdd.vertex, env, writers)
        chain.records_interval_ms = RECORDS_INTERVAL_MS
        metrics = reporter = TaskMetricsReporter(chain, env, gate, partitions, network.io_timing)
        chain.records_listener = lambda records_in, records_out: reporter.send(channel, records_in, records_out)
        if reporter.source_clock is not None:
            chain.time_source_emits = reporter.source_clock.timed
        control: CheckpointControl | None = None
        finished_on_restore = tdd.HasField("restore") and tdd.restore.finished
        if tdd.checkpoint_dir:
            checkpointer = _restored_checkpointer(tdd, chain, partitions, channel)
        if checkpointer is not None or tdd.vertex.is_source:  # a source may hear from its coordinator
            control = CheckpointControl(channel, checkpointer, tdd.vertex.is_source, env)
            chain.housekeeping = control.poll
        if env.is_cancelled():
            return
        if gate is not None:
            gate.start()
        if finished_on_restore:  # it had finished at the checkpoint: end at once, as Flink's finished operators
            channel.send(StateChanged("RUNNING"))
            ended = _drain(gate, env) if gate is not None else True
            if control is not None:
                control.closing = True
            if ended and not env.is_cancelled():
                for writer in writers.values():
                    writer.emit_watermark(LONG_MAX)  # as any ending task: consumers' valves must not wait on it
                    writer.finish()
                _await_consumed(tdd, partitions, chain)
            return
        chain.open()
        try:
            channel.send(StateChanged("RUNNING"))
            if tdd.vertex.is_source:
                # A SourceFunction may wait in its own code for long; its metrics go out meanwhile.
                ticker = threading.Thread(target=reporter.report_while_quiet, args=(channel, task_ended),
                                          name="millstream-metrics", daemon=True)
                ticker.start()
            stopped = False
            try:
                if tdd.vertex.is_source:
                    ended = chain.run_source()
                else:
                    ended = _consume(chain, gate, env, checkpointer, tdd.checkpointing_mode or "EXACTLY_ONCE")  # type: ignore[arg-type]
                if ended and not env.is_cancelled():
                    if control is not None:
                        control.all_inputs_ended()  # a trigger that waited for the end of the inputs
                    if checkpointer is None or not checkpointer.input_ended:
                        chain.end_input()
                    if checkpointer is not None:  # Flink's final checkpoint: commit what the sinks hold back
                        _await_final_checkpoint(chain, checkpointer, env)
            except StoppedWithSavepoint:  # its savepoint committed everything: end without an end of input
                ended = stopped = True
            if ended and not env.is_cancelled():
                if control is not None:
                    control.closing = True
                if stopped and gate is not None:
                    ended = _drain(gate, env, "stopped with a savepoint")  # its producers stopped too: only their ends come
                if ended and not env.is_cancelled():
                    for writer in writers.values():
                        writer.finish()
                    _await_consumed(tdd, partitions, chain)
                    if checkpointer is not None:  # a full RocksDB snapshot in flight reads the open instance
                        checkpointer.close()
        finally:
            chain.close()
    except BaseException as exc:
        if not env.is_cancelled():  # a genuine failure, not the echo of a cancel: say so at once
            failure = f"{type(exc).__name__}: {exc}"
            channel.send(Failing("".join(traceback.format_exception(exc)), _broken_exchange(exc)))
        raise
    finally:
        if checkpointer is not None:  # its acks go out before the task's end; a failing task drops them
            checkpointer.close(wait=failure is None and not env.is_cancelled())
        task_ended.set()
        relay.join(RELAY_POLL_S * 4)  # gone before the worker takes its next task
        if ticker is not None:
            ticker.join()  # its last snapshot goes out before the final one
        if chain is not None and metrics is not None:  # the final totals, ahead of the task's end (the channel keeps the order)
            with contextlib.suppress(OSError):
                metrics.send(channel, chain.records_in, chain.records_out)
        if gate is not None:
            gate.close()
        if server is not None:
            server.close(failure)  # consumers get the failure in-band, not a bare closed connection
        resolver.close()


class SourceIdleClock:
    """A source task's idle time: the time its thread spends in the source's own code (a
    SourceFunction's ``run()`` between its records, a reader ahead of its rate limit) and off the
    CPU, sleeping or waiting. Time in ``emit`` (the chained operators, output credit) is not idle,
    whatever those operators do. Created on the task thread; read from any thread."""

    def __init__(self) -> None:
        self._cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        self._idle_s = 0.0  # of the closed stretches outside emit
        self._last = 0.0
        self._outside: tuple[float, float] | None = self._now()  # (wall, cpu) since leaving emit

    def _now(self) -> tuple[float, float]:
        return time.monotonic(), time.clock_gettime(self._cpu_clock)

    def timed(self, emit: Callable[[Any], None]) -> Callable[[Any], None]:
        def timed_emit(batch: Any) -> None:
            outside, self._outside = self._outside, None
            if outside is not None:
                wall, cpu = self._now()
                self._idle_s += max(0.0, (wall - outside[0]) - (cpu - outside[1]))
            try:
                emit(batch)
            finally:
                self._outside = self._now()
        return timed_emit

    def idle_s(self) -> float:
        """Seconds idle so far, the current stretch outside emit included (never decreasing)."""
        idle, outside = self._idle_s, self._outside
        if outside is not None:
            try:
                wall, cpu = self._now()
            except OSError:  # the task thread ended
                return self._last
            idle += max(0.0, (wall - outside[0]) - (cpu - outside[1]))
        self._last = max(self._last, idle)
        return self._last


def source_idle_clock() -> SourceIdleClock | None:
    """The calling (task) thread's clock, None where threads have no CPU clock of their own."""
    try:
        return SourceIdleClock()
    except (AttributeError, OSError):
        return None


class TaskMetricsReporter:
    """Builds the task's MetricsReported event: its I/O metrics from the counters the chain, the input
    gate and the result partitions keep, and the user metrics of its operators (cheap: once per
    reporting interval, nothing per record)."""

    def __init__(self, chain: OperatorChain, env: SimpleTaskEnvironment, gate: InputGate | None,
                 partitions: dict[bytes, ResultPartition], io_timing: bool) -> None:
        self._chain = chain
        self._user = env.metrics
        self._gate = gate
        self._partitions = list(partitions.values())
        self._io = TaskIOMetrics(time_accounting=io_timing)
        # A source has no input gate to time its waits on: the chain times its emits (run_source).
        self.source_clock = source_idle_clock() if gate is None and io_timing else None
        self._sent_version = -1
        self._lock = threading.Lock()  # the task thread and report_while_quiet's thread
        self._last_sent = time.monotonic()

    def report_while_quiet(self, channel: Any, ended: threading.Event) -> None:
        """Sends the snapshot whenever the task thread has not for a reporting interval (a source
        whose function waits between records), until ``ended``. Like a Flink reporter it reads the
        counters and calls user gauges from its own thread."""
        interval_s = RECORDS_INTERVAL_MS / 1000
        while not ended.wait(interval_s / 2):
            if time.monotonic() - self._last_sent >= interval_s:
                with contextlib.suppress(OSError):
                    self.send(channel, self._chain.records_in, self._chain.records_out)

    def send(self, channel: Any, records_in: int, records_out: int) -> None:
        """Takes and sends the snapshot; under the lock, so snapshots reach the TaskManager in order."""
        with self._lock:
            self._last_sent = time.monotonic()
            channel.send(self.message(records_in, records_out))

    def message(self, records_in: int, records_out: int) -> MetricsReported:
        gate, partitions, chain = self._gate, self._partitions, self._chain
        backpressured_s = sum(p.blocked_s for p in partitions)
        if gate is not None:
            idle_s = gate.idle_s
        elif self.source_clock is not None:
            idle_s = self.source_clock.idle_s()
        else:
            idle_s = 0.0
        values = self._io.snapshot(
            records_in, records_out,
            bytes_in=gate.bytes_in if gate is not None else 0,
            bytes_out=sum(p.bytes_out for p in partitions),
            idle_s=idle_s,
            backpressured_s=backpressured_s,
            input_watermark=chain.current_input_watermark,
            output_watermark=chain.current_output_watermark,
        )
        values.update(self._user.snapshot())
        descriptors = None
        if self._user.version != self._sent_version:
            self._sent_version = self._user.version
            descriptors = self._user.descriptors()
        return MetricsReported(records_in, records_out, values, descriptors)


def _restored_checkpointer(tdd: cpb.TaskDeploymentDescriptor, chain: OperatorChain,
                           partitions: dict[bytes, ResultPartition], channel: Any) -> checkpointing.TaskCheckpointer:
    """The task's checkpointer, with the state it resumes from loaded into the chain (before open)."""
    def broadcast(event: Any) -> None:
        for partition in partitions.values():
            partition.broadcast_event(event)

    checkpointer = checkpointing.TaskCheckpointer(chain, broadcast, tdd.checkpoint_dir, tdd.job_id, channel.send)
    restore = tdd.restore
    if tdd.HasField("restore") and restore.is_rescaled:
        checkpointer.restore_rescaled(restore.checkpoint_id, [
            (s.old_subtask_index, s.state_path, s.state_size, s.take_operator_state) for s in restore.rescaled])
    elif tdd.HasField("restore"):
        checkpointer.restore(restore.checkpoint_id, restore.state_path, restore.state_size)
    return checkpointer


def _await_final_checkpoint(chain: OperatorChain, checkpointer: checkpointing.TaskCheckpointer,
                            env: SimpleTaskEnvironment) -> None:
    """After the end of input, keeps taking part in checkpoints until one completed that covers
    everything the sinks hold back (Flink's final checkpoint, FLIP-147)."""
    while checkpointer.has_uncommitted_output() and not env.is_cancelled():
        chain.between_batches()  # its housekeeping answers triggers and notifications
        env.wait_ms(chain.wait_bound_ms(20))


def _drain(gate: InputGate, env: SimpleTaskEnvironment, why: str = "restored as finished") -> bool:
    """A task restored as finished, or stopped with a savepoint: its producers were finished (or
    stopped) too and send only their ends."""
    while not gate.all_finished:
        if env.is_cancelled():
            return False
        item = gate.poll(0.1)
        if item is not None and item[1] == BUFFER:
            raise RuntimeError(f"a task {why} received records: its producers were not finished")
    return True


def _await_consumed(tdd: cpb.TaskDeploymentDescriptor, partitions: dict[bytes, ResultPartition], chain: OperatorChain) -> None:
    """Waits until the consumers read the task's whole output, answering control messages meanwhile."""
    deadline = time.monotonic() + CONSUMED_TIMEOUT_S
    for partition in partitions.values():
        while not partition.wait_consumed(min(0.1, max(0.0, deadline - time.monotonic()))):
            if partition.failed or time.monotonic() >= deadline:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the consumers of {tdd.vertex.name} did not read its output in time")
                # A consumer's connection broke: its own failure is the root cause.
                raise PartitionError(f"a consumer of {tdd.vertex.name} failed before reading all of its output")
            if chain.housekeeping is not None:
                chain.housekeeping()
