"""The Nexmark queries in plain Python over the generated lines: the answers the engines must give.

Each query is Nexmark's (the SQL of github.com/nexmark/nexmark, ``queries/qN.sql``), computed here
in one pass over the whole input with dicts, no streaming: what a query means, not how an engine
runs it. ``answer(query, lines)`` returns a canonical value that ``check`` compares with an
engine's (normalized) output:

- q0 pass-through: the bids ``(auction, bidder, price, date_time, extra)``, as a sorted list;
- q1 currency: the same with the price in euro thousandths (``price * 908``: ``0.908 * price`` as
  DECIMAL(23, 3), exact);
- q2 selection: ``(auction, price)`` of the bids with ``auction % 123 == 0``;
- q3 local item suggestion: ``(name, city, state, auction id)`` for every auction of category 10
  whose seller is a person in OR, ID or CA;
- q4 average price per category: per auction the highest bid placed between its opening and its
  expiry (both included), averaged per category: ``{category: (sum, count)}``;
- q5 hot items: per 10 s window sliding by 2 s, the auctions with the most bids:
  ``{window start: (count, sorted auctions)}``;
- q7 highest bid: per 10 s tumbling window the highest price and the bids that offered it:
  ``{window start: (price, sorted bids)}``;
- q8 monitor new users: ``(person id, name, window start)`` for every person who opened an auction
  in the 10 s tumbling window in which they registered;
- q11 user sessions: per bidder, sessions of bids at most 10 s apart:
  ``{(bidder, start, end): count}``, end = the last bid's time + 10 s;
- q12 processing-time windows (1 s, see ``Q12_WINDOW_MS``): per bidder the number of bids.
  Which window a bid falls into depends on the clock, and the windows open at the end of the input
  never fire, so only this much is checked: no bidder is counted more bids than they placed, and
  every window is well-formed: ``{bidder: count}``.
"""
from __future__ import annotations

import collections
from typing import Iterable

QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11", "q12")
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
Q5_SIZE_MS, Q5_SLIDE_MS = 10_000, 2_000
WINDOW_MS = 10_000  # q7 and q8's tumbling windows, q11's session gap
# q12's processing-time windows: 1 s, not Nexmark's 10 s. A bounded input is read in seconds, and a
# processing-time window still open when the input ends never fires (Flink drops pending
# processing-time timers at the end of input; Spark never closes it): 10 s windows would emit nothing.
Q12_WINDOW_MS = 1_000


def parse_person(line: str) -> tuple:
    """(id, name, email, credit_card, city, state, date_time, extra)"""
    f = line.rstrip("\n").split(",")
    return int(f[2]), f[3], f[4], f[5], f[6], f[7], int(f[1]), f[8]


def parse_auction(line: str) -> tuple:
    """(id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra)"""
    f = line.rstrip("\n").split(",")
    return int(f[9]), f[10], f[11], int(f[12]), int(f[13]), int(f[1]), int(f[14]), int(f[15]), int(f[16]), f[17]


def parse_bid(line: str) -> tuple:
    """(auction, bidder, price, channel, url, date_time, extra)"""
    f = line.rstrip("\n").split(",")
    return int(f[18]), int(f[19]), int(f[20]), f[21], f[22], int(f[1]), f[23]


def read_lines(lines: Iterable[str]) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(persons, auctions, bids) in stream order."""
    persons, auctions, bids = [], [], []
    for line in lines:
        kind = line[0]
        if kind == "2":
            bids.append(parse_bid(line))
        elif kind == "1":
            auctions.append(parse_auction(line))
        else:
            persons.append(parse_person(line))
    return persons, auctions, bids


def read(paths: Iterable[str]) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(persons, auctions, bids) of the files, in stream order."""
    def lines() -> Iterable[str]:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                yield from f

    return read_lines(lines())


def sliding_starts(ts: int, size: int, slide: int) -> range:
    """The starts of the sliding windows holding ``ts`` (Flink's and Spark's: aligned to the epoch)."""
    last = ts - ts % slide
    return range(last, ts - size, -slide)


def answer(query: str, events: tuple[list[tuple], list[tuple], list[tuple]]):
    persons, auctions, bids = events
    if query == "q0":
        return sorted((a, b, p, t, x) for a, b, p, _, _, t, x in bids)
    if query == "q1":
        return sorted((a, b, p * 908, t, x) for a, b, p, _, _, t, x in bids)
    if query == "q2":
        return sorted((a, p) for a, _, p, _, _, _, _ in bids if a % 123 == 0)
    if query == "q3":
        people = {p[0]: p for p in persons if p[5] in Q3_STATES}
        return sorted((people[a[7]][1], people[a[7]][4], people[a[7]][5], a[0])
                      for a in auctions if a[8] == Q3_CATEGORY and a[7] in people)
    if query == "q4":
        opened = {a[0]: a for a in auctions}
        final: dict[int, int] = {}
        for auction, _, price, _, _, t, _ in bids:
            a = opened.get(auction)
            if a is not None and a[5] <= t <= a[6] and price > final.get(auction, -1):
                final[auction] = price
        per_category: dict[int, list[int]] = {}
        for auction, price in final.items():
            s = per_category.setdefault(opened[auction][8], [0, 0])
            s[0] += price
            s[1] += 1
        return {c: (s, n) for c, (s, n) in per_category.items()}
    if query == "q5":
        counts: collections.Counter = collections.Counter()
        for auction, _, _, _, _, t, _ in bids:
            for start in sliding_starts(t, Q5_SIZE_MS, Q5_SLIDE_MS):
                counts[(start, auction)] += 1
        best: dict[int, tuple[int, list[int]]] = {}
        for (start, auction), n in counts.items():
            top = best.get(start)
            if top is None or n > top[0]:
                best[start] = (n, [auction])
            elif n == top[0]:
                top[1].append(auction)
        return {s: (n, sorted(a)) for s, (n, a) in best.items()}
    if query == "q7":
        top7: dict[int, tuple[int, list[tuple]]] = {}
        for auction, bidder, price, _, _, t, extra in bids:
            start = t - t % WINDOW_MS
            cur = top7.get(start)
            if cur is None or price > cur[0]:
                top7[start] = (price, [(auction, price, bidder, t, extra)])
            elif price == cur[0]:
                cur[1].append((auction, price, bidder, t, extra))
        return {s: (p, sorted(b)) for s, (p, b) in top7.items()}
    if query == "q8":
        sellers = {(a[7], a[5] - a[5] % WINDOW_MS) for a in auctions}
        return sorted({(p[0], p[1], p[6] - p[6] % WINDOW_MS) for p in persons if (p[0], p[6] - p[6] % WINDOW_MS) in sellers})
    if query == "q11":
        times: dict[int, list[int]] = {}
        for _, bidder, _, _, _, t, _ in bids:
            times.setdefault(bidder, []).append(t)
        sessions: dict[tuple[int, int, int], int] = {}
        for bidder, ts in times.items():
            ts.sort()
            start, last, n = ts[0], ts[0], 0
            for t in ts:
                if t > last + WINDOW_MS:  # [t, t + gap) does not even touch the session so far (Flink merges windows that touch): a new one
                    sessions[(bidder, start, last + WINDOW_MS)] = n
                    start, n = t, 0
                last, n = t, n + 1
            sessions[(bidder, start, last + WINDOW_MS)] = n
        return sessions
    if query == "q12":
        return dict(collections.Counter(b[1] for b in bids))
    raise ValueError(f"unknown Nexmark query {query!r} (known: {', '.join(QUERIES)})")
