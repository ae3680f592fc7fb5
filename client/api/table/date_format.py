"""Flink's DATE_FORMAT: a timestamp as text by a Java ``SimpleDateFormat`` pattern.

A pattern is read as SimpleDateFormat reads it: a run of one pattern letter is one field, its
length saying how (``yyyy`` 2024, ``yy`` 24, ``MM`` 03, ``MMM`` Mar, ``MMMM`` March, ``SSS``
milliseconds, ``EEE`` Mon); text in single quotes is literal (``''`` is a quote); any other
non-letter is itself. A letter Millstream does not format is refused by name when the pattern is
literal in the query, else when the row is formatted. Timestamps are in UTC (the session time zone).
"""
from __future__ import annotations

import datetime
import functools
from typing import Any, Callable

__all__ = ["date_format", "compile_pattern"]

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

_Part = Callable[[datetime.datetime], str]


def _literal(text: str) -> _Part:
    return lambda ts: text


def _number(get: Callable[[datetime.datetime], int], width: int) -> _Part:
    return lambda ts: str(get(ts)).zfill(width)


def _field(letter: str, n: int) -> _Part:
    """The formatter of ``n`` repetitions of pattern letter ``letter``."""
    if letter == "y":
        return (lambda ts: str(ts.year % 100).zfill(2)) if n == 2 else _number(lambda ts: ts.year, n)
    if letter == "M":
        if n >= 4:
            return lambda ts: _MONTHS[ts.month - 1]
        if n == 3:
            return lambda ts: _MONTHS[ts.month - 1][:3]
        return _number(lambda ts: ts.month, n)
    if letter == "E":
        return (lambda ts: _DAYS[ts.weekday()]) if n >= 4 else (lambda ts: _DAYS[ts.weekday()][:3])
    numbers: dict[str, Callable[[datetime.datetime], int]] = {
        "d": lambda ts: ts.day, "H": lambda ts: ts.hour, "m": lambda ts: ts.minute, "s": lambda ts: ts.second,
        "S": lambda ts: ts.microsecond // 1000, "D": lambda ts: ts.timetuple().tm_yday,
        "h": lambda ts: ts.hour % 12 or 12, "k": lambda ts: ts.hour or 24, "K": lambda ts: ts.hour % 12,
        "u": lambda ts: ts.isoweekday(),
    }
    if letter in numbers:
        return _number(numbers[letter], n)
    if letter == "a":
        return lambda ts: "AM" if ts.hour < 12 else "PM"
    raise ValueError(f"DATE_FORMAT: the pattern letter '{letter}' is not supported (Millstream formats "
                     "y M d H h k K m s S D E u a and quoted text)")


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> tuple[_Part, ...]:
    """The formatters of a SimpleDateFormat pattern, in order; ValueError naming a bad letter or an
    unclosed quote."""
    parts: list[_Part] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            if pattern.startswith("''", i):
                parts.append(lambda ts: "'")
                i += 2
                continue
            text, j = "", i + 1
            while True:
                if j >= len(pattern):
                    raise ValueError(f"DATE_FORMAT: unterminated quote in the pattern {pattern!r}")
                if pattern.startswith("''", j):  # '' inside quotes is a quote
                    text, j = text + "'", j + 2
                elif pattern[j] == "'":
                    break
                else:
                    text, j = text + pattern[j], j + 1
            parts.append(_literal(text))
            i = j + 1
        elif c.isascii() and c.isalpha():
            n = 1
            while i + n < len(pattern) and pattern[i + n] == c:
                n += 1
            parts.append(_field(c, n))
            i += n
        else:
            parts.append(_literal(c))
            i += 1
    return tuple(parts)


def date_format(value: Any, pattern: str) -> str:
    """``value`` (a TIMESTAMP, or its SQL text ``yyyy-MM-dd HH:mm:ss[.fff]``) formatted by ``pattern``."""
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value.strip().replace("T", " "))
    elif isinstance(value, datetime.datetime) and value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    elif isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        value = datetime.datetime(value.year, value.month, value.day)
    return "".join(part(value) for part in compile_pattern(pattern))
