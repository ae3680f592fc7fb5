"""The KafkaSource's split enumerator (jobmanager/jobmaster/source_coordinator), pure: Flink's
KafkaSourceEnumerator and SplitAssignmentTracker rules, with discovery answers as the test's input.

Topic "hello"'s owners (Flink's getSplitOwner, see test_kafka_source): at parallelism 2 partitions
0..4 go to 0,1,0,1,0; at 3 to 2,0,1,2,0; at 3 partition 5 goes to 1."""
from __future__ import annotations

import pytest

from millstream.jobmanager.jobmaster.source_coordinator import Discover, KafkaSplitEnumerator, SendEvent
from millstream.runtime.operator_factories import KafkaOffsetsSpec, KafkaSourceFactory
from millstream.runtime.operators.kafka_splits import coordinator_settings, factory_from_settings, subscribed_partitions
from millstream.runtime.operators.source_events import (
    AddSplits, KafkaSplit, NoMoreSplits, ReaderRegistration, decode, encode)

A, B, C = b"attempt-a", b"attempt-b", b"attempt-c"


def split(p: int, start: int = 0, stop: int | None = None) -> KafkaSplit:
    return KafkaSplit("hello", p, start, stop)


def added(commands: list) -> dict[int, list[int]]:
    """Per subtask, the partitions the commands assign (in order)."""
    out: dict[int, list[int]] = {}
    for c in commands:
        if isinstance(c, SendEvent) and isinstance(c.event, AddSplits):
            out.setdefault(c.subtask, []).extend(s.partition for s in c.event.splits)
    return out


def no_more(commands: list) -> list[int]:
    return [c.subtask for c in commands if isinstance(c, SendEvent) and isinstance(c.event, NoMoreSplits)]


def started(parallelism: int = 2, bounded: bool = False, periodic: bool = True) -> KafkaSplitEnumerator:
    e = KafkaSplitEnumerator(parallelism, bounded, periodic)
    assert e.start() == [Discover(frozenset(), initial=True)]
    return e


def test_splits_go_to_their_owner_once_it_registers() -> None:
    e = started()
    assert e.discovered([split(p, start=10 + p) for p in range(5)]) == []  # no reader yet
    out = e.reader_registered(1, B, 0)
    assert added(out) == {1: [1, 3]}
    assert [s.start for c in out for s in c.event.splits] == [11, 13]  # the resolved offsets travel
    assert out[0].attempt_id == B
    assert added(e.reader_registered(0, A, 0)) == {0: [0, 2, 4]}
    assert e.unassigned == {} and sorted(p for _, p in e.assigned) == [0, 1, 2, 3, 4]


def test_a_later_discovery_asks_for_the_partitions_it_does_not_know_and_assigns_the_new_one() -> None:
    e = started(parallelism=3)
    e.discovered([split(p) for p in range(5)])
    e.reader_registered(0, A, 0), e.reader_registered(1, B, 0), e.reader_registered(2, C, 0)
    [ask] = e.discover()
    assert ask == Discover(frozenset(("hello", p) for p in range(5)), initial=False)
    assert e.discover() == []  # one at a time
    out = e.discovered([split(5)])
    assert added(out) == {1: [5]}
    assert added(e.discovered([split(5)])) == {}  # found again: not assigned twice


def test_a_bounded_source_signals_no_more_splits_after_its_one_discovery() -> None:
    e = started(bounded=True, periodic=False)
    assert added(e.reader_registered(0, A, 0)) == {} and no_more(e.reader_registered(0, A, 0)) == []
    out = e.discovered([split(0, 0, 5), split(1, 0, 5)])
    assert added(out) == {0: [0]} and no_more(out) == [0]  # the registered reader: its split, then the end
    out = e.reader_registered(1, B, 0)
    assert added(out) == {1: [1]} and no_more(out) == [1]
    assert e.discover() == []  # no second discovery


def test_an_unbounded_source_never_signals_no_more_splits() -> None:
    e = started(bounded=False, periodic=False)  # set_unbounded with discovery off (CONTINUOUS_UNBOUNDED)
    out = e.discovered([split(0, 0, 5)]) + e.reader_registered(0, A, 0)
    assert added(out) == {0: [0]} and no_more(out) == []


def test_a_reader_restarting_from_a_checkpoint_gets_back_what_was_assigned_to_it_after_it() -> None:
    e = started()
    e.reader_registered(0, A, 0), e.reader_registered(1, B, 0)
    e.discovered([split(p) for p in range(2)])  # before checkpoint 1: in the readers' snapshots of 1
    e.snapshot(1)
    e.checkpoint_complete(1)
    e.discovered([split(2), split(3)])  # after checkpoint 1: 2 to subtask 0, 3 to subtask 1
    e.snapshot(2)  # checkpoint 2 never completes
    e.discovered([split(4)])  # after checkpoint 2: to subtask 0
    e.reader_lost(0, A)
    # Subtask 0 fails and restores checkpoint 1: partitions 2 (in checkpoint 2's assignments)
    # and 4 (since the last snapshot) come back to its new attempt; 0 is in its restored state.
    out = e.reader_registered(0, C, 1)
    assert added(out) == {0: [2, 4]} and out[0].attempt_id == C
    # Subtask 1 restores checkpoint 1 as well: partition 3 comes back, 1 does not.
    assert added(e.reader_registered(1, B, 1)) == {1: [3]}


def test_a_lost_reader_gets_nothing_until_it_registers_again() -> None:
    e = started()
    e.reader_registered(0, A, 0)
    e.reader_lost(0, b"another attempt")  # a stale report changes nothing
    assert 0 in e.readers
    e.reader_lost(0, A)
    assert added(e.discovered([split(0)])) == {}
    assert added(e.reader_registered(0, C, 0)) == {0: [0]}


def test_a_restart_without_any_checkpoint_gives_everything_back() -> None:
    e = started()
    e.reader_registered(0, A, 0)
    e.discovered([split(0, start=7)])
    e.reader_lost(0, A)
    out = e.reader_registered(0, C, 0)
    assert added(out) == {0: [0]} and out[0].event.splits[0].start == 7  # at its starting offset again


def test_the_snapshot_restores_assigned_and_unassigned_splits_and_the_first_discovery() -> None:
    e = started()
    e.reader_registered(0, A, 0)
    e.discovered([split(0, 3), split(1, 4, 9)])  # 1's reader has not registered
    state = e.snapshot(5)
    again = KafkaSplitEnumerator(2, False, True)
    again.restore(state)
    assert again.assigned == e.assigned and again.unassigned == e.unassigned
    assert again.start() == [Discover(frozenset({("hello", 0), ("hello", 1)}), initial=False)]
    out = again.reader_registered(1, B, 5)
    assert added(out) == {1: [1]} and out[0].event.splits == (split(1, 4, 9),)
    assert added(again.reader_registered(0, A, 5)) == {}  # partition 0 is in its reader's state


def test_a_rescaled_restore_assigns_the_unassigned_splits_by_the_new_parallelism() -> None:
    e = started(parallelism=2)
    e.discovered([split(p) for p in range(5)])  # no reader registered: all unassigned
    rescaled = KafkaSplitEnumerator(3, False, True)
    rescaled.restore(e.snapshot(1))
    got: dict[int, list[int]] = {}
    for subtask, attempt in ((0, A), (1, B), (2, C)):
        got.update(added(rescaled.reader_registered(subtask, attempt, 1)))
    assert got == {0: [1, 4], 1: [2], 2: [0, 3]}


def test_a_rescale_resets_the_enumerator_to_the_checkpoint_at_the_new_parallelism() -> None:
    """Under the adaptive scheduler the running job's enumerator is reset (Flink's
    resetToCheckpoint): the readers of the new parallelism register, the checkpoint's unassigned
    splits go to their owners at it, and a split assigned after the checkpoint is found again."""
    e = started(parallelism=2)
    e.discovered([split(p) for p in range(3)])  # no reader yet: unassigned
    state = e.snapshot(1)
    for subtask, attempt in ((0, A), (1, B)):
        e.reader_registered(subtask, attempt, 0)
    e.discover()
    assert added(e.discovered([split(3)])) == {1: [3]}  # after checkpoint 1
    e.reset_to_checkpoint(3, state)
    assert e.start() == [Discover(frozenset(split(p).tp for p in range(3)), initial=False)]
    got: dict[int, list[int]] = {}
    for subtask, attempt in ((0, A), (1, B), (2, C)):  # subtask 2: beyond the old parallelism
        got.update(added(e.reader_registered(subtask, attempt, 1)))
    assert got == {0: [1], 1: [2], 2: [0]}  # owners at 3
    assert added(e.discovered([split(3)])) == {2: [3]}


def test_a_rescale_without_a_checkpoint_starts_the_enumerator_afresh() -> None:
    e = started(parallelism=1)
    e.reader_registered(0, A, 0)
    e.discovered([split(p) for p in range(2)])
    e.reset_to_checkpoint(2, None)
    assert e.start() == [Discover(frozenset(), initial=True)]
    assert added(e.discovered([split(p) for p in range(2)]) + e.reader_registered(1, B, 0)) == {1: [1]}
    with pytest.raises(ValueError, match="at least 1, got 0"):
        e.reset_to_checkpoint(0, None)


def test_a_restored_state_of_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="enumerator state"):
        KafkaSplitEnumerator(1, False, True).restore({"version": 99})
    with pytest.raises(ValueError, match="parallelism 2"):
        started().reader_registered(2, A, 0)


def test_source_events_round_trip_and_bad_ones_are_named() -> None:
    for event in (ReaderRegistration(3, 17), AddSplits((split(1, 2, None), split(2, 0, 9))), NoMoreSplits()):
        assert decode(encode(event)) == event
    with pytest.raises(ValueError, match="malformed source event"):
        decode(b"{not json")
    with pytest.raises(ValueError, match="unknown source event type 'x'"):
        decode(b'{"type": "x"}')


def test_the_coordinator_settings_carry_the_source_but_its_deserializer() -> None:
    f = KafkaSourceFactory(properties={"bootstrap.servers": "h:1", "group.id": "g"}, topics=("a", "b"),
                           starting=KafkaOffsetsSpec("specific", "latest", None, (("a", 0, 5),)),
                           stopping=KafkaOffsetsSpec("timestamp", "earliest", 123), deserializer=object(),
                           bounded_mode=True)
    back = factory_from_settings(coordinator_settings(f))
    assert back.deserializer is None
    assert (back.properties, back.topics, back.starting, back.stopping, back.bounded_mode) == (
        f.properties, f.topics, f.starting, f.stopping, True)


def test_subscribed_partitions_by_topics_pattern_and_partitions() -> None:
    broker = {"a": [0, 1], "ab": [0], "b": [0, 1, 2], "broken": None}
    assert subscribed_partitions(KafkaSourceFactory(topics=("a",)), broker, "h:1") == {("a", 0), ("a", 1)}
    assert subscribed_partitions(KafkaSourceFactory(topic_pattern="a.*"), broker, "h:1") == {
        ("a", 0), ("a", 1), ("ab", 0)}  # whole names: "b" does not match, "broken" is in error
    assert subscribed_partitions(KafkaSourceFactory(partitions=(("b", 2),)), broker, "h:1") == {("b", 2)}
    with pytest.raises(ValueError, match="Kafka topic 'zz' does not exist on h:1"):
        subscribed_partitions(KafkaSourceFactory(topics=("zz",)), broker, "h:1")
    with pytest.raises(ValueError, match="Kafka partition 'b-7' does not exist on h:1"):
        subscribed_partitions(KafkaSourceFactory(partitions=(("b", 7),)), broker, "h:1")
