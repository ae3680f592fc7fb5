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
"""
from __future__ import annotations

import pickle
import struct
from typing import Any

from millstream.runtime.serialization import deserialize

__all__ = ["ROWS_VERSION", "as_canonical", "decode_state_row", "decode_timer_row"]

_KG = struct.Struct(">H")
_LEN = struct.Struct(">I")
_TS = struct.Struct(">Q")
_TS_BIAS = 1 << 63  # timestamps are signed: biased so that byte order is numeric order
_MAP = "map"  # heap_backend.MAP (not imported: heap_backend imports this module)

ROWS_VERSION = 2


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
    if payload.get("version") != ROWS_VERSION:
        return payload
    states = dict(payload.get("states", {}))
    ttl = list(payload.get("ttl", ()))
    for name, (kind, is_ttl, rows) in payload.get("rows", {}).items():
        entries = states.setdefault(name, (kind, {}))[1]
        for suffix, value in rows:
            decode_state_row(kind, suffix, value, entries)
        if is_ttl and name not in ttl:
            ttl.append(name)
    out = {"version": 1, "states": states}
    for field in ("processing_timers", "event_timers"):
        out[field] = list(payload.get(field, ())) + [decode_timer_row(r) for r in payload.get("timer_rows", {}).get(field, ())]
    if ttl:
        out["ttl"] = ttl
    return out
