"""The Nexmark queries as Millstream DataStream jobs (PyFlink's API), one builder per query.

``build(env, query, paths, disorder_ms)`` returns the query's result stream over the CSV files of
``generator.generate`` (or over a ``kafka_input.Topic`` of the same events, passed as ``paths``); the caller runs it with ``execute_and_collect``. Every job starts the same
way: a FileSource of text lines, a filter on the event kind (the line's first character), a parse
into a tuple (``reference.parse_*``: the same functions the plain-Python answers use), and, for the
event-time queries, timestamps from the event's ``date_time`` with watermarks bounded by the
generator's out-of-orderness. Result rows (what ``check.normalize`` expects):

q0 ``(auction, bidder, price, date_time, extra)``; q1 the same, price in euro thousandths; q2
``(auction, price)``; q3 ``(name, city, state, auction id)``; q4 ``(category, average)``, an
update per closed auction (the last per category is the answer); q5 ``(window start, auction,
count)``; q7 ``(window start, auction, price, bidder, date_time, extra)``; q8 ``(person id, name,
window start)``; q11 and q12 ``(bidder, count, window start, window end)``.

Joins are keyed co-process functions (the DataStream API has no SQL join): q3 an unbounded
incremental join, q4 a join bounded by each auction's lifetime, q8 a window join (a union keyed by
person, one tumbling window). Functions here travel to the workers by value (cloudpickle), since
the workers cannot import this directory.
"""
from __future__ import annotations

import sys
from typing import Any

import cloudpickle

from millstream.common import Duration, Time, WatermarkStrategy
from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream import (AggregateFunction, KeyedCoProcessFunction, KeyedProcessFunction,
                                   ProcessWindowFunction, WindowFunction)
from millstream.datastream.connectors.file_system import FileSource, StreamFormat
from millstream.datastream.state import ListStateDescriptor, ValueStateDescriptor
from millstream.datastream.window import (EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows,
                                          TumblingProcessingTimeWindows)

from . import reference

parse_person, parse_auction, parse_bid = reference.parse_person, reference.parse_auction, reference.parse_bid
Q3_STATES, Q3_CATEGORY = reference.Q3_STATES, reference.Q3_CATEGORY
WINDOW_MS = reference.WINDOW_MS

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(reference)


class _At(TimestampAssigner):
    """Event time from a field of the parsed tuple."""

    def __init__(self, index: int) -> None:
        self.index = index

    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[self.index]


def _lines(env: Any, paths: list[str]) -> Any:
    if hasattr(paths, "lines"):  # a kafka_input.Topic in place of the files (bench.py --input kafka)
        return paths.lines(env)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).process_static_file_set().build()
    return env.from_source(source, WatermarkStrategy.no_watermarks(), "nexmark events")


def _timed(stream: Any, index: int, disorder_ms: int) -> Any:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(disorder_ms)).with_timestamp_assigner(_At(index))
    return stream.assign_timestamps_and_watermarks(strategy)


def bids(env: Any, paths: list[str]) -> Any:
    return _lines(env, paths).filter(lambda line: line[0] == "2").map(parse_bid)


def persons_and_auctions(env: Any, paths: list[str]) -> tuple[Any, Any]:
    lines = _lines(env, paths)
    return (lines.filter(lambda line: line[0] == "0").map(parse_person),
            lines.filter(lambda line: line[0] == "1").map(parse_auction))


# -- q3: persons ⋈ auctions, incremental -----------------------------------------------------------


class IncrementalJoin(KeyedCoProcessFunction):
    """Keyed by person id: input 1 persons (of the three states), input 2 auctions (category 10) by
    seller. Whichever side comes first waits in state; a seller may be a person not yet seen."""

    def open(self, runtime_context) -> None:
        self.person = runtime_context.get_state(ValueStateDescriptor("person", None))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("auctions", None))

    def process_element1(self, person, ctx):
        self.person.update((person[1], person[4], person[5]))
        for auction_id in self.waiting.get():
            yield person[1], person[4], person[5], auction_id
        self.waiting.clear()

    def process_element2(self, auction, ctx):
        person = self.person.value()
        if person is None:
            self.waiting.add(auction[0])
        else:
            yield person[0], person[1], person[2], auction[0]


# -- q4: the winning bid of each auction, averaged per category -------------------------------------


class WinningBid(KeyedCoProcessFunction):
    """Keyed by auction id: input 1 auctions, input 2 bids. The highest bid placed between the
    auction's opening and its expiry (both included); at the expiry (an event-time timer) the
    auction emits ``(category, price)`` if it had one. Bids may come before their auction (ids
    ahead of the latest auction are bid on): they wait in state. Once closed, a marker drops
    later bids, which could not count."""

    def open(self, runtime_context) -> None:
        self.auction = runtime_context.get_state(ValueStateDescriptor("auction", None))
        self.best = runtime_context.get_state(ValueStateDescriptor("best", None))
        self.early = runtime_context.get_list_state(ListStateDescriptor("early", None))
        self.closed = runtime_context.get_state(ValueStateDescriptor("closed", None))

    def process_element1(self, auction, ctx):
        opened, expires, category = auction[5], auction[6], auction[8]
        self.auction.update((opened, expires, category))
        best = -1
        for t, price in self.early.get():
            if opened <= t <= expires and price > best:
                best = price
        self.early.clear()
        if best >= 0:
            self.best.update(best)
        ctx.timer_service().register_event_time_timer(expires)

    def process_element2(self, bid, ctx):
        auction = self.auction.value()
        if auction is None:
            if not self.closed.value():
                self.early.add((bid[5], bid[2]))
            return
        if auction[0] <= bid[5] <= auction[1]:
            best = self.best.value()
            if best is None or bid[2] > best:
                self.best.update(bid[2])

    def on_timer(self, timestamp, ctx):
        auction, best = self.auction.value(), self.best.value()
        self.auction.clear()
        self.best.clear()
        self.closed.update(True)
        if best is not None:
            yield auction[2], best


class RunningAverage(KeyedProcessFunction):
    """Keyed by category: the average of the winning prices so far, an update per closed auction."""

    def open(self, runtime_context) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", None))

    def process_element(self, value, ctx):
        total, count = self.total.value() or (0, 0)
        total, count = total + value[1], count + 1
        self.total.update((total, count))
        yield value[0], total / count


# -- q5: hot items -----------------------------------------------------------------------------------


class Count(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a + acc_b


class WithWindowStart(WindowFunction):
    """(window start, key, count)"""

    def apply(self, key, window, inputs):
        for count in inputs:
            yield window.start, key, count


class HottestPerWindow(KeyedProcessFunction):
    """Keyed by window start: collects the window's counts per auction, and when the watermark has
    passed the window's end (all its counts are in: they carry the window's max timestamp) emits
    the auctions with the most bids."""

    def open(self, runtime_context) -> None:
        self.best = runtime_context.get_state(ValueStateDescriptor("best", None))

    def process_element(self, value, ctx):
        start, auction, count = value
        best = self.best.value()
        if best is None:
            self.best.update((count, [auction]))
            ctx.timer_service().register_event_time_timer(ctx.timestamp())
        elif count > best[0]:
            self.best.update((count, [auction]))
        elif count == best[0]:
            best[1].append(auction)
            self.best.update(best)

    def on_timer(self, timestamp, ctx):
        count, auctions = self.best.value()
        self.best.clear()
        start = ctx.get_current_key()
        for auction in auctions:
            yield start, auction, count


# -- q7: highest bid per window ------------------------------------------------------------------------


class HighestBids(AggregateFunction):
    """(highest price, the bids at that price): pre-aggregated per auction, then merged per window."""

    def create_accumulator(self):
        return (-1, [])

    def add(self, value, accumulator):
        price = value[2]
        if price > accumulator[0]:
            return (price, [value])
        if price == accumulator[0]:
            accumulator[1].append(value)
        return accumulator

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return _merge_highest(acc_a, acc_b)


def _merge_highest(acc_a, acc_b):
    if acc_a[0] != acc_b[0]:
        return acc_a if acc_a[0] > acc_b[0] else acc_b
    return (acc_a[0], acc_a[1] + acc_b[1])


class MergeHighest(AggregateFunction):
    """Merges the per-auction (price, bids) of one window."""

    def create_accumulator(self):
        return (-1, [])

    def add(self, value, accumulator):
        return _merge_highest(accumulator, value)

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return _merge_highest(acc_a, acc_b)


class EmitHighest(ProcessWindowFunction):
    def process(self, key, context, elements):
        for _, top in elements:
            for auction, bidder, price, _, _, t, extra in top:
                yield context.window().start, auction, price, bidder, t, extra


# -- q8: new users, a window join --------------------------------------------------------------------


# -- q11 / q12: counts per bidder and window -----------------------------------------------------------


class WithWindow(WindowFunction):
    """(bidder, count, window start, window end)"""

    def apply(self, key, window, inputs):
        for count in inputs:
            yield key, count, window.start, window.end


def build(env: Any, query: str, paths: list[str], disorder_ms: int) -> Any:
    """The result stream of ``query`` over the files ``paths``."""
    if query == "q0":
        return bids(env, paths).map(lambda b: (b[0], b[1], b[2], b[5], b[6]))
    if query == "q1":
        return bids(env, paths).map(lambda b: (b[0], b[1], b[2] * 908, b[5], b[6]))
    if query == "q2":
        return bids(env, paths).filter(lambda b: b[0] % 123 == 0).map(lambda b: (b[0], b[2]))
    if query == "q3":
        persons, auctions = persons_and_auctions(env, paths)
        persons = persons.filter(lambda p: p[5] in Q3_STATES)
        auctions = auctions.filter(lambda a: a[8] == Q3_CATEGORY)
        return persons.connect(auctions).key_by(lambda p: p[0], lambda a: a[7]).process(IncrementalJoin())
    if query == "q4":
        lines = _lines(env, paths)
        auctions = _timed(lines.filter(lambda line: line[0] == "1").map(parse_auction), 5, disorder_ms)
        bid_stream = _timed(lines.filter(lambda line: line[0] == "2").map(parse_bid), 5, disorder_ms)
        winners = auctions.connect(bid_stream).key_by(lambda a: a[0], lambda b: b[0]).process(WinningBid())
        return winners.key_by(lambda w: w[0]).process(RunningAverage())
    if query == "q5":
        counts = (_timed(bids(env, paths), 5, disorder_ms).key_by(lambda b: b[0])
                  .window(SlidingEventTimeWindows.of(Time.milliseconds(reference.Q5_SIZE_MS), Time.milliseconds(reference.Q5_SLIDE_MS)))
                  .aggregate(Count(), WithWindowStart()))
        return counts.key_by(lambda c: c[0]).process(HottestPerWindow())
    if query == "q7":
        window = TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS))
        per_auction = _timed(bids(env, paths), 5, disorder_ms).key_by(lambda b: b[0]).window(window).aggregate(HighestBids())
        # one record per auction and window: the per-window merge is small, parallelism 1 is enough
        return (per_auction.key_by(lambda top: 0).window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
                .aggregate(MergeHighest(), EmitHighest()))
    if query == "q8":
        persons, auctions = persons_and_auctions(env, paths)
        people = _timed(persons, 6, disorder_ms).map(lambda p: (p[0], "P", p[1]))
        sellers = _timed(auctions, 5, disorder_ms).map(lambda a: (a[7], "A"))
        return (people.union(sellers).key_by(lambda e: e[0])
                .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
                .process(_NewUsersByKey()))
    if query == "q11":
        return (_timed(bids(env, paths), 5, disorder_ms).key_by(lambda b: b[1])
                .window(EventTimeSessionWindows.with_gap(Time.milliseconds(WINDOW_MS)))
                .aggregate(Count(), WithWindow()))
    if query == "q12":
        return (bids(env, paths).key_by(lambda b: b[1])
                .window(TumblingProcessingTimeWindows.of(Time.milliseconds(reference.Q12_WINDOW_MS)))
                .aggregate(Count(), WithWindow()))
    raise ValueError(f"unknown Nexmark query {query!r} (known: {', '.join(reference.QUERIES)})")


class _NewUsersByKey(ProcessWindowFunction):
    """q8's window function over ``(person id, 'P', name)`` / ``(seller, 'A')`` records."""

    def process(self, key, context, elements):
        name, sold = None, False
        for element in elements:
            if element[1] == "P":
                name = element[2]
            else:
                sold = True
        if name is not None and sold:
            yield key, name, context.window().start
