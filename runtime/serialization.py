"""Records as bytes: the one serializer for every place records leave a process.

Network buffers (``runtime.network.partition``), records collected for ``execute_and_collect``
(the task's collect channel, the client's iterator), keyed-state snapshots and the unit-test
:class:`~millstream.runtime.task.environment.SimpleTaskEnvironment` all go through
:class:`RecordSerializer` and :func:`deserialize`, so a test fails on exactly the records the real
transfer fails on.

**Fast path**: the C pickler, protocol 5, classes by reference — the cost builtin records (word
count's ``(str, int)`` pairs) always paid. **Fallback**: a record whose class cannot be found by
reference — a dataclass, namedtuple or plain class of the job script, which in a Spark worker is not
``__main__``; a class local to a function; a class of a module that travels by value — makes the
C pickler raise, and the buffer is pickled again with cloudpickle, which carries such classes by
value. The switch is *sticky* per serializer (one per writer): a stream of user-class records pays
one failed pickle, not one per buffer.

No format flag is needed on the wire: cloudpickle writes standard pickle whose by-value classes are
rebuilt by functions of the ``cloudpickle`` module, importable wherever Millstream is, so one
``pickle.loads`` reads both. cloudpickle tags each class it sends by value with a tracker id chosen
in the process that first pickled the class (the client, when it pickles the job's functions), and
unpickling a tracked id returns the class already known under it. So a record's class in a worker is
the class its operators' functions use (``isinstance`` holds), and a collected record comes back to
the client as an instance of the user's own class (``result == [Order(...)]`` holds).
"""
from __future__ import annotations

import io
import pickle
from typing import Any

import cloudpickle

__all__ = ["PROTOCOL", "DeserializationError", "RecordSerializer", "SerializationError", "deserialize"]

PROTOCOL = 5
_dumps = pickle.dumps
_cloud_dumps = cloudpickle.dumps


class SerializationError(TypeError):
    """Records that cannot be serialized even with their classes by value (a lock, a socket, a
    generator...). A TypeError, as pickle's own "cannot pickle" errors are."""


class DeserializationError(ValueError):
    """Serialized records that cannot be read in this process, e.g. a class whose module is not
    importable here."""


_IMPORT_HINT = (
    " (a record's class travels by reference when its module is importable where it was written: "
    "that module must be importable where the records are read too; env.add_python_file ships it "
    "to the TaskManagers)"
)


class RecordSerializer:
    """Serializes lists of records; one instance per writer (a result partition, a task's collect
    channel, a state backend), which remembers whether its records need classes by value.

    ``shared=False`` (records in flight between tasks): the C pickler runs without its memo, which
    otherwise records every object it writes, tuples and strings included, to write a second
    reference to the same object as a back-reference. An object a batch holds twice then travels
    twice and arrives as two equal objects, as records serialized one at a time would (Flink
    serializes each record on its own); pickling costs ~0.6x and unpickling ~0.9x per record (a
    Nexmark bid, a word count pair), and the bytes are fewer. A cyclic record, which the pickler
    refuses without a memo (ValueError), makes that batch go with the memo.
    """

    __slots__ = ("by_value", "shared")

    def __init__(self, shared: bool = True) -> None:
        self.by_value = False  # set by the first batch the C pickler could not handle
        self.shared = shared

    def serialize(self, records: Any) -> bytes:
        if self.by_value:
            return self._by_value(records)
        try:
            if not self.shared:
                buffer = io.BytesIO()
                pickler = pickle.Pickler(buffer, PROTOCOL)
                pickler.fast = True  # no memo
                try:
                    pickler.dump(records)
                    return buffer.getvalue()
                except ValueError:  # "fast mode: can't pickle cyclic objects": the memo handles them
                    pass
            return _dumps(records, PROTOCOL)
        except Exception:  # PicklingError, AttributeError or TypeError, depending on the object
            return self._by_value(records)

    def serialize_parts(self, records: list[Any], max_bytes: int) -> list[bytes]:
        """``records`` serialized in order, split in halves until each part is at most ``max_bytes``
        (a single record larger than that travels alone), so a consumer that buffers or forwards
        bounded amounts never meets an oversized message."""
        payload = self.serialize(records)
        if len(payload) <= max_bytes or len(records) <= 1:
            return [payload]
        half = len(records) // 2
        return self.serialize_parts(records[:half], max_bytes) + self.serialize_parts(records[half:], max_bytes)

    def _by_value(self, records: Any) -> bytes:
        try:
            data = _cloud_dumps(records, PROTOCOL)
        except Exception as e:  # cloudpickle raises PicklingError, TypeError, ...: one clear type
            raise SerializationError(f"cannot serialize the records: {type(e).__name__}: {e}") from e
        self.by_value = True
        return data


def deserialize(data: bytes | bytearray | memoryview) -> Any:
    """Reads what any :class:`RecordSerializer` wrote, fast path or fallback alike."""
    try:
        return pickle.loads(data)
    except Exception as e:  # UnpicklingError, ImportError, AttributeError, ...: one clear type
        hint = _IMPORT_HINT if isinstance(e, (ImportError, AttributeError)) else ""
        raise DeserializationError(f"cannot deserialize records: {type(e).__name__}: {e}{hint}") from e
