"""Checks an engine's Nexmark result rows against the plain-Python answer (``reference.answer``).

``check(query, expected, rows, closed_before=None)`` raises ``AssertionError`` naming the first
difference, and returns how many result rows the answer holds (for the report; q12: how many bids the emitted
windows counted). ``closed_before``
is for an engine that, like Spark Structured Streaming in append mode, emits a window only once
its watermark has passed the window's end, so the windows still open at the end of the input never
come: then only the windows ending at or before it are required, and everything emitted must still
be right.
"""
from __future__ import annotations

import collections
import math
from typing import Any

from .reference import Q5_SIZE_MS, Q12_WINDOW_MS, WINDOW_MS


def _same_rows(query: str, expected: list, got: list) -> None:
    if got == expected:
        return
    want, have = collections.Counter(expected), collections.Counter(got)
    missing, extra = want - have, have - want
    raise AssertionError(f"{query}: {len(got):,} rows, expected {len(expected):,}: {sum(missing.values())} missing "
                         f"(e.g. {list(missing)[:2]}), {sum(extra.values())} unexpected (e.g. {list(extra)[:2]})")


def _no_duplicates(query: str, keys: list) -> None:
    repeated = [k for k, n in collections.Counter(keys).items() if n > 1]
    if repeated:
        raise AssertionError(f"{query}: {len(repeated)} results emitted more than once (e.g. {repeated[:2]})")


def check(query: str, expected: Any, rows: list[tuple], closed_before: int | None = None) -> int:
    def required(end: int) -> bool:
        return closed_before is None or end <= closed_before

    if query in ("q0", "q1", "q2", "q3"):
        _same_rows(query, expected, sorted(rows))
        return len(expected)
    if query == "q4":
        final = {}
        for category, average in rows:  # updates in order per category: the last one is the answer
            final[category] = average
        if final.keys() != expected.keys():
            raise AssertionError(f"q4: categories {sorted(final)}, expected {sorted(expected)}")
        for category, (total, count) in expected.items():
            if not math.isclose(final[category], total / count, rel_tol=1e-12):
                raise AssertionError(f"q4: category {category} averages {final[category]}, expected {total / count}")
        return len(expected)
    if query == "q5":
        _no_duplicates(query, [(s, a) for s, a, _ in rows])
        got: dict[int, tuple[int, list[int]]] = {}
        for start, auction, count in rows:
            got.setdefault(start, (count, []))[1].append(auction)
            if got[start][0] != count:
                raise AssertionError(f"q5: window {start} has hot auctions with {got[start][0]} and {count} bids")
        want = {s: v for s, v in expected.items() if required(s + Q5_SIZE_MS)}
        for start, (count, auctions) in got.items():
            if expected.get(start) != (count, sorted(auctions)):
                raise AssertionError(f"q5: window {start}: {count} bids by {sorted(auctions)}, expected {expected.get(start)}")
        if want.keys() - got.keys():
            raise AssertionError(f"q5: {len(want.keys() - got.keys())} windows missing (e.g. {sorted(want.keys() - got.keys())[:3]})")
        return len(expected)
    if query == "q7":
        got7: dict[int, list[tuple]] = {}
        for start, auction, price, bidder, t, extra in rows:
            got7.setdefault(start, []).append((auction, price, bidder, t, extra))
        for start, top in got7.items():
            price, bids = expected.get(start, (None, []))
            if any(b not in bids for b in top) or len(set(top)) != len(top):
                raise AssertionError(f"q7: window {start}: {top[:2]} are not its highest bids (price {price}, {bids[:2]})")
        missing = [s for s in expected if required(s + WINDOW_MS) and s not in got7]
        if missing:
            raise AssertionError(f"q7: {len(missing)} windows missing (e.g. {missing[:3]})")
        return len(expected)
    if query == "q8":
        _no_duplicates(query, rows)
        if closed_before is None:
            _same_rows(query, expected, sorted(rows))
        else:
            want = [r for r in expected if required(r[2] + WINDOW_MS)]
            extra = set(rows) - set(expected)
            if extra or set(want) - set(rows):
                raise AssertionError(f"q8: {len(extra)} unexpected rows, {len(set(want) - set(rows))} missing")
        return len(expected)
    if query == "q11":
        got11 = {}
        for bidder, count, start, end in rows:
            if (bidder, start, end) in got11:
                raise AssertionError(f"q11: session {(bidder, start, end)} emitted twice")
            got11[(bidder, start, end)] = count
        wrong = {k: v for k, v in got11.items() if expected.get(k) != v}
        missing = [k for k in expected if required(k[2]) and k not in got11]
        if wrong or missing:
            raise AssertionError(f"q11: {len(wrong)} sessions not in the answer (e.g. {list(wrong.items())[:2]}), "
                                 f"{len(missing)} missing (e.g. {missing[:2]})")
        return len(expected)
    if query == "q12":
        totals: collections.Counter = collections.Counter()
        seen = set()
        for bidder, count, start, end in rows:
            if (bidder, start) in seen:
                raise AssertionError(f"q12: window ({bidder}, {start}) emitted twice")
            seen.add((bidder, start))
            if count < 1 or end - start != Q12_WINDOW_MS:
                raise AssertionError(f"q12: window ({bidder}, {start}, {end}) with {count} bids")
            totals[bidder] += count
        over = {b: n for b, n in totals.items() if n > expected.get(b, 0)}
        if over:
            raise AssertionError(f"q12: bidders counted more bids than they placed (e.g. {list(over.items())[:2]})")
        return sum(totals.values())
    raise ValueError(f"unknown Nexmark query {query!r}")
