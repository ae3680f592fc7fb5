"""Sorting a PyFlink test's outcome: passed, failed, needs a Java object, or uses an API that
PyFlink 2.x removed.

Pure logic (no pytest, no Millstream imports), so it is unit-tested on its own. A test needs a
Java object when what stopped it is PyFlink's Java side, not Millstream's behaviour:
- the harness's own :class:`JavaObjectNeeded`, raised by the stand-ins for ``get_gateway()``,
  ``pyflink.util.java_utils`` and an environment's ``_j_stream_execution_environment``, and by an
  import of ``py4j`` (the Java gateway library) from a test module;
- an attribute or keyword named like PyFlink's Java handles (``_j_*``, ``j_*``), which exist only
  on PyFlink's Java-backed objects (``ds._j_data_stream``, ``Configuration(j_configuration=...)``).
- Millstream's :class:`millstream.JavaCodeNotSupported` (a Java class handed over to run, such as
  ``SourceFunction("org.example.MySource")``), recognised by its type's name so this module stays
  free of Millstream imports.
The test modules are partly of a pre-2.0 PyFlink revision; Millstream targets PyFlink 2.3. A test
that stopped at a name of :data:`REMOVED_IN_PYFLINK_2` (an attribute, or a PyFlink name the import
alias lacks) is counted as "removed", with the reason, not as a failure: Millstream does not add
APIs that PyFlink itself no longer has.
A test that stopped at a ``pyflink.table`` name the alias lacks needs the Table API, which
Millstream does not provide yet (a later issue): it is counted as "table", not as a failure of
the DataStream API.
The exception's chain (``__cause__``/``__context__``) is searched too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PASSED, FAILED, JAVA, SKIPPED = "passed", "failed", "java", "skipped"  # SKIPPED: by PyFlink's own marks
REMOVED = "removed"  # the test uses an API PyFlink 2.x removed
TABLE = "table"  # the test uses PyFlink's Table API (pyflink.table), which Millstream does not have yet

# APIs the old test modules use that PyFlink 2.x no longer has. Flink 2.0 removed the APIs that
# 1.x deprecated (Flink 2.0 release notes, "API removal"; FLIP-381 for the object-typed config
# getters/setters); the newest stored flink-python/pyflink/datastream sources (found with the
# search tool) have none of these names, nor apache-flink 2.3.0's __all__ lists.
_TIME_CHARACTERISTIC = ("TimeCharacteristic was deprecated in Flink 1.12 (FLINK-19319: event time is the default) "
                        "and removed in Flink 2.0")
_KRYO = ("Kryo registration on the environment was deprecated in Flink 1.19 (FLIP-398: "
         "pipeline.serialization-config instead) and removed in Flink 2.0")
_OLD_BACKENDS = ("MemoryStateBackend / FsStateBackend / RocksDBStateBackend were deprecated in Flink 1.13 "
                 "(FLIP-142: HashMapStateBackend or EmbeddedRocksDBStateBackend plus a CheckpointStorage) and "
                 "removed in Flink 2.0")
_CLEANUP = ("ExternalizedCheckpointCleanup and its CheckpointConfig methods were replaced by "
            "ExternalizedCheckpointRetention (set_externalized_checkpoint_retention) and removed in Flink 2.0")
_PREFER_CHECKPOINT = ("prefer-checkpoint-for-recovery was deprecated in Flink 1.12 (FLINK-20441: it can lose data) "
                      "and removed in Flink 2.0")
REMOVED_IN_PYFLINK_2: dict[str, str] = {
    "TimeCharacteristic": _TIME_CHARACTERISTIC,
    "set_stream_time_characteristic": _TIME_CHARACTERISTIC,
    "get_stream_time_characteristic": _TIME_CHARACTERISTIC,
    "add_default_kryo_serializer": _KRYO,
    "register_type_with_kryo_serializer": _KRYO,
    "register_type": _KRYO,
    "MemoryStateBackend": _OLD_BACKENDS,
    "FsStateBackend": _OLD_BACKENDS,
    "RocksDBStateBackend": _OLD_BACKENDS,
    "ExternalizedCheckpointCleanup": _CLEANUP,
    "enable_externalized_checkpoints": _CLEANUP,
    "get_externalized_checkpoint_cleanup": _CLEANUP,
    "is_prefer_checkpoint_for_recovery": _PREFER_CHECKPOINT,
    "set_prefer_checkpoint_for_recovery": _PREFER_CHECKPOINT,
}
_LACKS = re.compile(r"Millstream lacks (pyflink\.[\w.]+)")
_JAVA_CODE_ERROR = "JavaCodeNotSupported"  # millstream.JavaCodeNotSupported, by name

_JAVA_NAME = re.compile(r"^_?j_\w+$|^_j\w*$")
_NO_ATTRIBUTE = re.compile(r"has no attribute '(\w+)'")
_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


class JavaObjectNeeded(BaseException):
    """A PyFlink test reached for a Java object (the JVM gateway, a ``_j_*`` handle, py4j).

    Not an ``Exception``, like :class:`MillstreamLacks`: a test's ``assertRaises(Exception)`` or
    ``except Exception`` must not swallow it and pass."""


class MillstreamLacks(BaseException):
    """A PyFlink name that Millstream does not provide was used (imported names resolve to a
    placeholder so one missing name does not hide a whole module's other tests)."""


@dataclass(frozen=True)
class Verdict:
    outcome: str  # PASSED, FAILED, JAVA, REMOVED or TABLE
    reason: str   # one line: why (empty when passed)


def java_reason(exc: BaseException | None) -> str | None:
    """Why ``exc`` (or an exception in its chain) means the test needs a Java object, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, JavaObjectNeeded):
            return str(exc)
        text = str(exc)
        if any(t.__name__ == _JAVA_CODE_ERROR for t in type(exc).__mro__):
            return f"hands Millstream Java code to run ({_JAVA_CODE_ERROR})"
        if isinstance(exc, AttributeError):
            name = getattr(exc, "name", None) or _first(_NO_ATTRIBUTE, text)
            if name and _JAVA_NAME.match(name):
                return f"uses PyFlink's Java handle {name!r}"
        if isinstance(exc, TypeError):
            name = _first(_KEYWORD, text)
            if name and _JAVA_NAME.match(name):
                return f"passes a Java object as {name}="
        exc = exc.__cause__ or exc.__context__
    return None


def removed_reason(exc: BaseException | None) -> str | None:
    """Why ``exc`` (or an exception in its chain) means the test uses an API PyFlink 2.x removed."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names: list[str] = []
        if isinstance(exc, AttributeError):
            names = [getattr(exc, "name", None) or _first(_NO_ATTRIBUTE, str(exc)) or ""]
        elif isinstance(exc, MillstreamLacks):  # pyflink.datastream.MemoryStateBackend, or a name under it
            names = (_first(_LACKS, str(exc)) or "").split(".")
        for name in names:
            if name in REMOVED_IN_PYFLINK_2:
                return f"{name}: {REMOVED_IN_PYFLINK_2[name]}"
        exc = exc.__cause__ or exc.__context__
    return None


def table_reason(exc: BaseException | None) -> str | None:
    """Why ``exc`` (or an exception in its chain) means the test needs PyFlink's Table API."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = _first(_LACKS, str(exc)) if isinstance(exc, MillstreamLacks) else None
        if name and (name == "pyflink.table" or name.startswith("pyflink.table.")):
            return f"uses the Table API ({name})"
        exc = exc.__cause__ or exc.__context__
    return None


def verdict(exc: BaseException | None) -> Verdict:
    """The outcome of a test that raised ``exc`` (None: it passed)."""
    if exc is None:
        return Verdict(PASSED, "")
    why = java_reason(exc)
    if why is not None:
        return Verdict(JAVA, why)
    why = removed_reason(exc)
    if why is not None:
        return Verdict(REMOVED, why)
    why = table_reason(exc)
    if why is not None:
        return Verdict(TABLE, why)
    return Verdict(FAILED, one_line(exc))


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 200 characters: a longer one keeps its head and
    its tail, where a failed job's message names the root cause."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= 200 else line[:80] + " ... " + line[-115:]


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    m = pattern.search(text)
    return m.group(1) if m else None


def summarize(results: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
    """Per test module (the file part of a pytest node id): counts of each outcome."""
    table: dict[str, dict[str, int]] = {}
    for nodeid, result in results.items():
        module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        row = table.setdefault(module, {k: 0 for k in _COLUMNS})
        row[result["outcome"]] += 1
    return table


_COLUMNS = (PASSED, FAILED, JAVA, REMOVED, TABLE, SKIPPED)


def format_table(table: dict[str, dict[str, int]]) -> str:
    """The summary the runner prints: one line per module and a total."""
    def line(name: str, row: dict[str, int]) -> str:
        return f"{name:<40}" + "".join(f"{row.get(k, 0):>8}" for k in _COLUMNS) + f"{sum(row.values()):>8}"

    total = {k: sum(row.get(k, 0) for row in table.values()) for k in _COLUMNS}
    header = f"{'module':<40}" + "".join(f"{k:>8}" for k in _COLUMNS) + f"{'total':>8}"
    return "\n".join([header, *(line(m, table[m]) for m in sorted(table)), line("total", total)])
