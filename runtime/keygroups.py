"""Key groups: Flink's KeyGroupRangeAssignment, the key → key group → subtask mapping.

Keys get a Java ``hashCode`` that is the same in every process (Python's ``hash()`` is salted per
process), spread by Flink's ``murmurHash`` over ``max_parallelism`` key groups; subtask =
``kg * parallelism // max_parallelism``. str, int, bool, float and bytes keys land in the same
key group as the equal Java key does in Flink.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import struct
from dataclasses import dataclass
from typing import ClassVar, Iterator

import mmh3

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM", "UPPER_BOUND_MAX_PARALLELISM", "KeyGroupAssigner",
    "KeyGroupRange", "assign_key_to_parallel_operator", "assign_to_key_group",
    "check_max_parallelism", "check_parallelism_preconditions", "compute_default_max_parallelism",
    "compute_key_group_range_for_operator_index", "compute_operator_index_for_key_group",
    "java_hash_code", "murmur_hash",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 32768

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_PICKLE_PROTOCOL = 4  # fixed: the fallback hash must not change when Python's default does
_CANONICAL_NAN_BITS = 0x7FF8000000000000  # Double.doubleToLongBits collapses every NaN to this
_double = struct.Struct("<d")
_u64 = struct.Struct("<Q")
_pack_u32 = struct.Struct("<I").pack

# Polynomial hash Σ b[i]·31^(n-1-i) of a byte string, evaluated in C instead of a Python loop:
# split each byte into two base-31 digits (b = 31·hi + lo), map them to digit characters with
# bytes.translate and let int(..., 31) do the Horner evaluation.
_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_LO = bytes(_DIGITS[b % 31] for b in range(256))
_HI = bytes(_DIGITS[b // 31] for b in range(256))
_HIGH_BIT = bytes(b >> 7 for b in range(256))
_SHORT = 6  # below this a plain loop beats the translate/int round trip
_CHUNK = 512  # stays under sys.set_int_max_str_digits' smallest allowed limit (640)


def _poly31(data: bytes) -> int:
    """Σ data[i]·31^(n-1-i) mod 2^32, i.e. Java's ``31*h + x`` loop over ``data`` from h = 0."""
    if len(data) < _SHORT:
        h = 0
        for b in data:
            h = 31 * h + b
        return h & _M32
    if len(data) <= _CHUNK:
        return (int(data.translate(_LO), 31) + 31 * int(data.translate(_HI), 31)) & _M32
    h = 0
    for i in range(0, len(data), _CHUNK):
        c = data[i : i + _CHUNK]
        h = (h * pow(31, len(c), 1 << 32) + int(c.translate(_LO), 31) + 31 * int(c.translate(_HI), 31)) & _M32
    return h


def _str_hash32(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, unsigned."""
    if s.isascii():  # O(1) in CPython; one byte per UTF-16 code unit
        return _poly31(s.encode())
    if len(s) < 16:  # short non-ASCII keys: a direct loop is cheaper than encoding and slicing
        h = 0
        for c in s:
            o = ord(c)
            if o > 0xFFFF:  # outside the BMP: a surrogate pair in UTF-16
                h = 31 * h + 0xD7C0 + (o >> 10)
                o = 0xDC00 + (o & 0x3FF)
            h = 31 * h + o
        return h & _M32
    # Each code unit is 256·hi + lo, so the hash splits over the even and odd bytes. surrogatepass
    # keeps lone surrogates, which a Java String can hold too.
    units = s.encode("utf-16-be", "surrogatepass")
    return ((_poly31(units[0::2]) << 8) + _poly31(units[1::2])) & _M32


def _long_hash32(u: int) -> int:
    u &= _M64
    return (u ^ (u >> 32)) & _M32


def _int_hash32(v: int) -> int:
    """Integer.hashCode, Long.hashCode or BigInteger.hashCode: Java's hash for a boxed value of v."""
    if -0x80000000 <= v <= 0x7FFFFFFF:
        return v & _M32
    if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        return _long_hash32(v)
    mag = abs(v)
    h = 0
    for shift in range((mag.bit_length() - 1) // 32 * 32, -1, -32):  # big-endian 32-bit words
        h = (31 * h + ((mag >> shift) & _M32)) & _M32
    return h if v > 0 else -h & _M32


def _bytes_hash32(b: bytes) -> int:
    """Arrays.hashCode(byte[]): starts at 1 and adds *signed* bytes (b - 256 when b >= 128)."""
    return (pow(31, len(b), 1 << 32) + _poly31(b) - (_poly31(b.translate(_HIGH_BIT)) << 8)) & _M32


def _hash32(key: object) -> int:
    """java_hash_code as an unsigned 32-bit int (cheaper to combine and to feed murmur_hash)."""
    if isinstance(key, str):
        return _str_hash32(key)
    if isinstance(key, bool):  # before int: bool is an int subclass
        return 1231 if key else 1237
    if isinstance(key, int):
        return _int_hash32(key)
    if isinstance(key, float):
        return _long_hash32(_CANONICAL_NAN_BITS if key != key else _u64.unpack(_double.pack(key))[0])
    if key is None:
        return 0
    if isinstance(key, (bytes, bytearray, memoryview)):
        return _bytes_hash32(bytes(key))
    if isinstance(key, (tuple, list)):  # java.util.List / Arrays.hashCode(Object[])
        h = 1
        for element in key:
            h = (31 * h + _hash32(element)) & _M32
        return h
    # A set's order follows the salted str hash and a dict's its insertion order, so equal values
    # pickle differently; Java's order-independent Set/Map hashCode is stable and equality-consistent.
    if isinstance(key, (set, frozenset)):
        return sum(map(_hash32, key)) & _M32
    if isinstance(key, dict):
        return sum(_hash32(k) ^ _hash32(v) for k, v in key.items()) & _M32
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        # A POJO key: hashed over the fields its equality compares, as a Java hashCode over those
        # fields would be. Its pickle would not do: in a worker, a job script's class is not
        # importable by reference, and its by-value pickle carries the whole class.
        h = 1
        for f in dataclasses.fields(key):
            if f.compare:
                h = (31 * h + _hash32(getattr(key, f.name))) & _M32
        return h
    try:
        data = pickle.dumps(key, protocol=_PICKLE_PROTOCOL)
    except Exception as e:  # PicklingError, TypeError or AttributeError, depending on the object
        raise TypeError(
            f"The key {_short_repr(key)} of type {type(key).__name__} has no stable hash: {e}. Keys must be str, int, float, bool, "
            "bytes, None, tuples (namedtuples) or lists of those, or dataclasses of them"
        ) from e
    return mmh3.hash(data, 0, False)


def _short_repr(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 200 else text[:197] + "..."


def java_hash_code(key: object) -> int:
    """A signed 32-bit Java ``hashCode`` of ``key``, identical in every process.

    str → String, bool → Boolean, int → Integer/Long/BigInteger by size, float → Double, bytes →
    Arrays.hashCode(byte[]), None → 0, tuple/list → List, set → Set, dict → Map, a dataclass
    instance → a List of the fields its equality compares. Anything else:
    murmur3 of its pickle (protocol 4), stable but only as equality-consistent as the pickle is.
    """
    h = _hash32(key)
    return h - (1 << 32) if h & 0x80000000 else h


def murmur_hash(code: int) -> int:
    """Flink's MathUtils.murmurHash(int): a non-negative int; Integer.MIN_VALUE maps to 0."""
    # Flink's routine is murmur3_x86_32 of one little-endian 4-byte block with seed 0.
    h = mmh3.hash(_pack_u32(code & _M32))
    return h if h >= 0 else (-h if h != -0x80000000 else 0)


def check_parallelism_preconditions(parallelism: int) -> None:
    """Raise ValueError unless 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM (Flink's check)."""
    if not isinstance(parallelism, int) or isinstance(parallelism, bool):
        raise ValueError(f"Parallelism must be an int, got {parallelism!r}")
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"Parallelism not within bounds (1..{UPPER_BOUND_MAX_PARALLELISM}): {parallelism}")


def check_max_parallelism(max_parallelism: int, parallelism: int | None = None) -> None:
    """Validate a max parallelism (the number of key groups), optionally against a parallelism."""
    check_parallelism_preconditions(max_parallelism)
    if parallelism is not None:
        check_parallelism_preconditions(parallelism)
        if max_parallelism < parallelism:
            raise ValueError(f"Max parallelism {max_parallelism} is smaller than parallelism {parallelism}")


def compute_default_max_parallelism(parallelism: int) -> int:
    """Max parallelism when none is configured: 1.5× headroom, at least 128, at most 32768."""
    check_parallelism_preconditions(parallelism)
    headroom = 1 << (parallelism + parallelism // 2 - 1).bit_length()  # MathUtils.roundUpToPowerOfTwo
    return min(max(headroom, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    """The key group of ``key``; None is rejected like Flink rejects a null key."""
    if key is None:
        raise ValueError("Assigned key must not be None")
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        check_parallelism_preconditions(max_parallelism)
    return murmur_hash(_hash32(key)) % max_parallelism


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns ``key_group`` (inputs are trusted: this is on the per-record path)."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key: object, max_parallelism: int, parallelism: int) -> int:
    """The subtask index that ``key`` is routed to."""
    return assign_to_key_group(key, max_parallelism) * parallelism // max_parallelism


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """An inclusive range of key groups [start_key_group, end_key_group]; (0, -1) is the empty range."""

    start_key_group: int
    end_key_group: int
    EMPTY: ClassVar[KeyGroupRange]

    def __post_init__(self) -> None:
        empty = self.start_key_group == 0 and self.end_key_group == -1
        if not empty and not 0 <= self.start_key_group <= self.end_key_group:
            raise ValueError(f"Invalid key group range [{self.start_key_group}, {self.end_key_group}]")

    @classmethod
    def of(cls, start_key_group: int, end_key_group: int) -> KeyGroupRange:
        """The range [start, end], or the empty range when start > end."""
        return cls(start_key_group, end_key_group) if start_key_group <= end_key_group else cls.EMPTY

    def contains(self, key_group: int) -> bool:
        return self.start_key_group <= key_group <= self.end_key_group

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        return KeyGroupRange.of(
            max(self.start_key_group, other.start_key_group), min(self.end_key_group, other.end_key_group)
        )

    __contains__ = contains

    def __len__(self) -> int:
        return self.end_key_group - self.start_key_group + 1

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start_key_group, self.end_key_group + 1))


KeyGroupRange.EMPTY = KeyGroupRange(0, -1)


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The key groups owned by subtask ``operator_index``; the inverse of the operator index rule."""
    check_max_parallelism(max_parallelism, parallelism)
    if not 0 <= operator_index < parallelism:
        raise ValueError(f"Operator index {operator_index} not in [0, {parallelism})")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


class KeyGroupAssigner:
    """Routes the keys of one keyed edge (fixed max parallelism and parallelism) through an LRU cache.

    Only exact str, bytes and int keys are cached: no two of them compare equal across types, so the
    key alone acts as (type, key). Floats (0.0 == -0.0), bools (True == 1) and containers
    ((1,) == (True,)) compare equal while their Java hashes differ, so they are never cached.
    """

    __slots__ = ("max_parallelism", "parallelism", "_cached_key_group")
    _CACHED_TYPES: ClassVar[frozenset[type]] = frozenset({str, bytes, int})

    def __init__(self, max_parallelism: int, parallelism: int, cache_size: int = 4096) -> None:
        check_max_parallelism(max_parallelism, parallelism)
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        self._cached_key_group = functools.lru_cache(maxsize=cache_size)(self._compute_key_group)

    def _compute_key_group(self, key: object) -> int:
        return murmur_hash(_hash32(key)) % self.max_parallelism

    def key_group(self, key: object) -> int:
        if type(key) in self._CACHED_TYPES:
            return self._cached_key_group(key)
        if key is None:
            raise ValueError("Assigned key must not be None")
        return self._compute_key_group(key)

    def operator_index(self, key: object) -> int:
        return self.key_group(key) * self.parallelism // self.max_parallelism
