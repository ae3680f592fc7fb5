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
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle
import grpc

from millstream.proto import cluster_pb2 as cpb
from millstream.proto import cluster_pb2_grpc as cpb_grpc
from millstream.runtime.task.batch_slicer import BatchSlicer
from millstream.runtime.task.chain import OperatorChain
from millstream.runtime.operators.combiner import CombiningWriter
from millstream.runtime.task.environment import SimpleTaskEnvironment
from millstream.runtime.rpc import sync_channel
from millstream.taskmanager.network import BUFFER, ChannelSpec, ExchangeError, InputGate, PartitionError, PartitionServer, ResultPartition

# Messages from the worker to the TaskManager.
STATE = "state"            # ("state", "INITIALIZING" | "RUNNING")
PARTITIONS = "partitions"  # ("partitions", "host:port") where this task serves its result partitions
PRINT = "print"            # ("print", [lines], to_stderr)
COLLECT = "collect"        # ("collect", collect_id, subtask_index, sequence, serialized list of records)
RECORDS = "records"        # ("records", records_in, records_out): running totals, at most every RECORDS_INTERVAL_MS
# ("failing", traceback, caused_by_peer): the body failed (before any cancel reached it) and is now
# cleaning up; caused_by_peer when the failure is a broken exchange, i.e. a neighbour's failure.
FAILING = "failing"

SOURCE_BATCH_SIZE = 1024
RECORDS_PER_BUFFER = 1024
RECORDS_INTERVAL_MS = 1000  # the record totals go to the TaskManager at most this often (and once at the end)
CONNECT_TIMEOUT_S = 60.0
RELAY_POLL_S = 0.05  # the cancel relay checks this often whether its task ended (then it ends too)
CONSUMED_TIMEOUT_S = 3600.0  # a producer waits this long for slow consumers before giving up
# A lookup answered with these may succeed later (the TaskManager is starting, restarting or busy);
# anything else is a real error and fails the channel at once, naming it.
RETRIABLE_LOOKUP_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class NetworkSettings:
    """The TaskManager's exchange settings its tasks use (``taskmanager.network.memory.*``)."""

    buffers_per_channel: int = 4  # credits a consumer grants each input channel
    max_buffers_per_channel: int = 4  # buffers a producer queues per subpartition before it blocks


def _task_environment(tdd: cpb.TaskDeploymentDescriptor, channel: Any) -> SimpleTaskEnvironment:
    """The chain's TaskEnvironment, with printed lines and collected records sent to the TaskManager."""
    sequence = itertools.count()

    def collect(collect_id: str, payload: bytes) -> None:  # serialized and split by the environment
        channel.send((COLLECT, collect_id, tdd.subtask_index, next(sequence), payload))

    return SimpleTaskEnvironment.from_deployment(
        tdd,
        print_sink=lambda lines, to_stderr: channel.send((PRINT, lines, to_stderr)),
        collect_sink=collect,
        source_batch_size=SOURCE_BATCH_SIZE,
    )


class PartitionResolver:
    """Asks a producer's TaskManager where the producer task serves its partitions."""

    def __init__(self, rpc_timeout_s: float = 5.0) -> None:
        self._stubs: dict[str, cpb_grpc.TaskExecutorStub] = {}
        self._channels: list[Any] = []
        self._timeout = rpc_timeout_s

    def __call__(self, spec: ChannelSpec) -> tuple[str, int] | None:
        stub = self._stubs.get(spec.producer_location)
        if stub is None:
            channel = sync_channel(spec.producer_location)
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
                     connect_timeout_s=CONNECT_TIMEOUT_S)


def _consume(chain: OperatorChain, gate: InputGate, env: SimpleTaskEnvironment) -> bool:
    """Feeds input buffers to the chain until every channel ended; False when cancelled. A buffer
    goes in slices of about a buffer timeout's work each, so a slow function's output is flushed in
    time (see BatchSlicer)."""
    slicer = BatchSlicer(env.buffer_timeout_ms) if env.buffer_timeout_ms > 0 else None
    while not gate.all_finished:
        if env.is_cancelled():
            return False
        timeout_ms = chain.wait_bound_ms(100)
        item = gate.poll(timeout_ms / 1000)
        if item is not None:
            spec, kind, payload = item
            if kind == BUFFER:
                if slicer is None:
                    chain.process_batch(payload, spec.target_node_id, spec.input_index)
                else:
                    process = functools.partial(chain.process_batch, target_node_id=spec.target_node_id, input_index=spec.input_index)
                    for part in slicer.slices(payload):
                        slicer.timed(process, part)
                        chain.between_batches()
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


def run_task(tdd_bytes: bytes, artifact_paths: list[str], data_host: str, network: NetworkSettings, channel: Any) -> None:
    """``data_host``: the TaskManager's host, where consumers on other machines reach this task;
    ``network``: the TaskManager's exchange settings."""
    tdd = cpb.TaskDeploymentDescriptor.FromString(tdd_bytes)
    for path in reversed(artifact_paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    channel.send((STATE, "INITIALIZING"))
    env = _task_environment(tdd, channel)
    chain: OperatorChain | None = None

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
    resolver = PartitionResolver()
    gate: InputGate | None = None
    try:
        partitions, writers = _result_partitions(tdd, env.is_cancelled, network)
        server = PartitionServer(data_host)
        gate = _input_gate(tdd, resolver, env.is_cancelled, network) if tdd.input_gates else None
        for partition in partitions.values():
            server.register(partition)
        server.start()
        channel.send((PARTITIONS, "%s:%d" % server.address))
        chain = OperatorChain(tdd.vertex, env, writers)
        chain.records_interval_ms = RECORDS_INTERVAL_MS
        chain.records_listener = lambda records_in, records_out: channel.send((RECORDS, records_in, records_out))
        if env.is_cancelled():
            return
        if gate is not None:
            gate.start()
        chain.open()
        try:
            channel.send((STATE, "RUNNING"))
            ended = chain.run_source() if tdd.vertex.is_source else _consume(chain, gate, env)  # type: ignore[arg-type]
            if ended and not env.is_cancelled():
                chain.end_input()
                for writer in writers.values():
                    writer.finish()
                deadline = time.monotonic() + CONSUMED_TIMEOUT_S
                for partition in partitions.values():
                    if not partition.wait_consumed(max(0.0, deadline - time.monotonic())):
                        if time.monotonic() >= deadline:
                            raise TimeoutError(f"the consumers of {tdd.vertex.name} did not read its output in time")
                        # A consumer's connection broke: its own failure is the root cause.
                        raise PartitionError(f"a consumer of {tdd.vertex.name} failed before reading all of its output")
        finally:
            chain.close()
    except BaseException as exc:
        if not env.is_cancelled():  # a genuine failure, not the echo of a cancel: say so at once
            failure = f"{type(exc).__name__}: {exc}"
            channel.send((FAILING, "".join(traceback.format_exception(exc)), _broken_exchange(exc)))
        raise
    finally:
        task_ended.set()
        relay.join(RELAY_POLL_S * 4)  # gone before the worker takes its next task
        if chain is not None:  # the final totals, ahead of the task's end (the channel keeps the order)
            with contextlib.suppress(OSError):
                channel.send((RECORDS, chain.records_in, chain.records_out))
        if gate is not None:
            gate.close()
        if server is not None:
            server.close(failure)  # consumers get the failure in-band, not a bare closed connection
        resolver.close()
