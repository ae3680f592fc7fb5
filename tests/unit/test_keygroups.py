"""Key groups: Java hashCodes, Flink's murmurHash, key group → subtask ranges, cross-process stability.

Expected values come from Java's and Flink's definitions (and published outputs where cited), not
from the module under test.
"""

from __future__ import annotations

import fractions
import random

import pytest

from millstream.runtime.keygroups import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupAssigner,
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    check_max_parallelism,
    check_parallelism_preconditions,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    java_hash_code,
    murmur_hash,
)

M32 = 0xFFFFFFFF
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def to_int(u: int) -> int:
    """Java's (int) cast of an arbitrary integer."""
    u &= M32
    return u - 2**32 if u >= 2**31 else u


# ---- reference transcriptions of the Java/Flink definitions -------------------------------------


def ref_string_hash(s: str) -> int:
    """String.hashCode: h = 31*h + c over the UTF-16 code units."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = to_int(31 * h + (units[i] << 8 | units[i + 1]))
    return h


def ref_byte_array_hash(b: bytes) -> int:
    """Arrays.hashCode(byte[]): h = 1, then h = 31*h + (signed byte)."""
    h = 1
    for x in b:
        h = to_int(31 * h + (x - 256 if x >= 128 else x))
    return h


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def ref_murmur_raw(code: int) -> int:
    """Flink MathUtils.murmurHash(int) up to (excluding) its final sign handling, as a Java int."""
    c = (code & M32) * 0xCC9E2D51 & M32
    c = rotl(c, 15) * 0x1B873593 & M32
    c = (rotl(c, 13) * 5 + 0xE6546B64) & M32
    c ^= 4
    c ^= c >> 16
    c = c * 0x85EBCA6B & M32
    c ^= c >> 13
    c = c * 0xC2B2AE35 & M32
    c ^= c >> 16
    return to_int(c)


def ref_murmur(code: int) -> int:
    raw = ref_murmur_raw(code)
    return raw if raw >= 0 else (-raw if raw != INT_MIN else 0)


def murmur_preimage(raw: int) -> int:
    """The int whose murmur mixing (before the sign handling) yields ``raw``: every step inverts."""
    def inv(c: int) -> int:
        return pow(c, -1, 2**32)

    h = raw & M32
    h ^= h >> 16
    h = h * inv(0xC2B2AE35) & M32
    h ^= (h >> 13) ^ (h >> 26)
    h = h * inv(0x85EBCA6B) & M32
    h ^= h >> 16
    h ^= 4
    h = (h - 0xE6546B64) * inv(5) & M32
    k = rotl(h, 32 - 13) * inv(0x1B873593) & M32
    return to_int(rotl(k, 32 - 15) * inv(0xCC9E2D51))


# ---- max parallelism ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [
        (1, 128),  # roundUpToPowerOfTwo(1) = 1, raised to the lower bound
        (2, 128),
        (4, 128),  # 6 → 8 → 128
        (85, 128),  # 85 + 42 = 127 → 128
        (86, 256),  # 86 + 43 = 129 → 256
        (100, 256),  # 150 → 256
        (171, 256),  # 171 + 85 = 256 stays 256
        (172, 512),  # 258 → 512
        (1000, 2048),  # 1500 → 2048
        (21845, 32768),  # 32767 → 32768
        (21846, 32768),  # 32769 → 65536, capped
        (30000, 32768),
        (32768, 32768),
    ],
)
def test_default_max_parallelism(parallelism: int, expected: int) -> None:
    assert compute_default_max_parallelism(parallelism) == expected


def test_bounds_constants() -> None:
    assert DEFAULT_LOWER_BOUND_MAX_PARALLELISM == 1 << 7
    assert UPPER_BOUND_MAX_PARALLELISM == 1 << 15


@pytest.mark.parametrize("bad", [0, -1, 32769, 2.0, True])
def test_parallelism_preconditions_reject(bad: object) -> None:
    with pytest.raises(ValueError):
        check_parallelism_preconditions(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        compute_default_max_parallelism(bad)  # type: ignore[arg-type]


def test_max_parallelism_checks() -> None:
    check_parallelism_preconditions(1)
    check_parallelism_preconditions(32768)
    check_max_parallelism(128, 128)
    with pytest.raises(ValueError, match="smaller than parallelism"):
        check_max_parallelism(4, 5)
    with pytest.raises(ValueError):
        compute_key_group_range_for_operator_index(4, 5, 0)
    with pytest.raises(ValueError):
        compute_key_group_range_for_operator_index(128, 4, 4)
    with pytest.raises(ValueError):
        assign_to_key_group("k", 0)
    with pytest.raises(ValueError):
        KeyGroupAssigner(128, 0)


# ---- Java hashCodes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),  # the classic String.hashCode collision
        ("flink", 97520992),  # these four: printed by a Flink 1.20 run (see test_known_key_groups)
        ("spark", 109638365),
        ("hive", 3202928),
        ("world", 113318802),
        ("polygenelubricants", INT_MIN),  # well-known Java string whose hashCode is Integer.MIN_VALUE
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # U+1F600 is the surrogate pair D83D DE00 in UTF-16
        ("a\U0001f600", to_int(31 * (31 * 97 + 0xD83D) + 0xDE00)),
        ("\u00e9", 0xE9),
        ("\ud800", 0xD800),  # a lone surrogate is one code unit, as in a Java String
    ],
)
def test_string_hash_known_values(s: str, expected: int) -> None:
    assert java_hash_code(s) == expected
    assert ref_string_hash(s) == expected


def test_string_hash_overflows_like_java() -> None:
    s = "The quick brown fox jumps over the lazy dog"
    unbounded = sum(ord(c) * 31 ** (len(s) - 1 - i) for i, c in enumerate(s))
    assert unbounded > 2**64  # so the 32-bit wraparound is really exercised
    assert java_hash_code(s) == to_int(unbounded)


def test_string_hash_matches_reference_for_all_shapes() -> None:
    rng = random.Random(7)
    alphabets = ["abcXYZ019 -_", "héllo wörld€漢字", "a\U0001f600\U00010348\ud800\udfff"]
    lengths = [*range(0, 20), 31, 63, 200, 511, 512, 513, 1024, 1500, 5000]
    for n in lengths:
        for alphabet in alphabets:
            s = "".join(rng.choice(alphabet) for _ in range(n))
            assert java_hash_code(s) == ref_string_hash(s), (n, alphabet)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (1, 1),
        (-1, -1),  # Integer.hashCode (Long.hashCode(-1L) would be 0)
        (INT_MAX, INT_MAX),
        (INT_MIN, INT_MIN),
        (2**31, INT_MIN),  # Long: 0x80000000 ^ 0
        (2**32, 1),  # Long: 1 ^ 0
        (2**32 + 1, 0),  # Long: 1 ^ 1
        (-(2**32), -1),  # Long 0xFFFFFFFF00000000: 0xFFFFFFFF ^ 0
        (INT_MIN - 1, INT_MIN),  # Long 0xFFFFFFFF7FFFFFFF
        (LONG_MAX, INT_MIN),
        (LONG_MIN, INT_MIN),
        (0x123456789A, 0x12 ^ 0x3456789A),
        (2**64, 961),  # BigInteger: magnitude words [1, 0, 0] → (1*31 + 0)*31 + 0
        (-(2**64), -961),
        (2**63, INT_MIN),  # BigInteger [0x80000000, 0] → 31 * 0x80000000 (as int)
    ],
)
def test_integer_hash(value: int, expected: int) -> None:
    assert java_hash_code(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, 1231),
        (False, 1237),
        (0.0, 0),
        (-0.0, INT_MIN),  # bits 0x8000000000000000
        (1.0, 0x3FF00000),
        (-1.0, to_int(0xBFF00000)),
        (2.5, 0x40040000),
        (float("inf"), 0x7FF00000),
        (float("nan"), 0x7FF80000),  # doubleToLongBits' canonical NaN
        (-float("nan"), 0x7FF80000),
        (None, 0),
        (b"", 1),
        (b"\x00", 31),
        (b"\x80", 31 - 128),  # bytes are signed in Java
        (b"\xff", 31 - 1),
        (b"abc", (((31 + 97) * 31) + 98) * 31 + 99),
        (bytearray(b"abc"), (((31 + 97) * 31) + 98) * 31 + 99),
        ((), 1),
        ((1, 2), 31 * (31 + 1) + 2),  # List.hashCode / Arrays.hashCode(Object[])
        (["a", None], 31 * (31 + 97) + 0),
        (frozenset({"a", "b"}), 97 + 98),  # Set.hashCode: sum of element hashes
        ({"a": 1}, 97 ^ 1),  # Map.hashCode: sum of key ^ value
    ],
)
def test_other_hashes(value: object, expected: int) -> None:
    assert java_hash_code(value) == expected


def test_byte_array_hash_matches_reference() -> None:
    rng = random.Random(3)
    for n in [*range(0, 12), 100, 513, 2000]:
        data = bytes(rng.randrange(256) for _ in range(n))
        assert java_hash_code(data) == ref_byte_array_hash(data)


def test_unpicklable_key_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="no stable hash"):
        java_hash_code(lambda: None)


# ---- murmurHash ---------------------------------------------------------------------------------


def test_murmur_hash_matches_flink_transcription() -> None:
    rng = random.Random(11)
    codes = [0, 1, -1, 2, 97, 99162322, INT_MAX, INT_MIN, INT_MIN + 1, *range(-500, 500)]
    codes += [rng.randint(INT_MIN, INT_MAX) for _ in range(20000)]
    for code in codes:
        got = murmur_hash(code)
        assert got == ref_murmur(code), code
        assert 0 <= got <= INT_MAX


def test_murmur_hash_of_integer_min_value_result_is_zero() -> None:
    code = murmur_preimage(INT_MIN)
    assert ref_murmur_raw(code) == INT_MIN  # the preimage really hits Flink's special case
    assert murmur_hash(code) == 0
    negative = murmur_preimage(-12345)
    assert murmur_hash(negative) == 12345


# ---- key → key group → subtask ------------------------------------------------------------------


def test_known_key_groups() -> None:
    # Printed by KeyGroupRangeAssignment.assignToKeyGroup(key, 128) in a Flink 1.20.4 MiniCluster
    # run, quoted in third-party study notes on Flink partitioning (code index file 69395428248).
    assert {k: assign_to_key_group(k, 128) for k in ["flink", "spark", "hive", "hello", "world"]} == {
        "flink": 98,
        "spark": 7,
        "hive": 9,
        "hello": 35,
        "world": 66,
    }
    # From a Flink-compatible re-implementation's test "shouldUseFlinkCompatibleMurmurKeyGroupHash"
    # (code index file 70347225314).
    assert assign_to_key_group("A", 128) == 104
    assert assign_to_key_group("B", 128) == 17
    assert assign_key_to_parallel_operator("A", 128, 2) == 1
    assert assign_key_to_parallel_operator("B", 128, 2) == 0
    assert assign_key_to_parallel_operator("A", 128, 8) == 6
    assert assign_key_to_parallel_operator("B", 128, 8) == 1
    assert compute_key_group_range_for_operator_index(128, 3, 1) == KeyGroupRange(43, 85)


def test_key_group_is_murmur_of_java_hash_mod_max_parallelism() -> None:
    keys: list[object] = ["x", "ünïcode", 42, -7, 2**40, 3.25, b"\x01\xfe", ("k", 1), True]
    for key in keys:
        for max_parallelism in (1, 7, 128, 4096, 32768):
            expected = ref_murmur(java_hash_code(key)) % max_parallelism
            assert assign_to_key_group(key, max_parallelism) == expected


def test_none_key_is_rejected_like_flinks_null_key() -> None:
    with pytest.raises(ValueError, match="must not be None"):
        assign_to_key_group(None, 128)
    with pytest.raises(ValueError, match="must not be None"):
        assign_key_to_parallel_operator(None, 128, 4)
    with pytest.raises(ValueError, match="must not be None"):
        KeyGroupAssigner(128, 4).key_group(None)


@pytest.mark.parametrize("parallelism", range(1, 9))
def test_ranges_partition_key_groups(parallelism: int) -> None:
    max_parallelism = 128
    ranges = [
        compute_key_group_range_for_operator_index(max_parallelism, parallelism, i) for i in range(parallelism)
    ]
    assert ranges[0].start_key_group == 0
    assert ranges[-1].end_key_group == max_parallelism - 1
    for left, right in zip(ranges, ranges[1:]):
        assert right.start_key_group == left.end_key_group + 1  # contiguous and disjoint
    assert sorted(kg for r in ranges for kg in r) == list(range(max_parallelism))
    for i, r in enumerate(ranges):
        assert r.start_key_group == -(-i * max_parallelism // parallelism)  # ceil(i * maxP / p)
        assert r.end_key_group == ((i + 1) * max_parallelism - 1) // parallelism
        assert abs(len(r) - max_parallelism / parallelism) < 1
    for kg in range(max_parallelism):
        owner = compute_operator_index_for_key_group(max_parallelism, parallelism, kg)
        assert owner == kg * parallelism // max_parallelism
        assert ranges[owner].contains(kg)


@pytest.mark.parametrize(("max_parallelism", "parallelism"), [(256, 100), (32768, 32768), (32768, 3), (7, 7)])
def test_every_key_group_is_in_its_owners_range(max_parallelism: int, parallelism: int) -> None:
    for kg in range(max_parallelism):
        owner = compute_operator_index_for_key_group(max_parallelism, parallelism, kg)
        assert kg in compute_key_group_range_for_operator_index(max_parallelism, parallelism, owner)


def test_default_max_parallelism_skew_flink_21695() -> None:
    # Parallelism 100 gets 256 key groups: 56 subtasks own 3 and 44 own 2 (the skew of FLINK-21695).
    sizes = [len(compute_key_group_range_for_operator_index(256, 100, i)) for i in range(100)]
    assert (sizes.count(3), sizes.count(2)) == (56, 44)


# ---- KeyGroupRange (cases of Flink's KeyGroupRangeTest) -----------------------------------------


def test_key_group_range_basics() -> None:
    for start, end in [(0, 0), (0, 1), (1, 2), (42, 42), (3, 7), (0, 32767), (32766, 32767)]:
        r = KeyGroupRange.of(start, end)
        assert len(r) == end - start + 1
        assert list(r) == list(range(start, end + 1))
        assert all(r.contains(kg) for kg in r)
        assert not r.contains(start - 1) and not r.contains(end + 1)
    assert KeyGroupRange.of(5, 4) is KeyGroupRange.EMPTY
    assert len(KeyGroupRange.EMPTY) == 0 and list(KeyGroupRange.EMPTY) == [] and not KeyGroupRange.EMPTY
    assert KeyGroupRange.EMPTY == KeyGroupRange(0, -1)
    with pytest.raises(ValueError):
        KeyGroupRange(-3, 2)
    with pytest.raises(ValueError):
        KeyGroupRange(5, 4)


def test_key_group_range_intersection() -> None:
    assert KeyGroupRange.of(0, 10).intersection(KeyGroupRange.of(3, 7)) == KeyGroupRange(3, 7)
    assert KeyGroupRange.of(0, 5).intersection(KeyGroupRange.of(6, 10)) == KeyGroupRange.EMPTY
    assert KeyGroupRange.of(0, 10).intersection(KeyGroupRange.of(5, 20)) == KeyGroupRange(5, 10)
    assert KeyGroupRange.of(3, 12).intersection(KeyGroupRange.of(0, 10)) == KeyGroupRange(3, 10)


# ---- KeyGroupAssigner ---------------------------------------------------------------------------


def test_assigner_agrees_with_the_functions_and_keeps_look_alike_keys_apart() -> None:
    assigner = KeyGroupAssigner(128, 3, cache_size=8)
    # Equal in Python (and in a dict) but different Java hashes: the cache must not merge them.
    keys: list[object] = [1, True, 1.0, 0, False, 0.0, -0.0, (1,), (True,), "1", b"1"] * 3
    keys += [f"user-{i}" for i in range(50)] * 2 + [fractions.Fraction(1, 3), ("a", 2)]
    for key in keys:
        assert assigner.key_group(key) == assign_to_key_group(key, 128), key
        assert assigner.operator_index(key) == assign_key_to_parallel_operator(key, 128, 3), key
    assert assigner.key_group(True) != assigner.key_group(1)
    assert assigner.key_group(-0.0) != assigner.key_group(0.0)
    assert assigner._cached_key_group.cache_info().currsize <= 8


# ---- stability across processes ----------------------------------------------------------------
