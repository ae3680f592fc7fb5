"""Key groups travel with a keyed exchange's buffers: ResultPartition stages each record's key group
(as the partitioner computed it to pick the channel), a buffer carries them only while every record
in it has one, the input gate's decoding hands them on with the batch, and a keyed operator takes
them instead of hashing the keys again. No sockets: the partition's queued frames are decoded as
the input gate decodes them."""
from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

import pytest

from millstream.datastream.functions import as_key_selector
from millstream.runtime import keygroups
from millstream.runtime import partitioners as p
from millstream.runtime.network.partition import ResultPartition
from millstream.runtime.network.protocol import BUFFER, decode_buffer
from millstream.runtime.timestamps import key_groups_of, stamped, timestamps_of


def _partition(channels: int, per_buffer: int, max_parallelism: int = 128) -> ResultPartition:
    partitioner = p.KeyGroupStreamPartitioner(as_key_selector(lambda r: r[0]), max_parallelism=max_parallelism)
    return ResultPartition(b"r", 0, channels, partitioner, b"a", records_per_buffer=per_buffer,
                           max_backlog_per_subpartition=1 << 20)


def _received(partition: ResultPartition) -> list[list[list]]:
    """Per channel, the batches a consumer's input gate would hand its chain."""
    out = []
    for sub in partition._subs:
        out.append([decode_buffer(frame[5:]) for _, frame in sub.queue if frame[0] == BUFFER])
    return out


@pytest.mark.parametrize("stamped_input", [True, False])
def test_every_received_batch_carries_the_key_group_of_each_record(stamped_input: bool) -> None:
    partition = _partition(channels=3, per_buffer=7)
    for start in range(0, 200, 50):  # batches that do not line up with the buffers
        records = [(f"k{i % 23}", i) for i in range(start, start + 50)]
        partition.emit(stamped(records, [10 * i for _, i in records]) if stamped_input else records)
    partition.flush()
    seen = []
    for channel, batches in enumerate(_received(partition)):
        for batch in batches:
            groups = key_groups_of(batch)
            assert groups is not None and len(groups) == len(batch)
            assert (timestamps_of(batch) == [10 * i for _, i in batch]) if stamped_input else timestamps_of(batch) is None
            for (key, _), group in zip(batch, groups):
                assert group == keygroups.assign_to_key_group(key, 128)
                assert keygroups.compute_operator_index_for_key_group(128, 3, group) == channel
            seen.extend(i for _, i in batch)
    assert sorted(seen) == list(range(200))


def test_a_buffer_holding_a_record_without_a_key_group_carries_none() -> None:
    partition = _partition(channels=2, per_buffer=1000)
    partition.emit([("a", 0), ("b", 1)])
    partition.emit([((1, 2), 2), ((3, 4), 3)])  # tuple keys: their groups are not cached, none are sent
    partition.flush()
    partition.emit([("a", 4), ("b", 5)])  # a new buffer: all of its records have one again
    partition.flush()
    batches = [b for per_channel in _received(partition) for b in per_channel]
    for batch in batches:  # exactly the buffers without a tuple-keyed record carry key groups
        assert (key_groups_of(batch) is None) == any(type(key) is tuple for key, _ in batch), batch
    assert any(key_groups_of(b) is not None and {i for _, i in b} & {4, 5} for b in batches)
    assert sorted(i for b in batches for _, i in b) == list(range(6))


def test_no_key_groups_beyond_a_byte_and_received_batches_pickle_as_plain_lists() -> None:
    partition = _partition(channels=2, per_buffer=4, max_parallelism=1024)
    partition.emit([(f"k{i}", i) for i in range(8)])
    partition.flush()
    assert all(key_groups_of(b) is None for per_channel in _received(partition) for b in per_channel)
    partition = _partition(channels=2, per_buffer=4)
    partition.emit([(f"k{i}", i) for i in range(8)])
    partition.flush()
    batch = next(b for per_channel in _received(partition) for b in per_channel)
    assert key_groups_of(batch) is not None
    again = pickle.loads(pickle.dumps(batch))  # kept in state or collected: the records only
    assert type(again) is list and again == list(batch) and key_groups_of(batch[:1]) is None


def _keyed_sum_job(parallelism: int) -> Any:
    from millstream.datastream import StreamExecutionEnvironment
    from tests.unit.test_runtime_chain import collect, vertex

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    collect(env.from_collection([("a", 1)]).key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
    source, keyed = vertex(env, index=0), vertex(env, "Keyed")
    partitioner = cloudpickle.loads(source.produced[0].partitioner.payload)
    return partitioner, keyed


def test_a_keyed_operator_takes_the_key_groups_of_a_received_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_runtime_chain import make_chain

    partitioner, keyed = _keyed_sum_job(parallelism=2)
    partition = ResultPartition(b"r", 0, 2, partitioner, b"a", records_per_buffer=64, max_backlog_per_subpartition=1 << 20)
    records = [(f"k{i % 37}", i) for i in range(500)]
    partition.emit(records)
    partition.flush()
    hashed: list[int] = []
    runs = []
    for subtask, batches in enumerate(_received(partition)):
        run = make_chain(keyed, subtask)
        run.chain.open()
        (backend,) = run.chain.keyed_state_backends().values()
        assign = backend.assign_key_groups
        monkeypatch.setattr(backend, "assign_key_groups", lambda keys, assign=assign: hashed.append(len(keys)) or assign(keys))
        for batch in batches:
            assert key_groups_of(batch) is not None
            run.chain.process_batch(batch, keyed.inputs[0].target_node_id)
        run.chain.end_input()
        runs.append((run, backend))
    assert hashed == []  # no key was hashed again
    sums: dict[str, int] = {}
    for run, backend in runs:
        for key, total in run.collected():
            sums[key] = total  # the running sum: the last one is the total
            assert backend.key_group_range.contains(keygroups.assign_to_key_group(key, 128))
    expected: dict[str, int] = {}
    for key, value in records:
        expected[key] = expected.get(key, 0) + value
    assert sums == expected and len(sums) == 37


def test_key_groups_outside_the_subtasks_range_are_not_trusted() -> None:
    from tests.unit.test_runtime_chain import make_chain

    from millstream.runtime.state.heap_backend import KeyGroupOutOfRangeError
    from millstream.runtime.timestamps import grouped

    partitioner, keyed = _keyed_sum_job(parallelism=2)
    run = make_chain(keyed, 0)
    run.chain.open()
    (backend,) = run.chain.keyed_state_backends().values()
    foreign = next(f"k{i}" for i in range(1000) if not backend.key_group_range.contains(keygroups.assign_to_key_group(f"k{i}", 128)))
    wrong = grouped([(foreign, 1)], None, bytes([backend.key_group_range.end_key_group + 1]))
    with pytest.raises(Exception) as raised:  # hashed after all: the key does not belong here, and says so
        run.chain.process_batch(wrong, keyed.inputs[0].target_node_id)
    assert isinstance(raised.value, KeyGroupOutOfRangeError) or isinstance(raised.value.__cause__, KeyGroupOutOfRangeError)
