"""Java's narrowing of declared numeric types, as PyFlink applies it.

In PyFlink a value of a declared ``Types.BYTE/SHORT/INT/LONG`` becomes a Java byte, short, int or
long on its way through Java (``from_collection``'s input conversion, and the output of a Python
function declared with ``output_type``): an int out of range wraps around as a Java cast does
(``(short) 43878 == -21658``, ``(int) 9147483648 == 557549056``), and a ``Types.FLOAT`` becomes a
32-bit float. The same holds inside tuples, rows, lists, arrays and maps of such types. Millstream
keeps Python objects, so it applies the same conversion at the same places: the collection once
when the job is built, an operator's output batch by batch at run time.

Only types that contain such a component get a converter (``None`` otherwise: zero cost), and a
batch whose integers are all in range is handed on untouched after a C-level min/max per field.
"""
from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any, Callable, Iterable, Sequence

from millstream.common.row import Row, _create_row
from millstream.runtime.timestamps import stamped, timestamps_of

__all__ = ["NarrowedKey", "batch_narrower", "ints_in_range", "value_narrower"]

Convert = Callable[[Any], Any]

_INT_BITS = {"BYTE": 8, "SHORT": 16, "INT": 32, "LONG": 64}
_float32 = struct.Struct("f")


def _int_narrower(bits: int) -> Convert:
    half, mask = 1 << (bits - 1), (1 << bits) - 1

    def narrow(v: Any) -> Any:
        if type(v) is int and not -half <= v < half:  # bools and non-ints stay as they are
            return ((v + half) & mask) - half
        return v

    narrow.bits = bits  # type: ignore[attr-defined]  # lets NarrowedKey check a batch of keys at once
    return narrow


def _to_float32(v: Any) -> Any:
    if type(v) is not float and type(v) is not int:
        return v
    try:
        return _float32.unpack(_float32.pack(v))[0]
    except OverflowError:  # beyond float's range: a C cast gives an infinity
        return float("inf") if v > 0 else float("-inf")


def _fields_narrower(convs: list[Convert | None]) -> Convert:
    pairs = [(i, c) for i, c in enumerate(convs) if c is not None]

    def narrow(v: Any) -> Any:
        if isinstance(v, Row):
            values = list(v)
            if len(values) != len(convs):
                return v
            for i, c in pairs:
                values[i] = c(values[i])
            return _create_row(v._fields, values, v.get_row_kind())
        if isinstance(v, (tuple, list)) and len(v) == len(convs):
            values = list(v)
            for i, c in pairs:
                values[i] = c(values[i])
            return tuple(values) if isinstance(v, tuple) else values
        return v

    return narrow


def value_narrower(type_info: Any) -> Convert | None:
    """A converter applying Java's narrowing for ``type_info`` to one value; None when the type
    declares nothing to narrow (strings, doubles, pickled objects...)."""
    if type_info is None:
        return None
    name = getattr(type_info, "name", None)
    if name in _INT_BITS:
        return _int_narrower(_INT_BITS[name])
    if name == "FLOAT":
        return _to_float32
    components: Sequence[Any] = getattr(type_info, "components", ())
    if name in ("TUPLE", "ROW"):
        convs = [value_narrower(c) for c in components]
        return _fields_narrower(convs) if any(convs) else None
    if name in ("LIST", "BASIC_ARRAY", "PRIMITIVE_ARRAY", "OBJECT_ARRAY"):
        element = value_narrower(components[0])
        if element is None:
            return None

        def narrow_elements(v: Any) -> Any:
            if isinstance(v, list):
                return list(map(element, v))
            return tuple(map(element, v)) if isinstance(v, tuple) else v

        return narrow_elements
    if name == "MAP":
        key, value = (value_narrower(c) for c in components)
        if key is None and value is None:
            return None
        k, val = key or (lambda x: x), value or (lambda x: x)
        return lambda v: {k(a): val(b) for a, b in v.items()} if isinstance(v, dict) else v
    return None


_INT_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}  # struct's standard-size signed integers


def ints_in_range(values: Iterable[Any], count: int, bits: int) -> bool:
    """Whether every one of the ``count`` values is an integer within range, checked by packing them
    as Java's integers in one C call (struct refuses a value out of range or not an integer): the
    converter would leave such a batch as it is (it changes only ints out of range). Half the cost
    of a list and its min and max (~20 against ~40 ns a record on a 2,048-record batch)."""
    if not count:
        return True
    try:
        struct.pack(f"={count}{_INT_CODES[bits]}", *values)
    except struct.error:
        return False
    return True


def batch_narrower(type_info: Any) -> Callable[[list[Any]], list[Any]] | None:
    """A converter for a batch of records of ``type_info`` (timestamps kept), or None when the type
    has nothing to narrow. A batch whose integer values are already in range is returned as is."""
    convert = value_narrower(type_info)
    if convert is None:
        return None
    name = type_info.name
    checks: list[tuple[Callable[[Any], Any] | None, int]] | None = None
    int_fields: tuple[int, ...] | None = None
    if name in _INT_BITS:
        checks = [(None, _INT_BITS[name])]
    elif name in ("TUPLE", "ROW") and all(
        value_narrower(c) is None or c.name in _INT_BITS for c in type_info.components
    ):
        checks = [(itemgetter(i), _INT_BITS[c.name]) for i, c in enumerate(type_info.components) if c.name in _INT_BITS]
        int_fields = tuple(i for i, c in enumerate(type_info.components) if c.name in _INT_BITS)

    def narrow(records: list[Any]) -> list[Any]:
        if checks is not None:
            try:
                count = len(records)
                if all(ints_in_range(records if get is None else map(get, records), count, bits) for get, bits in checks):
                    return records
            except (TypeError, IndexError, KeyError):
                pass
        return stamped(list(map(convert, records)), timestamps_of(records))

    # The positions of a tuple type whose integers are all the narrowing may change (None: it may
    # change more, or records that are not tuples): a consumer that proves those fields are ints in
    # range needs no narrowing of the batch (CombiningWriter.emit_unnarrowed).
    narrow.int_fields = int_fields  # type: ignore[attr-defined]
    return narrow


class NarrowedKey:
    """A key selector whose keys narrow to ``key_by``'s declared ``key_type``, as PyFlink's keys do
    (it writes each key with the key type's serializer): routing and keyed state see the same key."""

    def __init__(self, get_key: Callable[[Any], Any], narrow: Convert) -> None:
        self.get_key_of = get_key
        self.narrow = narrow

    def __call__(self, value: Any) -> Any:
        return self.narrow(self.get_key_of(value))

    def keys_of(self, records: list[Any]) -> list[Any]:
        """The keys of a batch, as ``[self(r) for r in records]``: for an integer key type the raw
        keys are checked in one C call and handed on as they are when all are in range (the narrowing
        would change none), instead of two Python calls more per record."""
        keys = list(map(self.get_key_of, records))
        bits = getattr(self.narrow, "bits", None)
        if bits is not None and ints_in_range(keys, len(keys), bits):
            return keys
        return list(map(self.narrow, keys))
