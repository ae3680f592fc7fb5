"""Keys as the keyed runtime holds them: hashable, equal when the user's keys are equal.

PyFlink serializes every key (pickled by default) and compares keys by their bytes, so a key
selector may return a list, a dict or a set: ``key_by(lambda x: [1])`` works there. Millstream keeps
keys as Python objects in dicts (state tables, timers, combiners), which need hashable keys. A key
of a mutable container type is therefore replaced by an equal hashable twin of the same type: a
list by a ``list`` subclass, a dict by a ``dict`` subclass, a set by a ``set`` subclass (nested
containers too). The twin equals and prints as its original, ``isinstance`` still holds (it pickles as
the twin, so restored state keeps hashable keys),
and its key group is the original's (keygroups hashes lists, dicts and sets by content, never with
Python's salted ``hash``). A key that is neither hashable nor such a container (an object that
defines ``__eq__`` but no ``__hash__``) is rejected with an error naming it.

Only batches holding a key that is not a plain str/int/bytes/float/bool pay for the check, and only
those holding an unhashable key for the conversion.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Iterable

__all__ = ["UnkeyableError", "hashable_key", "hashable_keys"]

# Keys of these types are hashable as they are: a batch of only them is returned untouched.
_FLAT = frozenset({str, int, bytes, float, bool, type(None)})
_drain: Callable[[Iterable[Any]], None] = collections.deque(maxlen=0).extend


class UnkeyableError(TypeError):
    """A key selector returned a value that cannot be a key."""


class _KeyList(list):
    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))



class _KeyDict(dict):
    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))



class _KeySet(set):
    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self))

    def __repr__(self) -> str:  # a set's own text, not the subclass's
        return repr(set(self))



def _twin(key: Any) -> Any:
    """An equal, hashable version of ``key`` (containers converted recursively)."""
    if type(key) in _FLAT:
        return key
    if isinstance(key, list):
        return _KeyList(map(_twin, key))
    if isinstance(key, dict):
        return _KeyDict((_twin(k), _twin(v)) for k, v in key.items())
    if isinstance(key, (set, frozenset)):
        return _KeySet(map(_twin, key)) if isinstance(key, set) else frozenset(map(_twin, key))
    if isinstance(key, bytearray):
        return bytes(key)
    if type(key) is tuple:
        return tuple(map(_twin, key))
    return key


def hashable_key(key: Any) -> Any:
    """``key`` itself when hashable, else its hashable twin; raises :class:`UnkeyableError`."""
    try:
        hash(key)
        return key
    except TypeError:
        pass
    twin = _twin(key)
    try:
        hash(twin)
    except TypeError as e:
        raise UnkeyableError(
            f"The key {key!r} of type {type(key).__name__} cannot be used as a key: {e}. A key must be "
            "hashable (str, int, float, bytes, a tuple, a Row, a frozen dataclass...) or a list, dict "
            "or set of such values."
        ) from None
    return twin


def hashable_keys(keys: list[Any]) -> list[Any]:
    """The keys of a batch, each :func:`hashable_key`; the same list when every key is hashable."""
    if _FLAT.issuperset(map(type, keys)):
        return keys
    try:
        _drain(map(hash, keys))  # C-level: raises at the first unhashable key
        return keys
    except TypeError:
        return list(map(hashable_key, keys))
