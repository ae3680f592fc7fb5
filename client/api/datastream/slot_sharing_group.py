"""``SlotSharingGroup`` and ``MemorySize`` (PyFlink's ``pyflink.datastream.slot_sharing_group``).

Operators of different slot sharing groups are never chained and never share a slot: a job needs,
per group, as many slots as the group's largest parallelism, and the sum over its groups.

A group's resource spec (CPU cores, heap / off-heap / managed memory, external resources) is kept
and shown in the plan, but Millstream's slots are uniform (``taskmanager.numberOfTaskSlots`` equal
shares of a TaskManager, each running its tasks in a Spark executor): slots are not sized per
group, so the spec does not change where a task runs. This is said at INFO when a job uses one.
"""
from __future__ import annotations

import functools
from typing import Any

__all__ = ["MemorySize", "SlotSharingGroup"]

_UNITS = {"b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


@functools.total_ordering
class MemorySize:
    """A number of bytes, viewable in binary units (Flink's MemorySize)."""

    def __init__(self, j_memory_size: Any = None, bytes_size: int | None = None) -> None:
        size = bytes_size if j_memory_size is None else j_memory_size
        if isinstance(size, MemorySize):
            size = size.get_bytes()
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"A MemorySize is a number of bytes >= 0, got {size!r}")
        self._bytes = size

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> "MemorySize":
        return MemorySize(bytes_size=int(mebi_bytes) << 20)

    @staticmethod
    def parse(text: str) -> "MemorySize":
        """``"512 mb"``, ``"1g"``, ``"1024"`` (bytes)."""
        stripped = str(text).strip().lower()
        digits = stripped.rstrip("abcdefghijklmnopqrstuvwxyz ").strip()
        unit = stripped[len(digits):].strip() or "b"
        if not digits.isdigit() or unit not in _UNITS:
            raise ValueError(f"Cannot parse {text!r} as a memory size (e.g. '512 mb', '1g')")
        return MemorySize(bytes_size=int(digits) * _UNITS[unit])

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes >> 10

    def get_mebi_bytes(self) -> int:
        return self._bytes >> 20

    def get_gibi_bytes(self) -> int:
        return self._bytes >> 30

    def get_tebi_bytes(self) -> int:
        return self._bytes >> 40

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemorySize) and other._bytes == self._bytes

    def __lt__(self, other: "MemorySize") -> bool:
        if not isinstance(other, MemorySize):
            raise TypeError(f"Cannot compare a MemorySize with {other!r}")
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __str__(self) -> str:
        for unit, shift in (("tb", 40), ("gb", 30), ("mb", 20), ("kb", 10)):
            if self._bytes and self._bytes % (1 << shift) == 0:
                return f"{self._bytes >> shift} {unit}"
        return f"{self._bytes} bytes"

    __repr__ = __str__


class SlotSharingGroup:
    """A slot sharing group's name and, optionally, the resources its slot should have."""

    def __init__(self, name: str, cpu_cores: float | None = None, task_heap_memory: MemorySize | None = None,
                 task_off_heap_memory: MemorySize | None = None, managed_memory: MemorySize | None = None,
                 external_resources: dict[str, float] | None = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"A slot sharing group needs a non-empty name, got {name!r}")
        self._name = name
        self._cpu_cores = cpu_cores
        self._task_heap_memory = task_heap_memory
        self._task_off_heap_memory = task_off_heap_memory
        self._managed_memory = managed_memory
        self._external_resources = dict(external_resources or {})

    def get_name(self) -> str:
        return self._name

    def get_cpu_cores(self) -> float | None:
        return self._cpu_cores

    def get_task_heap_memory(self) -> MemorySize | None:
        return self._task_heap_memory

    def get_task_off_heap_memory(self) -> MemorySize | None:
        return self._task_off_heap_memory

    def get_managed_memory(self) -> MemorySize | None:
        return self._managed_memory

    def get_external_resources(self) -> dict[str, float]:
        return dict(self._external_resources)

    def has_resources(self) -> bool:
        return any(v is not None for v in (self._cpu_cores, self._task_heap_memory, self._task_off_heap_memory,
                                           self._managed_memory)) or bool(self._external_resources)

    def describe(self) -> str:
        """The resource spec in words, for plans and logs."""
        parts = [f"{label} {value}" for label, value in (
            ("cpu cores", self._cpu_cores), ("task heap", self._task_heap_memory),
            ("task off-heap", self._task_off_heap_memory), ("managed memory", self._managed_memory)) if value is not None]
        parts += [f"{name} {value}" for name, value in sorted(self._external_resources.items())]
        return ", ".join(parts) or "no resource spec"

    @staticmethod
    def builder(name: str) -> "SlotSharingGroup.Builder":
        return SlotSharingGroup.Builder(name)

    def _key(self) -> tuple:
        return (self._name, self._cpu_cores, self._task_heap_memory, self._task_off_heap_memory,
                self._managed_memory, tuple(sorted(self._external_resources.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotSharingGroup) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"SlotSharingGroup({self._name!r}: {self.describe()})"

    class Builder:
        """Flink's rule: CPU cores and task heap memory go together (both set, or neither)."""

        def __init__(self, name: str) -> None:
            self._name = name
            self._values: dict[str, Any] = {}
            self._external: dict[str, float] = {}

        def _set(self, key: str, value: Any) -> "SlotSharingGroup.Builder":
            self._values[key] = value
            return self

        def set_cpu_cores(self, cpu_cores: float) -> "SlotSharingGroup.Builder":
            if isinstance(cpu_cores, bool) or not isinstance(cpu_cores, (int, float)) or cpu_cores <= 0:
                raise ValueError(f"The CPU cores of slot sharing group '{self._name}' must be > 0, got {cpu_cores!r}")
            return self._set("cpu_cores", float(cpu_cores))

        def set_task_heap_memory(self, task_heap_memory: MemorySize) -> "SlotSharingGroup.Builder":
            return self._set("task_heap_memory", _positive_memory(task_heap_memory, "task heap memory", self._name))

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int) -> "SlotSharingGroup.Builder":
            return self.set_task_heap_memory(MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(self, task_off_heap_memory: MemorySize) -> "SlotSharingGroup.Builder":
            return self._set("task_off_heap_memory", _memory(task_off_heap_memory, "task off-heap memory", self._name))

        def set_task_off_heap_memory_mb(self, task_off_heap_memory_mb: int) -> "SlotSharingGroup.Builder":
            return self.set_task_off_heap_memory(MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize) -> "SlotSharingGroup.Builder":
            return self._set("managed_memory", _memory(managed_memory, "managed memory", self._name))

        def set_managed_memory_mb(self, managed_memory_mb: int) -> "SlotSharingGroup.Builder":
            return self.set_managed_memory(MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float) -> "SlotSharingGroup.Builder":
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"External resource '{name}' of slot sharing group '{self._name}' must be > 0, got {value!r}")
            self._external[name] = float(value)
            return self

        def build(self) -> "SlotSharingGroup":
            if ("cpu_cores" in self._values) != ("task_heap_memory" in self._values):
                raise ValueError(f"Slot sharing group '{self._name}': the CPU cores and the task heap memory "
                                 "must both be set (or neither)")
            return SlotSharingGroup(self._name, external_resources=self._external, **self._values)


def _memory(value: Any, what: str, group: str) -> MemorySize:
    if not isinstance(value, MemorySize):
        raise TypeError(f"The {what} of slot sharing group '{group}' must be a MemorySize, got {value!r}")
    return value


def _positive_memory(value: Any, what: str, group: str) -> MemorySize:
    if _memory(value, what, group).get_bytes() <= 0:
        raise ValueError(f"The {what} of slot sharing group '{group}' must be > 0")
    return value
