"""Sorting a PyFlink test's outcome: passed, failed, or needs a Java object.

Pure logic (no pytest, no Millstream imports), so it is unit-tested on its own. A test needs a
Java object when what stopped it is PyFlink's Java side, not Millstream's behaviour:
- the harness's own :class:`JavaObjectNeeded`, raised by the stand-ins for ``get_gateway()``,
  ``pyflink.util.java_utils`` and an environment's ``_j_stream_execution_environment``, and by an
  import of ``py4j`` (the Java gateway library) from a test module;
- an attribute or keyword named like PyFlink's Java handles (``_j_*``, ``j_*``), which exist only
  on PyFlink's Java-backed objects (``ds._j_data_stream``, ``Configuration(j_configuration=...)``).
The exception's chain (``__cause__``/``__context__``) is searched too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PASSED, FAILED, JAVA, SKIPPED = "passed", "failed", "java", "skipped"  # SKIPPED: by PyFlink's own marks

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
    outcome: str  # PASSED, FAILED or JAVA
    reason: str   # one line: why (empty when passed)


def java_reason(exc: BaseException | None) -> str | None:
    """Why ``exc`` (or an exception in its chain) means the test needs a Java object, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, JavaObjectNeeded):
            return str(exc)
        text = str(exc)
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


def verdict(exc: BaseException | None) -> Verdict:
    """The outcome of a test that raised ``exc`` (None: it passed)."""
    if exc is None:
        return Verdict(PASSED, "")
    why = java_reason(exc)
    if why is not None:
        return Verdict(JAVA, why)
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


_COLUMNS = (PASSED, FAILED, JAVA, SKIPPED)


def format_table(table: dict[str, dict[str, int]]) -> str:
    """The summary the runner prints: one line per module and a total."""
    def line(name: str, row: dict[str, int]) -> str:
        return f"{name:<40}" + "".join(f"{row.get(k, 0):>8}" for k in _COLUMNS) + f"{sum(row.values()):>8}"

    total = {k: sum(row.get(k, 0) for row in table.values()) for k in _COLUMNS}
    header = f"{'module':<40}" + "".join(f"{k:>8}" for k in _COLUMNS) + f"{'total':>8}"
    return "\n".join([header, *(line(m, table[m]) for m in sorted(table)), line("total", total)])
