"""Partitioners: the batch routing on the hot path sends every record where Flink's rule says."""
from __future__ import annotations

import copy

import pytest

from millstream.datastream import KeySelector
from millstream.datastream.functions import as_key_selector
from millstream.runtime import keygroups
from millstream.runtime import partitioners as p


def _per_record(partitioner: p.StreamPartitioner, records: list) -> list[list]:
    out: list[list] = [[] for _ in range(partitioner.num_channels)]
    for r in records:
        out[partitioner.select_channel(r)].append(r)
    return out


@pytest.mark.parametrize("channels", [1, 2, 3, 5])
def test_rebalance_batches_continue_the_round_robin_of_single_records(channels: int) -> None:
    a = p.RebalancePartitioner()
    a.setup(channels)
    b = copy.deepcopy(a)  # same random start
    for size in (1, 7, 10, 3):
        records = list(range(size))
        assert a.route(records) == _per_record(b, records)


class FirstChar(KeySelector):
    def get_key(self, value):
        return value[0]


@pytest.mark.parametrize("selector", [as_key_selector(lambda r: r[0]), FirstChar()])
def test_hash_routing_follows_the_key_group_of_each_key(selector) -> None:
    partitioner = p.KeyGroupStreamPartitioner(selector, max_parallelism=128)
    partitioner.setup(3)
    records = [(w, 1) for w in "the quick brown fox jumps over the lazy dog".split()] * 3 + [(7, 1), (7.0, 1), (True, 1)]
    for _ in range(2):  # the second pass is served from the channel cache
        routed = partitioner.route(records)
        for channel, batch in enumerate(routed):
            for key, _ in batch:
                assert keygroups.assign_key_to_parallel_operator(key, 128, 3) == channel
        assert sorted(map(repr, sum(routed, []))) == sorted(map(repr, records))


def test_the_default_route_uses_select_channel() -> None:
    g = p.GlobalPartitioner()
    g.setup(4)
    assert g.route([1, 2, 3]) == [[1, 2, 3], [], [], []]


@pytest.mark.parametrize("channels", [2, 3, 12])
@pytest.mark.parametrize("keys", [["a", "b", "c", "a"], [1, 2, 3, 1, 2], [1, 1.0, True, "1", b"1", 2, (1, 2)]])
def test_stamped_hash_routing_follows_each_keys_group_and_computes_each_cacheable_key_once(
        monkeypatch: pytest.MonkeyPatch, channels: int, keys: list) -> None:
    # 1 == 1.0 == True but Java hashes them differently: each keeps its own channel.
    computed: list = []
    assign = keygroups.assign_key_to_parallel_operator

    def counting(key, max_parallelism, parallelism):
        computed.append(key)
        return assign(key, max_parallelism, parallelism)

    monkeypatch.setattr(keygroups, "assign_key_to_parallel_operator", counting)
    partitioner = p.KeyGroupStreamPartitioner(as_key_selector(lambda r: r[0]), max_parallelism=128)
    partitioner.setup(channels)
    records = [(k, i) for i, k in enumerate(keys * 20)]
    stamps = [1000 + i for i in range(len(records))]
    for _ in range(2):
        routed = partitioner.route_stamped(records, stamps)
        assert len(routed) == channels
        for channel, (batch, batch_stamps) in enumerate(routed):
            assert batch_stamps == [1000 + i for _, i in batch]
            assert [i for _, i in batch] == sorted(i for _, i in batch)  # the batch's order is kept
            for key, _ in batch:
                assert assign(key, 128, channels) == channel
        assert sorted(i for batch, _ in routed for _, i in batch) == list(range(len(records)))
    cacheable = [k for k in keys if type(k) in (str, bytes, int)]
    computed_cacheable = [(type(k), k) for k in computed if type(k) in (str, bytes, int)]
    assert sorted(map(repr, computed_cacheable)) == sorted(map(repr, {(type(k), k) for k in cacheable}))  # once each


# -- key groups shipped with a keyed exchange's buffers ---------------------------------------------


@pytest.mark.parametrize("channels", [1, 2, 3, 12])
@pytest.mark.parametrize("stamped", [True, False])
def test_keyed_routing_sends_each_records_key_group_along(channels: int, stamped: bool) -> None:
    partitioner = p.KeyGroupStreamPartitioner(as_key_selector(lambda r: r[0]), max_parallelism=128)
    partitioner.setup(channels)
    keys = ["a", "b", 7, b"x", "a", 7, 10**30, -3]
    records = [(k, i) for i, k in enumerate(keys * 30)]
    stamps = [1000 + i for i in range(len(records))] if stamped else None
    for _ in range(2):  # the second pass is served from the key-group cache
        routed = partitioner.route_batch(records, stamps)
        assert len(routed) == channels
        for channel, (batch, batch_stamps, groups) in enumerate(routed):
            assert [i for _, i in batch] == sorted(i for _, i in batch)  # the batch's order is kept
            assert batch_stamps == ([1000 + i for _, i in batch] if stamped else None)
            assert groups is not None and len(groups) == len(batch)
            for (key, _), group in zip(batch, groups):
                assert group == keygroups.assign_to_key_group(key, 128)
                assert keygroups.compute_operator_index_for_key_group(128, channels, group) == channel
        assert sorted(i for batch, _, _ in routed for _, i in batch) == list(range(len(records)))


@pytest.mark.parametrize("keys, max_parallelism", [
    ([1, 1.0, True, "1"], 128),   # 1 == 1.0 == True hash otherwise in Java: never cached, no groups sent
    ([(1, 2), (3, 4)], 128),      # composite keys: not cached either
    (["a", "b"], 512),            # a key group does not fit a byte
])
def test_keyed_routing_sends_no_key_groups_it_does_not_cache(keys: list, max_parallelism: int) -> None:
    partitioner = p.KeyGroupStreamPartitioner(as_key_selector(lambda r: r[0]), max_parallelism=max_parallelism)
    partitioner.setup(3)
    records = [(k, i) for i, k in enumerate(keys * 5)]
    routed = partitioner.route_batch(records, None)
    assert all(groups is None for _, _, groups in routed)
    for channel, (batch, _, _) in enumerate(routed):
        for key, _ in batch:
            assert keygroups.assign_key_to_parallel_operator(key, max_parallelism, 3) == channel


@pytest.mark.parametrize("max_parallelism", [128, 254, 255, 256])
def test_int_keys_key_groups_match_hashing_in_and_beyond_the_dense_table(max_parallelism: int) -> None:
    """Small non-negative int keys take their key group from a byte table by value (up to 2^22;
    max parallelism < 255, so 255 can mean 'not seen yet'); any other batch is hashed as before.
    Every group must equal the hash's, as the table grows, with repeats, 0, and batches beyond it."""
    partitioner = p.KeyGroupStreamPartitioner(as_key_selector(lambda r: r[0]), max_parallelism=max_parallelism)
    partitioner.setup(3)
    batches = [
        [0, 5, 5, 17, 0],                   # a fresh table, a key twice in the batch
        [3, 1000, 17, 999_999],             # grows it
        [2**22 - 1, 6],                     # its last entry
        [2**22, 1],                         # one beyond: the whole batch is hashed
        [-1, 4],                            # negative: hashed
        [5, 17, 1000, 0, 2**22 - 1],        # all seen: read from the table only
        [42],                               # one key: not seen yet
        [17],                               # one key: seen
        [2**22 + 5],                        # one key beyond the table: hashed
    ]
    for keys in batches:
        records = [(k, i) for i, k in enumerate(keys)]
        routed = partitioner.route_batch(records, None)
        assert sorted(i for batch, _, _ in routed for _, i in batch) == list(range(len(keys)))
        for channel, (batch, _, groups) in enumerate(routed):
            assert groups is not None and len(groups) == len(batch)
            for (key, _), group in zip(batch, groups):
                assert group == keygroups.assign_to_key_group(key, max_parallelism), (key, keys)
                assert keygroups.compute_operator_index_for_key_group(max_parallelism, 3, group) == channel
