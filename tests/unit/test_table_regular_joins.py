"""Regular (unbounded) INNER / LEFT / RIGHT / FULL joins: the changelog Flink's StreamingJoinOperator
documents (a padded row retracted by its first match and restored when its last match is
retracted; inner joins forward -U/+U), batch mode's final rows, and the folded changelog against a
plain-Python join of the same rows on random inputs with retractions on both sides."""
from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from millstream.common.row import Row, RowKind
from millstream.table.regular_join import RegularJoinCore, RegularJoinFunction

I, D, UB, UA = RowKind.INSERT, RowKind.DELETE, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER


def run(join_type: str, events: list[tuple[str, RowKind, tuple[Any, ...]]], condition: Any = None) -> list[tuple[str, tuple]]:
    core = RegularJoinCore(join_type, condition, 2, 2)
    out = []
    for side, kind, row in events:
        out += [(r.get_row_kind().short_string(), tuple(r)) for r in core.process(row, kind, side == "L")]
    return out


def test_a_right_join_pads_a_right_row_until_its_first_match_in_either_order() -> None:
    # right first: padded, then the left row retracts the padding and joins
    assert run("RIGHT", [("R", I, ("k", "r")), ("L", I, ("k", 1))]) == [
        ("+I", (None, None, "k", "r")), ("-D", (None, None, "k", "r")), ("+I", ("k", 1, "k", "r"))]
    # left first: a left row alone emits nothing in a right join; the right row joins at once
    assert run("RIGHT", [("L", I, ("k", 1)), ("R", I, ("k", "r"))]) == [("+I", ("k", 1, "k", "r"))]


def test_a_full_join_pads_both_sides_and_restores_padding_when_the_last_match_goes() -> None:
    out = run("FULL", [("L", I, ("k", 1)), ("R", I, ("k", "x")), ("R", I, ("k", "y")),
                       ("L", D, ("k", 1)), ("R", D, ("k", "x"))])
    assert out == [
        ("+I", ("k", 1, None, None)),
        ("-D", ("k", 1, None, None)), ("+I", ("k", 1, "k", "x")),  # first match: padding retracted
        ("+I", ("k", 1, "k", "y")),  # a second match: no padding to retract
        # the left row retracted: its joins go (-D), each right row loses its last match: padded (+I)
        ("-D", ("k", 1, "k", "x")), ("+I", (None, None, "k", "x")),
        ("-D", ("k", 1, "k", "y")), ("+I", (None, None, "k", "y")),
        ("-D", (None, None, "k", "x")),  # a right row with no match retracted: its padded row goes
    ]


def test_an_inner_side_retraction_forwards_its_kind_and_an_outer_side_deletes() -> None:
    # LEFT join: the right side is inner, so its -U joins leave as -U; the left side is outer: -D
    out = run("LEFT", [("L", I, ("k", 1)), ("R", I, ("k", "a")), ("R", UB, ("k", "a")), ("R", UA, ("k", "b")),
                       ("L", UB, ("k", 1))])
    assert out == [
        ("+I", ("k", 1, None, None)),
        ("-D", ("k", 1, None, None)), ("+I", ("k", 1, "k", "a")),
        ("-U", ("k", 1, "k", "a")), ("+I", ("k", 1, None, None)),  # the last match went: padded again
        ("-D", ("k", 1, None, None)), ("+I", ("k", 1, "k", "b")),
        ("-D", ("k", 1, "k", "b")),  # the outer side's retraction is a DELETE whatever its kind
    ]


def test_duplicates_each_have_their_padded_row() -> None:
    out = run("RIGHT", [("R", I, ("k", "r")), ("R", I, ("k", "r")), ("L", I, ("k", 1)), ("L", D, ("k", 1))])
    assert Counter(out) == Counter([("+I", (None, None, "k", "r"))] * 2 + [("-D", (None, None, "k", "r"))] * 2
                                   + [("+I", ("k", 1, "k", "r"))] * 2 + [("-D", ("k", 1, "k", "r"))] * 2
                                   + [("+I", (None, None, "k", "r"))] * 2)


def test_a_non_equi_condition_decides_the_association() -> None:
    from millstream.table.expression import resolve
    from millstream.table.expressions import col
    from millstream.table.types import DataTypes
    cols = [("k", DataTypes.STRING()), ("a", DataTypes.INT()), ("k2", DataTypes.STRING()), ("b", DataTypes.INT())]
    cond = resolve(col("a") < col("b"), cols, "join")
    out = run("FULL", [("L", I, ("k", 5)), ("R", I, ("k", 3)), ("R", I, ("k", 9))], cond)
    assert out == [("+I", ("k", 5, None, None)), ("+I", (None, None, "k", 3)),
                   ("-D", ("k", 5, None, None)), ("+I", ("k", 5, "k", 9))]


class _State:
    v: Any = None

    def value(self) -> Any:
        return self.v

    def update(self, v: Any) -> None:
        self.v = v

    def clear(self) -> None:
        self.v = None


class _Ctx:
    def __init__(self) -> None:
        self.timers: list[int] = []

    def timer_service(self) -> "_Ctx":
        return self

    def register_event_time_timer(self, t: int) -> None:
        self.timers.append(t)


def test_batch_mode_emits_the_final_join_once_at_the_end_of_input() -> None:
    def final(events: list[tuple[bool, Row]]) -> Counter:
        f = RegularJoinFunction("FULL", None, 2, 2, batch=True)  # one join key's state
        f.state, ctx = _State(), _Ctx()
        for left, row in events:
            assert list(f.process_element1(row, ctx) if left else f.process_element2(row, ctx)) == []
        assert len(ctx.timers) == 1  # nothing before the end of input, then one timer
        return Counter((r.get_row_kind(), tuple(r)) for r in f.on_timer(ctx.timers[0], ctx))

    assert final([(True, Row("k", 1)), (False, Row("k", "x")), (True, Row("k", 2))]) == \
        Counter([(I, ("k", 1, "k", "x")), (I, ("k", 2, "k", "x"))])  # no padded row came and went
    assert final([(False, Row("z", "lonely"))]) == Counter([(I, (None, None, "z", "lonely"))])


def expected_join(join_type: str, left: Counter, right: Counter) -> Counter:
    """The join of two multisets of (key, value) rows, as a textbook computes it."""
    out: Counter = Counter()
    for l, n in left.items():
        matches = [(r, m) for r, m in right.items() if r[0] == l[0]]
        if not matches and join_type in ("LEFT", "FULL"):
            out[l + (None, None)] += n
        for r, m in matches:
            out[l + r] += n * m
    if join_type in ("RIGHT", "FULL"):
        for r, m in right.items():
            if not any(l[0] == r[0] for l in left):
                out[(None, None) + r] += m
    return +out


@pytest.mark.parametrize("join_type", ["INNER", "LEFT", "RIGHT", "FULL"])
@pytest.mark.parametrize("seed", range(6))
def test_the_folded_changelog_is_the_join_of_what_is_held_on_random_updating_inputs(join_type: str, seed: int) -> None:
    rng = random.Random(seed)
    cores: dict[str, RegularJoinCore] = {}  # one per join key, as in keyed state
    sides = (Counter(), Counter())
    result: Counter = Counter()
    for _ in range(300):
        left = rng.random() < 0.5
        side = sides[0 if left else 1]
        held = list(side.elements())
        if held and rng.random() < 0.4:  # retract a row the side holds (-D or -U)
            row, kind = rng.choice(held), rng.choice([D, UB])
            side[row] -= 1
        else:
            row, kind = (rng.choice("abc"), rng.randrange(3)), rng.choice([I, UA])
            side[row] += 1
        core = cores.setdefault(row[0], RegularJoinCore(join_type, None, 2, 2))
        for r in core.process(row, kind, left):
            k = r.get_row_kind()
            result[tuple(r)] += 1 if k in (I, UA) else -1
            assert result[tuple(r)] >= 0, f"retracted {tuple(r)} that was not emitted"
        assert +result == expected_join(join_type, +sides[0], +sides[1])


def test_an_outer_join_is_updating_so_an_insert_only_sink_refuses_it_naming_the_join(tmp_path: Any) -> None:
    from millstream.table import EnvironmentSettings, TableEnvironment
    from millstream.table.expression import TableException
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.create_temporary_view("a", t_env.from_elements([(1, "x")], ["k", "v"]))
    t_env.create_temporary_view("b", t_env.from_elements([(1, "y")], ["k2", "w"]))
    t_env.execute_sql(f"CREATE TABLE out (k INT, v STRING, k2 INT, w STRING) WITH ('connector' = 'filesystem', "
                      f"'path' = '{tmp_path}', 'format' = 'csv')")
    with pytest.raises(TableException, match=r"doesn't support consuming update changes which is produced by node "
                                             r"Join\(joinType=\[FullOuterJoin\], where=\[k = k2\]"):
        t_env.execute_sql("INSERT INTO out SELECT * FROM a FULL JOIN b ON k = k2")
    with pytest.raises(TableException, match="doesn't support consuming update changes"):
        t_env.to_data_stream(t_env.sql_query("SELECT * FROM a RIGHT JOIN b ON k = k2"))
    t_env.to_data_stream(t_env.sql_query("SELECT * FROM a JOIN b ON k = k2"))  # an inner join of inserts appends
