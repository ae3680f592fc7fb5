"""Stream partitioners: how a producer subtask picks the consumer channel(s) of each record.

The names are Flink's ship strategies. ``pointwise`` partitioners (forward, rescale) connect a
producer to a subset of consumers; all others connect every producer to every consumer.
"""
from __future__ import annotations

import itertools
import random
from operator import itemgetter
from typing import Any, Callable, ClassVar

from millstream.runtime import keygroups
from millstream.runtime.narrowing import NarrowedKey
from millstream.runtime.subscripts import field_getter

_CACHEABLE_KEYS = frozenset({str, bytes, int})  # no key of another type equals one of these yet hashes otherwise in Java
_MINUS_ONE = itertools.repeat(-1)
_SPLIT_BY_MASK_MAX_CHANNELS = 8  # up to this many channels, one C-level pass per channel beats a Python loop
_INT_KEYS = frozenset({int})
_DENSE_KEYS_MAX = 1 << 22  # int keys in [0, this) have their key group in a byte table (<= 4 MB)
_UNKNOWN_GROUP = 255  # a dense table's byte for a key not seen yet (the table is used while max parallelism < 256)


def key_function(selector: Any) -> Callable[[Any], Any]:
    """What to call per record to get its key: a KeySelector's ``get_key`` (a wrapped plain function
    directly), any object with ``get_key``, or a callable; ``operator.itemgetter(c)`` in place of a
    plain ``lambda r: r[c]`` (runtime/subscripts.py)."""
    make = getattr(selector, "_key_function", None)
    if make is not None:
        function = make()
    elif callable(get_key := getattr(selector, "get_key", None)):
        function = get_key
    elif callable(selector):
        function = selector
    else:
        raise TypeError(f"A key selector must be a KeySelector or a callable, got {type(selector).__name__}")
    return field_getter(function)


def split_by_channel(records: list[Any], stamps: list[Any] | None, channels: list[int],
                     n: int) -> list[tuple[list[Any], list[Any] | None]]:
    """Per channel ``0..n-1``: the records whose ``channels`` entry is it, and their timestamps
    (None without)."""
    if n <= _SPLIT_BY_MASK_MAX_CHANNELS:
        split: list[tuple[list[Any], list[Any] | None]] = []
        for c in range(n):
            keep = [x == c for x in channels]
            split.append((list(itertools.compress(records, keep)),
                          None if stamps is None else list(itertools.compress(stamps, keep))))
        return split
    if stamps is None:
        lists: list[list[Any]] = [[] for _ in range(n)]
        for channel, record in zip(channels, records):
            lists[channel].append(record)
        return [(routed, None) for routed in lists]
    out: list[tuple[list[Any], list[Any]]] = [([], []) for _ in range(n)]
    for channel, record, stamp in zip(channels, records, stamps):
        routed, routed_stamps = out[channel]
        routed.append(record)
        routed_stamps.append(stamp)
    return out  # type: ignore[return-value]


class StreamPartitioner:
    ship_strategy: ClassVar[str] = ""
    pointwise: ClassVar[bool] = False
    broadcast: ClassVar[bool] = False

    def __init__(self) -> None:
        self.num_channels = 1

    def setup(self, num_channels: int) -> None:
        """Called once per producer subtask with the number of channels it writes to."""
        self.num_channels = num_channels

    def select_channel(self, record: Any) -> int:
        raise NotImplementedError

    def route(self, records: list[Any]) -> list[list[Any]]:
        """One list per channel: the batch form of ``select_channel``, the one on the hot path."""
        out: list[list[Any]] = [[] for _ in range(self.num_channels)]
        select = self.select_channel
        for record in records:
            out[select(record)].append(record)
        return out

    def route_stamped(self, records: list[Any], stamps: list[Any]) -> list[tuple[list[Any], list[Any]]]:
        """``route`` for timestamped records: per channel its records and their timestamps."""
        return split_by_channel(records, stamps, self.channels(records), self.num_channels)  # type: ignore[return-value]

    def route_batch(self, records: list[Any], stamps: list[Any] | None) -> list[tuple[list[Any], list[Any] | None, bytes | None]]:
        """What a result partition stages per channel: its records, their timestamps (None for
        none) and their key groups (None here: only a keyed exchange sends them)."""
        if stamps is None:
            return [(routed, None, None) for routed in self.route(records)]
        return [(routed, routed_stamps, None) for routed, routed_stamps in self.route_stamped(records, stamps)]

    def channels(self, records: list[Any]) -> list[int]:
        """The channel of each record, in order (what ``route_stamped`` sorts by)."""
        return list(map(self.select_channel, records))

    def __str__(self) -> str:
        return self.ship_strategy

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class ForwardPartitioner(StreamPartitioner):
    ship_strategy = "FORWARD"
    pointwise = True

    def select_channel(self, record: Any) -> int:
        return 0


class RebalancePartitioner(StreamPartitioner):
    """Round robin; each producer starts at a random channel so producers do not move in step."""

    ship_strategy = "REBALANCE"

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._next = random.randrange(num_channels)

    def select_channel(self, record: Any) -> int:
        self._next = (self._next + 1) % self.num_channels
        return self._next

    def route(self, records: list[Any]) -> list[list[Any]]:
        # Record i goes to channel (next + 1 + i) % n, exactly as select_channel would send it.
        n = self.num_channels
        first = (self._next + 1) % n
        self._next = (self._next + len(records)) % n
        return [records[(c - first) % n :: n] for c in range(n)]

    def route_stamped(self, records: list[Any], stamps: list[Any]) -> list[tuple[list[Any], list[Any]]]:
        n = self.num_channels
        first = (self._next + 1) % n
        self._next = (self._next + len(records)) % n
        return [(records[(c - first) % n :: n], stamps[(c - first) % n :: n]) for c in range(n)]


class RescalePartitioner(StreamPartitioner):
    """Round robin over the producer's own (pointwise-connected) channels."""

    ship_strategy = "RESCALE"
    pointwise = True

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._next = -1

    def select_channel(self, record: Any) -> int:
        self._next = (self._next + 1) % self.num_channels
        return self._next


class ShufflePartitioner(StreamPartitioner):
    ship_strategy = "SHUFFLE"

    def select_channel(self, record: Any) -> int:
        return random.randrange(self.num_channels)


class BroadcastPartitioner(StreamPartitioner):
    ship_strategy = "BROADCAST"
    broadcast = True

    def select_channel(self, record: Any) -> int:
        raise RuntimeError("Broadcast partitioning sends every record to every channel")


class GlobalPartitioner(StreamPartitioner):
    ship_strategy = "GLOBAL"

    def select_channel(self, record: Any) -> int:
        return 0


class KeyGroupStreamPartitioner(StreamPartitioner):
    """Hash partitioning: key → key group (murmur of a stable hash) → consumer subtask."""

    ship_strategy = "HASH"

    def __init__(self, key_selector: Any, max_parallelism: int = 0) -> None:
        super().__init__()
        self.key_selector = key_selector
        self.max_parallelism = max_parallelism

    def select_channel(self, record: Any) -> int:
        key = self.key_selector.get_key(record)
        return keygroups.assign_key_to_parallel_operator(key, self.max_parallelism, self.num_channels)

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._channel_of: dict[Any, int] = {}
        self._key_group_of: dict[Any, int] = {}  # route_batch's cache, exact str/bytes/int keys only
        max_p = self.max_parallelism
        # route_batch: a key group fits a byte, and bytes.translate maps a batch's key groups to
        # channels (and channels to one channel's 0/1 selectors) in one C call each.
        self._groups_fit = 0 < max_p <= 256
        # key group of each small non-negative int key seen, by value: one byte read where a dict
        # lookup compares the key with the stored int object, a cache miss among many keys
        self._dense_groups = bytearray() if 0 < max_p < _UNKNOWN_GROUP else None
        if self._groups_fit:
            owner = [keygroups.compute_operator_index_for_key_group(max_p, num_channels, kg) for kg in range(max_p)]
            self._channel_of_group = bytes(owner + [0] * (256 - max_p))
            split_channels = range(num_channels if num_channels <= _SPLIT_BY_MASK_MAX_CHANNELS else 0)
            self._selectors = [bytes(int(i == c) for i in range(256)) for c in split_channels]
            # A channel's key groups, in order, are the batch's bytes with every other channel's
            # groups deleted (a group's channel follows from its value).
            self._other_groups = [bytes(g for g in range(max_p) if owner[g] != c) for c in split_channels]
    def route(self, records: list[Any]) -> list[list[Any]]:
        return [routed for routed, _ in split_by_channel(records, None, self.channels(records), self.num_channels)]

    def channels(self, records: list[Any]) -> list[int]:
        # Hashing a key (Java hashCode + murmur) costs ~1 us; keys repeat, so each exact
        # str/bytes/int key's channel is remembered. The cache holds only such keys, so a batch of
        # only such keys may look all of them up at once (an int never equals a cached str, and
        # True or 1.0, which equal 1 but hash otherwise in Java, are never cached).
        return self._channels_of_keys(self._keys(records))

    def _keys(self, records: list[Any]) -> list[Any]:
        get_key = key_function(self.key_selector)
        return get_key.keys_of(records) if type(get_key) is NarrowedKey else list(map(get_key, records))

    @staticmethod
    def _cached(keys: list[Any], cache: dict[Any, int], compute: Callable[[Any], int]) -> list[int]:
        """``compute(key)`` of each key of a batch of exact str/bytes/int keys, remembered in ``cache``."""
        if len(cache) > 1_000_000:
            cache.clear()  # amortized bound on memory for ever-new keys
        out = list(map(cache.get, keys, _MINUS_ONE))
        if out and min(out) < 0:
            for i, value in enumerate(out):
                if value < 0:
                    key = keys[i]
                    value = cache.get(key, -1)  # the batch may hold the key more than once
                    if value < 0:
                        value = cache[key] = compute(key)
                    out[i] = value
        return out

    def _channels_of_keys(self, keys: list[Any]) -> list[int]:
        assign, max_p, n = keygroups.assign_key_to_parallel_operator, self.max_parallelism, self.num_channels
        if _CACHEABLE_KEYS.issuperset(map(type, keys)):
            return self._cached(keys, self._channel_of, lambda key: assign(key, max_p, n))
        cache = self._channel_of
        out = []
        for key in keys:
            channel = cache.get(key) if type(key) in _CACHEABLE_KEYS else None
            if channel is None:
                channel = assign(key, max_p, n)
                if type(key) in _CACHEABLE_KEYS:
                    cache[key] = channel
            out.append(channel)
        return out

    def _dense(self, keys: list[Any], key_types: set[type]) -> bytes | None:
        """The key groups of a batch of ints in ``[0, _DENSE_KEYS_MAX)``, one byte each, from the
        dense table (grown and filled as keys come); None for any other batch. ``key_types``: the
        types of ``keys``."""
        table = self._dense_groups
        if table is None or not keys or not _INT_KEYS.issuperset(key_types):
            return None
        if min(keys) < 0:  # a negative index would read the table from its end
            return None
        # One C call reads every key's byte (itemgetter of one key returns the byte, not a tuple).
        look_up = itemgetter(*keys) if len(keys) > 1 else lambda t: (t[keys[0]],)
        try:
            packed = bytes(look_up(table))
        except IndexError:  # a key beyond the table: grow it to the largest key, if that is dense
            if (high := max(keys)) >= _DENSE_KEYS_MAX:
                return None
            table.extend(bytes([_UNKNOWN_GROUP]) * (min(_DENSE_KEYS_MAX, max(high + 1, 2 * len(table))) - len(table)))
            packed = bytes(look_up(table))
        if _UNKNOWN_GROUP in packed:
            assign, max_p = keygroups.assign_to_key_group, self.max_parallelism
            for key in set(itertools.compress(keys, [g == _UNKNOWN_GROUP for g in packed])):
                table[key] = assign(key, max_p)
            packed = bytes(look_up(table))
        return packed

    def route_batch(self, records: list[Any], stamps: list[Any] | None) -> list[tuple[list[Any], list[Any] | None, bytes | None]]:
        """Per channel: its records, their timestamps (None for none) and their key groups, one byte
        each, so the consumer need not hash the keys again (None when a key is not an exact
        str/bytes/int, whose group is not cached, or the maximum parallelism exceeds 256)."""
        keys = self._keys(records)
        n = self.num_channels
        if not self._groups_fit or not _CACHEABLE_KEYS.issuperset(key_types := set(map(type, keys))):
            return [(routed, routed_stamps, None)
                    for routed, routed_stamps in split_by_channel(records, stamps, self._channels_of_keys(keys), n)]
        assign, max_p = keygroups.assign_to_key_group, self.max_parallelism
        packed = self._dense(keys, key_types)
        if packed is None:
            packed = bytes(self._cached(keys, self._key_group_of, lambda key: assign(key, max_p)))
        channel_bytes = packed.translate(self._channel_of_group)
        if n > _SPLIT_BY_MASK_MAX_CHANNELS:
            split = split_by_channel(records, stamps, list(channel_bytes), n)
            group_lists: list[bytearray] = [bytearray() for _ in range(n)]
            for channel, group in zip(channel_bytes, packed):
                group_lists[channel].append(group)
            return [(routed, routed_stamps, bytes(g)) for (routed, routed_stamps), g in zip(split, group_lists)]
        out: list[tuple[list[Any], list[Any] | None, bytes | None]] = []
        for selector, others in zip(self._selectors, self._other_groups):
            keep = channel_bytes.translate(selector)
            out.append((list(itertools.compress(records, keep)),
                        None if stamps is None else list(itertools.compress(stamps, keep)),
                        packed.translate(None, others)))
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyGroupStreamPartitioner) and other.key_selector is self.key_selector

    def __hash__(self) -> int:
        return id(self.key_selector)


class CustomPartitionerWrapper(StreamPartitioner):
    ship_strategy = "CUSTOM"

    def __init__(self, partitioner: Any, key_selector: Any) -> None:
        super().__init__()
        self.partitioner = partitioner
        self.key_selector = key_selector

    def select_channel(self, record: Any) -> int:
        channel = self.partitioner.partition(self.key_selector.get_key(record), self.num_channels)
        if not 0 <= channel < self.num_channels:
            raise ValueError(
                f"Custom partitioner returned channel {channel} for {self.num_channels} channels"
            )
        return channel

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CustomPartitionerWrapper) and other.partitioner is self.partitioner

    def __hash__(self) -> int:
        return id(self.partitioner)
