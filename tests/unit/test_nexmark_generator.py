"""bench/nexmark: the Nexmark generator's rules (deterministic from a seed, the 1:3:46 proportions,
dense monotone ids, bounded out-of-orderness), its files, and that the plain-Python answers and
the result check reject wrong answers."""
from __future__ import annotations

import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from nexmark import check, generator, reference  # noqa: E402
from nexmark.generator import BASE_TIME, Config, Generator  # noqa: E402

GROUP = 100
CONFIG = Config(out_of_order_group_size=GROUP)
EVENTS = 5_000  # a multiple of both 50 (one person, three auctions, 46 bids) and the group


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return Generator(CONFIG, seed=7).lines(EVENTS)


def test_the_same_seed_gives_the_same_events_and_another_seed_others(lines) -> None:
    assert Generator(CONFIG, seed=7).lines(EVENTS) == lines
    other = Generator(CONFIG, seed=8).lines(EVENTS)
    assert other != lines
    # the seed changes the random fields, not the structure: kinds and times are the same
    assert [(l[0], l.split(",")[1]) for l in other] == [(l[0], l.split(",")[1]) for l in lines]


def test_kinds_come_in_nexmarks_proportions(lines) -> None:
    kinds = collections.Counter(line[0] for line in lines)
    assert kinds == {"0": EVENTS // 50, "1": 3 * EVENTS // 50, "2": 46 * EVENTS // 50}


def test_every_line_has_the_table_columns_and_no_stray_commas(lines) -> None:
    assert {len(line.rstrip("\n").split(",")) for line in lines} == {len(generator.COLUMNS)}


def test_person_and_auction_ids_are_dense_and_monotone_in_event_time(lines) -> None:
    persons, auctions, _ = _parsed(lines)
    # several events share a millisecond: ordered by (time, id), the ids are 1000, 1001, ... (an
    # earlier event never has a higher id)
    assert [p[0] for p in sorted(persons, key=lambda p: (p[6], p[0]))] == list(range(1000, 1000 + len(persons)))
    assert [a[0] for a in sorted(auctions, key=lambda a: (a[5], a[0]))] == list(range(1000, 1000 + len(auctions)))
    # in stream order ids only go back within an out-of-order group: every group's ids follow the previous group's
    for kind, index in (("0", 2), ("1", 9)):
        groups = [[int(l.split(",")[index]) for l in lines[g:g + GROUP] if l[0] == kind] for g in range(0, EVENTS, GROUP)]
        groups = [g for g in groups if g]
        assert all(max(a) < min(b) for a, b in zip(groups, groups[1:]))


def test_events_are_out_of_order_by_at_most_the_group(lines) -> None:
    times = [int(line.split(",")[1]) for line in lines]
    assert times[0] == BASE_TIME
    assert sorted(times) == [CONFIG.timestamp(i) for i in range(EVENTS)]  # every event time once, 10,000 a second
    high, behind = times[0], []
    for t in times:
        behind.append(high - t)
        high = max(high, t)
    assert max(behind) == CONFIG.max_disorder_ms() == 9  # 99 events of 100 µs
    assert sum(1 for b in behind if b > 0) > EVENTS // 2  # really out of order, not only now and then


def test_in_order_with_a_group_of_one() -> None:
    times = [int(line.split(",")[1]) for line in Generator(Config(out_of_order_group_size=1), seed=1).lines(1000)]
    assert times == sorted(times)


def test_field_rules(lines) -> None:
    persons, auctions, bids = _parsed(lines)
    assert all(p[5] in generator.US_STATES and p[4] in generator.US_CITIES for p in persons)
    assert all(10 <= a[8] <= 14 and a[4] > a[3] > 0 and a[6] > a[5] for a in auctions)
    assert {a[8] for a in auctions} == {10, 11, 12, 13, 14}
    max_person = 1000 + len(persons) + generator.PERSON_ID_LEAD
    max_auction = 1000 + len(auctions) + generator.AUCTION_ID_LEAD
    assert all(1000 <= a[7] < max_person for a in auctions)
    assert all(1000 <= b[0] < max_auction and 1000 <= b[1] < max_person and 1 <= b[2] <= 100_000_000 for b in bids)
    hot = sum(1 for b in bids if (b[0] - 1000) % 100 == 0) / len(bids)
    assert 0.45 < hot < 0.7  # half the bids go to the hot auction (plus the random ones that hit it)
    channels = collections.Counter(b[3] for b in bids)
    assert 0.4 < sum(channels[c] for c in generator.HOT_CHANNELS) / len(bids) < 0.6
    sizes = [len(l) for l in lines if l[0] == "2"]
    assert 150 < sum(sizes) / len(sizes) < 250


def test_generate_writes_files_cut_at_groups_and_reuses_them(tmp_path) -> None:
    paths = generator.generate(1_050, files=3, seed=3, config=CONFIG, directory=tmp_path / "events")
    assert [os.path.basename(p) for p in paths] == ["part-000.csv", "part-001.csv", "part-002.csv"]
    counts = [sum(1 for _ in open(p)) for p in paths]
    assert counts == [400, 400, 250]  # 11 groups of 100 (the last one short): 4, 4 and the rest
    assert [l for p in paths for l in open(p)] == Generator(CONFIG, seed=3).lines(1_050)
    assert os.path.getmtime(paths[0]) < os.path.getmtime(paths[1]) < os.path.getmtime(paths[2])
    os.utime(paths[0], (1, 1))
    assert generator.generate(1_050, files=3, seed=3, config=CONFIG, directory=tmp_path / "events") == paths
    assert os.path.getmtime(paths[0]) == 1  # not written again
    with pytest.raises(ValueError, match="events and files must be positive"):
        generator.generate(0, directory=tmp_path / "none")
    with pytest.raises(ValueError, match="out_of_order_group_size must be at least 1"):
        Config(out_of_order_group_size=0)


def test_reference_sessions_and_sliding_windows() -> None:
    bid = "2,{t},,,,,,,,,,,,,,,,,1005,{b},{p},Google,u,x\n"
    lines = [bid.format(t=t, b=b, p=p) for t, b, p in
             [(0, 1, 5), (9_999, 1, 7), (19_999, 1, 7), (30_000, 1, 1), (100, 2, 3)]]
    events = reference.read_lines(lines)
    # gaps < 10 s join a session; 30,000 is 10,001 ms after 19,999: a new one; end = last + gap
    assert reference.answer("q11", events) == {(1, 0, 29_999): 3, (1, 30_000, 40_000): 1, (2, 100, 10_100): 1}
    assert list(reference.sliding_starts(9_999, 10_000, 2_000)) == [8_000, 6_000, 4_000, 2_000, 0]
    assert reference.answer("q7", events)[0] == (7, [(1005, 7, 1, 9_999, "x")])


def test_check_rejects_wrong_answers(lines) -> None:
    events = _parsed(lines)
    q2 = reference.answer("q2", events)
    assert check.check("q2", q2, list(reversed(q2))) == len(q2)
    with pytest.raises(AssertionError, match="1 missing"):
        check.check("q2", q2, q2[1:])
    q4 = reference.answer("q4", events)
    rows = [(c, s / n) for c, (s, n) in q4.items()]
    assert check.check("q4", q4, [(c, 0.0) for c, _ in rows] + rows) == 5  # the last update counts
    with pytest.raises(AssertionError, match="q4: category"):
        check.check("q4", q4, rows + [(rows[0][0], rows[0][1] + 1)])
    q7 = reference.answer("q7", events)
    start, (price, top) = next(iter(q7.items()))
    a, p, b, t, x = top[0]
    assert check.check("q7", q7, [(start, a, p, b, t, x)]) == len(q7)
    with pytest.raises(AssertionError, match="not its highest bids"):
        check.check("q7", q7, [(start, a, p - 1, b, t, x)])
    with pytest.raises(AssertionError, match="windows missing"):
        check.check("q7", q7, [])
    assert check.check("q7", q7, [], closed_before=start + 9_999) == len(q7)  # open windows may be missing
    q12 = reference.answer("q12", events)
    bidder, n = next(iter(q12.items()))
    with pytest.raises(AssertionError, match="more bids than they placed"):
        check.check("q12", q12, [(bidder, n, 0, 1000), (bidder, 1, 1000, 2000)])


def _parsed(lines: list[str]):
    return reference.read_lines(lines)
