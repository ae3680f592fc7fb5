"""The RocksDB backend's row layout, and key groups snapshotted as its rows (keyed-state snapshot version 2).

Rows (see :mod:`~millstream.runtime.state.rocksdb_backend`): every row key starts with its key
group, two bytes big-endian; a state's row is ``kg | key`` (map state ``kg | len(key) | key | user
key``), its value serialized with the records' serializer; a timer's row is ``kg | timestamp | key``
with an empty value.

A full RocksDB snapshot (a full checkpoint or a savepoint) used to decode every row into Python
objects on the writer thread and pickle them again as the canonical key group (version 1): about
10 µs a row, holding the GIL the task thread needs, at every checkpoint. Flink's full snapshot of
RocksDB writes the rows' bytes as they are, in key-group order; so does version 2: a key group's
payload keeps the version-1 fields (``states``, the timers, ``ttl``) for what was decoded anyway,
and adds ``rows`` ({state name: (kind, ttl, [(row key after the key group, value bytes)])}) and
``timer_rows`` ({"processing_timers" | "event_timers": [row key after the key group]}). A RocksDB
backend restores those rows byte for byte; the heap backend decodes them (:func:`as_canonical`),
so either backend still restores the other's snapshots, also after a rescale (the unit is still
the key group).

Version 3 (written since; version 2 is still read) keeps a state's rows as two parallel lists,
``rows`` = {state name: (kind, ttl, [row key], [value bytes])}, and ``timer_rows`` = {field: [row
key]}, each row key whole (with its key group): the writer thread builds no tuple and slices no key
per row, and the pickle is bytes after bytes (no memo); a RocksDB restore puts the rows as they are.
"""
from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from millstream.runtime.serialization import PROTOCOL, deserialize

__all__ = ["ROWS_VERSION", "ROWS_VERSIONS", "as_canonical", "decode_state_row", "decode_timer_row", "dumps_flat"]

_KG = struct.Struct(">H")
_LEN = struct.Struct(">I")
_TS = struct.Struct(">Q")
_TS_BIAS = 1 << 63  # timestamps are signed: biased so that byte order is numeric order
_MAP = "map"  # heap_backend.MAP (not imported: heap_backend imports this module)

ROWS_VERSION = 3  # what a snapshot writes
ROWS_VERSIONS = (2, 3)  # what a restore reads


def dumps_flat(payload: Any) -> bytes:
    """``payload`` (plain containers of bytes, strings and numbers, no cycles) pickled without a memo:
    the memo's table entry per bytes object is most of the cost of pickling a key group's rows."""
    buf = io.BytesIO()
    p = pickle.Pickler(buf, PROTOCOL)
    p.fast = True  # no memo: each object written as it comes (fine without shared or cyclic references)
    p.dump(payload)
    return buf.getvalue()


def decode_state_row(kind: str, suffix: bytes, value: bytes, entries: dict[Any, Any]) -> None:
    """Adds one state row (its key without the key group) to ``{key: value}`` (map state: ``{key: {user key: value}}``)."""
    if kind == _MAP:
        size = _LEN.unpack_from(suffix)[0]
        key = pickle.loads(suffix[4:4 + size])
        entries.setdefault(key, {})[pickle.loads(suffix[4 + size:])] = deserialize(value)
    else:
        entries[pickle.loads(suffix)] = deserialize(value)


def decode_timer_row(suffix: bytes) -> tuple[int, Any]:
    """(timestamp, key) of a timer row without its key group."""
    return _TS.unpack_from(suffix)[0] - _TS_BIAS, pickle.loads(suffix[8:])


def as_canonical(payload: dict[str, Any]) -> dict[str, Any]:
    """A key group's payload in the version-1 form (rows decoded); a version-1 payload as it is."""
    version = payload.get("version")
    if version not in ROWS_VERSIONS:
        return payload
    states = dict(payload.get("states", {}))
    ttl = list(payload.get("ttl", ()))
    for name, spec in payload.get("rows", {}).items():
        kind, is_ttl = spec[0], spec[1]
        entries = states.setdefault(name, (kind, {}))[1]
        for suffix, value in (spec[2] if version == 2 else zip([k[2:] for k in spec[2]], spec[3])):
            decode_state_row(kind, suffix, value, entries)
        if is_ttl and name not in ttl:
            ttl.append(name)
    out = {"version": 1, "states": states}
    skip = 0 if version == 2 else 2  # version 3: whole row keys
    for field in ("processing_timers", "event_timers"):
        out[field] = list(payload.get(field, ())) + [decode_timer_row(r[skip:])
                                                     for r in payload.get("timer_rows", {}).get(field, ())]
    if ttl:
        out["ttl"] = ttl
    return out
