"""The vectorized Calc (millstream.table.arrow_calc) against the row path and a plain-Python answer.

Differential: random rows (nulls, 64-bit extremes, integers past 2**53, NaN, infinities, -0.0,
non-ASCII and empty strings, LIKE's wildcards as data) through many expressions, each as a
projection and as a filter, in batches of several sizes. The vectorized Calc must give the row
path's rows exactly (values, Python types, row kinds) or raise where the row path raises, and both
must give SQL's answer written out here: a null argument gives null, AND/OR/NOT are three-valued,
integer division truncates toward zero, MOD takes the dividend's sign, a zero divisor is an error,
integer results wrap at their type's width as Java's (INT 32 bits, BIGINT 64 bits).
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable

import pytest

from millstream.common.row import Row, RowKind
from millstream.runtime import config as cfg
from millstream.table import DataTypes
from millstream.table import arrow_calc
from millstream.table.arrow_calc import ArrowCalc, compile_expression
from millstream.table.expression import Expression, resolve
from millstream.table.expressions import coalesce, col, concat, lit
from millstream.table.runtime_functions import CalcFunction
from millstream.table.udf import udf

COLUMNS = [("a", DataTypes.INT()), ("b", DataTypes.BIGINT()), ("x", DataTypes.DOUBLE()), ("y", DataTypes.DOUBLE()),
           ("s", DataTypes.STRING()), ("t", DataTypes.STRING()), ("f", DataTypes.BOOLEAN()),
           ("g", DataTypes.BOOLEAN()), ("d", DataTypes.DECIMAL(10, 2))]
TYPES = [t for _, t in COLUMNS]
NAMES = [n for n, _ in COLUMNS]

SMALL_INTS = [0, 1, -1, 2, -2, 3, 7, -7, 10, 100, -100, 2 ** 31 - 1, -2 ** 31]
BIG_INTS = SMALL_INTS + [2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 63 - 1, -2 ** 63]
FLOATS = [0.0, -0.0, 1.5, -2.25, 3.0, 7.0, 1e300, -1e300, math.nan, math.inf, -math.inf, 0.1]
STRINGS = ["", "a", "abc", "ABC", " pad ", "hello world", "Straße", "é", "50%", "a_b", "x\ny", "  ", "42"]


def random_rows(rng: random.Random, n: int, hazards: bool = True) -> list[Row]:
    """Rows of COLUMNS; without hazards only values no batch falls back on (small ints, ASCII
    text, no zero in b or y), so the arrays path itself is what a test checks."""
    def pick(values: list[Any]) -> Any:
        return None if rng.random() < 0.15 else rng.choice(values)
    # a is INT: its values are 32-bit ones, its extremes overflow hazards (INT results wrap)
    ints = SMALL_INTS if hazards else [v for v in SMALL_INTS if abs(v) < 2 ** 30]
    big_ints = BIG_INTS if hazards else SMALL_INTS
    strings = STRINGS if hazards else [s for s in STRINGS if s.isascii()]
    divisors = big_ints if hazards else [v for v in SMALL_INTS if v != 0]
    fdivisors = FLOATS if hazards else [v for v in FLOATS if v != 0]
    import decimal
    rows = []
    if hazards:  # the extremes' pairs, so each batch of the first trial meets them
        for a, b, x, y in [(-2 ** 31, -1, 1.0, 0.0), (2 ** 31 - 1, 2 ** 63 - 1, -0.0, 0.0),
                           (-2 ** 31, -1, math.nan, -0.0), (2 ** 31 - 1, 2 ** 53 + 1, 2.0 ** 53, math.inf),
                           (-2 ** 31, -2 ** 63, 1e300, 1e-300), (2 ** 31 - 1, 2, -1.0, 2.0)]:
            rows.append(Row(a, b, x, y, "ß", "Straße", True, None, decimal.Decimal("1.25")))
    for i in range(n - len(rows)):
        r = Row(pick(ints), pick(divisors), pick(FLOATS), pick(fdivisors), pick(strings), pick(strings),
                pick([True, False]), pick([True, False]), decimal.Decimal("1.25"))
        if i % 5 == 0:
            r.set_row_kind([RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE][i % 3])
        rows.append(r)
    return rows


# -- SQL's answers, written out ----------------------------------------------------------------


def strict(f: Callable[..., Any]) -> Callable[..., Any]:
    """A function with SQL's null rule: any null argument gives null."""
    return lambda *v: None if any(x is None for x in v) else f(*v)


def sql_div(a: Any, b: Any) -> Any:
    if b == 0:
        raise ZeroDivisionError
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return a / b


def sql_mod(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError
    r = abs(a) % abs(b)  # Java's %: the remainder takes the dividend's sign
    return r if a >= 0 else -r


def sql_and(p: Any, q: Any) -> Any:
    if p is False or q is False:
        return False
    return None if p is None or q is None else True


def sql_or(p: Any, q: Any) -> Any:
    if p is True or q is True:
        return True
    return None if p is None or q is None else False


def like(s: str, pattern: str) -> bool:
    """SQL LIKE by hand: % any run, _ one character, everything else itself."""
    if not pattern:
        return not s
    head, rest = pattern[0], pattern[1:]
    if head == "%":
        return any(like(s[i:], rest) for i in range(len(s) + 1))
    return bool(s) and (head == "_" or head == s[0]) and like(s[1:], rest)


def ascii_upper(s: str) -> str:
    return s.upper()


def wrap(bits: int) -> Callable[[Any], Any]:
    """Java's two's complement of ``bits`` bits: 2**31 as an INT is -2**31."""
    def f(v: Any) -> Any:
        if v is None:
            return None
        v %= 2 ** bits
        return v - 2 ** bits if v >= 2 ** (bits - 1) else v
    return f


int32, int64 = wrap(32), wrap(64)
plus, minus, times = strict(lambda a, b: a + b), strict(lambda a, b: a - b), strict(lambda a, b: a * b)
div, mod = strict(sql_div), strict(sql_mod)
eq, lt, ge = strict(lambda a, b: a == b), strict(lambda a, b: a < b), strict(lambda a, b: a >= b)

# (expression, SQL's answer on a row dict, vectorized for a batch without hazards)
CASES: list[tuple[Expression, Callable[[dict[str, Any]], Any], bool]] = [
    (col("a") + col("b"), lambda r: int64(plus(r["a"], r["b"])), True),  # INT + BIGINT: BIGINT
    (col("a") - lit(3), lambda r: int32(minus(r["a"], 3)), True),
    (col("a") + lit(1), lambda r: int32(plus(r["a"], 1)), True),  # INT: 2147483647 + 1 = -2147483648
    (col("a") * col("a"), lambda r: int32(times(r["a"], r["a"])), True),
    (col("b") * col("b"), lambda r: int64(times(r["b"], r["b"])), True),
    (col("b").cast(DataTypes.INT()), lambda r: int32(r["b"]), True),  # narrowing keeps the low 32 bits
    (col("b") / lit(-1), lambda r: int64(div(r["b"], -1)), True),  # -2**63 / -1 wraps to -2**63
    (col("a") * col("b") + lit(1), lambda r: int64(plus(int64(times(r["a"], r["b"])), 1)), True),
    (col("a") / col("b"), lambda r: div(r["a"], r["b"]), True),
    (col("a") % col("b"), lambda r: mod(r["a"], r["b"]), True),
    (-col("a"), lambda r: int32(None if r["a"] is None else -r["a"]), True),
    (col("b").abs, lambda r: int64(None if r["b"] is None else abs(r["b"])), True),
    (col("x") + col("a"), lambda r: plus(r["x"], r["a"]), True),
    (col("x") + col("b"), lambda r: plus(r["x"], r["b"]), True),
    (col("x") < col("b"), lambda r: lt(r["x"], r["b"]), True),
    (col("x") * lit(2.5) - col("y"), lambda r: minus(times(r["x"], 2.5), r["y"]), True),
    (col("x") / col("y"), lambda r: div(r["x"], r["y"]), True),
    (col("a") / col("y"), lambda r: div(r["a"], r["y"]), True),
    (col("x") % col("y"), lambda r: strict(math.fmod)(r["x"], r["y"]) if r["y"] != 0 else
     (None if r["x"] is None else math.fmod(r["x"], 0.0)), False),
    (col("a") == col("b"), lambda r: eq(r["a"], r["b"]), True),
    (col("a") != lit(1), lambda r: strict(lambda a: a != 1)(r["a"]), True),
    (col("x") < col("a"), lambda r: lt(r["x"], r["a"]), True),
    (col("x") >= col("y"), lambda r: ge(r["x"], r["y"]), True),
    (col("s") < col("t"), lambda r: lt(r["s"], r["t"]), True),
    (col("f") > col("g"), lambda r: strict(lambda p, q: p > q)(r["f"], r["g"]), True),
    (col("f") & col("g"), lambda r: sql_and(r["f"], r["g"]), True),
    (col("f") | (col("a") > lit(0)), lambda r: sql_or(r["f"], lt(0, r["a"])), True),
    (~col("f"), lambda r: r["f"] is not True, True),  # PyFlink's ~ is isNotTrue
    ((col("f") | lit(None)) & ~col("g"), lambda r: sql_and(sql_or(r["f"], None), r["g"] is not True), True),
    (col("a").is_null, lambda r: r["a"] is None, True),
    (col("s").is_not_null, lambda r: r["s"] is not None, True),
    (col("f").is_true, lambda r: r["f"] is True, True),
    (col("f").is_false, lambda r: r["f"] is False, True),
    (col("f").is_not_true, lambda r: r["f"] is not True, True),
    (col("f").is_not_false, lambda r: r["f"] is not False, True),
    (col("s") + col("t"), lambda r: strict(lambda s, t: s + t)(r["s"], r["t"]), True),
    (col("s").upper_case, lambda r: None if r["s"] is None else ascii_upper(r["s"]), True),
    (col("t").lower_case, lambda r: None if r["t"] is None else r["t"].lower(), True),
    (col("s").char_length, lambda r: None if r["s"] is None else len(r["s"]), True),
    (col("s").trim(), lambda r: None if r["s"] is None else r["s"].strip(" "), True),
    (concat(col("s"), lit("-"), col("t")), lambda r: strict(lambda s, t: f"{s}-{t}")(r["s"], r["t"]), True),
    (concat(col("s"), col("a")), lambda r: strict(lambda s, a: f"{s}{a}")(r["s"], r["a"]), True),
    (col("s").like("a%"), lambda r: None if r["s"] is None else like(r["s"], "a%"), True),
    (col("s").like("%_b%"), lambda r: None if r["s"] is None else like(r["s"], "%_b%"), True),
    (col("t").like("x_y"), lambda r: None if r["t"] is None else like(r["t"], "x_y"), True),
    (col("s").substring(2), lambda r: None if r["s"] is None else r["s"][1:], True),
    (col("s").substring(2, 2), lambda r: None if r["s"] is None else r["s"][1:3], True),
    (col("s").substring(0, 3), lambda r: None if r["s"] is None else r["s"][0:3], True),
    (col("s").substring(-2), lambda r: None if r["s"] is None else r["s"][max(len(r["s"]) - 2, 0):], True),
    (col("s").substring(-3, 2), lambda r: None if r["s"] is None else r["s"][max(len(r["s"]) - 3, 0):][:2], False),
    (col("a").in_(1, 2, 3), lambda r: None if r["a"] is None else r["a"] in (1, 2, 3), True),
    (col("s").in_("a", "abc"), lambda r: None if r["s"] is None else r["s"] in ("a", "abc"), True),
    (col("a").between(lit(-2), col("b")), lambda r: strict(lambda a, b: -2 <= a <= b)(r["a"], r["b"]), True),
    (coalesce(col("a"), col("b"), lit(0)), lambda r: next(v for v in (r["a"], r["b"], 0) if v is not None), True),
    (coalesce(col("s"), lit("none")), lambda r: "none" if r["s"] is None else r["s"], True),
    (col("a").cast(DataTypes.STRING()), lambda r: None if r["a"] is None else str(r["a"]), True),
    (col("a").cast(DataTypes.DOUBLE()), lambda r: None if r["a"] is None else float(r["a"]), True),
    (col("f").cast(DataTypes.STRING()), lambda r: None if r["f"] is None else ("TRUE" if r["f"] else "FALSE"), True),
    (col("a").cast(DataTypes.BOOLEAN()), lambda r: None if r["a"] is None else r["a"] != 0, True),
    (col("b").cast(DataTypes.BIGINT()) + lit(1), lambda r: int64(plus(r["b"], 1)), True),
    ((col("a") * lit(2) > col("b")) & col("s").is_not_null,
     lambda r: sql_and(lt(r["b"], int32(times(r["a"], 2))), r["s"] is not None), True),
    # CASE: the first TRUE condition's branch (a null condition is not true), NULL without ELSE,
    # an INT branch of a DOUBLE CASE gives a double; only the chosen branch may fail
    ((col("a") > lit(0)).then(col("s"), lit("neg")),
     lambda r: r["s"] if lt(0, r["a"]) is True else "neg", True),
    (Expression("call", (col("f"), col("b"), col("g"), col("a"), lit(None)), "case"),
     lambda r: r["b"] if r["f"] is True else r["a"] if r["g"] is True else None, True),
    (Expression("call", (col("f"), col("a"), col("x")), "case"),
     lambda r: (None if r["a"] is None else float(r["a"])) if r["f"] is True else r["x"], True),
    (Expression("call", (col("b") == lit(0), lit(None), col("a") / col("b")), "case"),
     lambda r: None if r["b"] == 0 else div(r["a"], r["b"]), True),
    ((col("a").is_null).then(lit(True), col("f") & col("g")),
     lambda r: True if r["a"] is None else sql_and(r["f"], r["g"]), True),
    (col("d") + lit(1), lambda r: r["d"] + 1, False),  # DECIMAL: the row path
    (col("x").cast(DataTypes.STRING()), lambda r: None if r["x"] is None else str(r["x"]), False),
]


def expected_rows(expr: Expression, answer: Callable[[dict[str, Any]], Any], rows: list[Row], as_filter: bool) -> Any:
    out = []
    for r in rows:
        v = answer(dict(zip(NAMES, r)))
        if as_filter:
            if v is True:
                out.append((r.get_row_kind(), (r[0], r[4])))
        else:
            out.append((r.get_row_kind(), (v, r[0])))
    return out


def run(f: Any, rows: list[Row]) -> list[tuple[Any, tuple[Any, ...]]]:
    """The rows ``f`` makes of one batch (a batch function takes it at once)."""
    if hasattr(f, "flat_map_batch"):
        out = [r for part in f.flat_map_batch(rows) for r in part]
    else:
        out = [r for row in rows for r in f.flat_map(row)]
    return [(r.get_row_kind(), tuple(r)) for r in out]


def batches(rows: list[Row], sizes: list[int]) -> list[list[Row]]:
    out, start = [], 0
    while start < len(rows):
        size = sizes[len(out) % len(sizes)]
        out.append(rows[start:start + size])
        start += size
    return out


def typed(rows: list[tuple[Any, tuple[Any, ...]]]) -> list[Any]:
    """Rows with each value's Python type beside it (1 == 1.0 == True must not pass) and NaN
    comparable to itself."""
    def key(v: Any) -> Any:
        return (type(v).__name__, "nan" if isinstance(v, float) and math.isnan(v) else v)
    return [(k, tuple(key(v) for v in vals)) for k, vals in rows]


def outcome(f: Callable[[], Any]) -> Any:
    try:
        return ("rows", typed(f()))
    except (ArithmeticError, ValueError) as e:  # the row path's error (the same class both ways)
        return ("error", type(e).__name__)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[str(c[0]) for c in CASES])
@pytest.mark.parametrize("as_filter", [False, True], ids=["projection", "filter"])
def test_vectorized_equals_row_path_and_sql(case: int, as_filter: bool) -> None:
    expr, answer, _ = CASES[case]
    e = resolve(expr, COLUMNS)
    if as_filter and e.dtype.root != "BOOLEAN":
        pytest.skip("not a condition")
    projections = [resolve(col("a"), COLUMNS), resolve(col("s"), COLUMNS)] if as_filter else \
        [e, resolve(col("a"), COLUMNS)]
    condition = e if as_filter else None
    rng = random.Random(case * 2 + as_filter)
    row_path, vectorized = CalcFunction(projections, condition), ArrowCalc(projections, condition, TYPES, min_rows=1)
    for hazards, sizes in [(True, [1]), (True, [7, 64]), (True, [300]), (False, [300]), (False, [7, 64])]:
        for batch in batches(random_rows(rng, 300, hazards), sizes):  # each batch on its own: an error hides no other
            by_rows = outcome(lambda: run(row_path, batch))
            by_arrays = outcome(lambda: run(vectorized, batch))
            sql = outcome(lambda: expected_rows(expr, answer, batch, as_filter))
            if by_rows[0] == "error" or sql[0] == "error":
                # a failing row fails the job either way (which row's error comes first may differ)
                assert by_arrays[0] == by_rows[0] == sql[0] == "error", (batch, by_rows, by_arrays, sql)
                continue
            assert by_arrays == by_rows, f"{expr}: vectorized differs from the row path on {batch}"
            assert by_rows == sql, f"{expr}: the row path differs from SQL's answer on {batch}"


@pytest.mark.parametrize("case", [i for i, c in enumerate(CASES) if c[2]], ids=[str(c[0]) for c in CASES if c[2]])
def test_a_batch_without_hazards_is_computed_over_arrays(case: int) -> None:
    """No fallback hides a wrong array answer: on safe values the arrays path itself runs (the
    test above then compares it), and the expression does compile."""
    expr = CASES[case][0]
    e = resolve(expr, COLUMNS)
    assert compile_expression(e, TYPES) is not None
    rows = random_rows(random.Random(case), 200, hazards=False)
    f = ArrowCalc([e], None, TYPES, min_rows=1)
    vectorized = [(r.get_row_kind(), tuple(r)) for part in f._vectorized(rows) for r in part]  # raises on fallback
    assert typed(vectorized) == typed(run(CalcFunction([e], None), rows))


def test_row_path_only_expressions_do_not_compile() -> None:
    for expr in [c[0] for c in CASES if not c[2]]:
        assert compile_expression(resolve(expr, COLUMNS), TYPES) is None, expr
    plus_one = udf(lambda v: v + 1, result_type=DataTypes.INT())
    e = resolve(Expression("udf", (col("a"),), plus_one), COLUMNS)
    assert compile_expression(e, TYPES) is None
    assert not arrow_calc.vectorizes([resolve(col("a"), COLUMNS), e], None, TYPES)  # nothing to gain: the row path


def test_a_udf_projection_runs_per_row_beside_vectorized_ones() -> None:
    calls: list[Any] = []

    def plus_one(v: Any) -> Any:
        calls.append(v)
        return None if v is None else v + 1
    f_udf = udf(plus_one, result_type=DataTypes.BIGINT())
    projections = [resolve(Expression("udf", (col("a"),), f_udf), COLUMNS), resolve(col("a") * lit(2), COLUMNS)]
    condition = resolve(col("a") > lit(0), COLUMNS)
    assert arrow_calc.vectorizes(projections, condition, TYPES)
    rows = random_rows(random.Random(5), 100, hazards=False)
    out = run(ArrowCalc(projections, condition, TYPES, min_rows=1), rows)
    kept = [r for r in rows if r[0] is not None and r[0] > 0]
    assert out == [(r.get_row_kind(), (r[0] + 1, r[0] * 2)) for r in kept]
    assert calls == [r[0] for r in kept]  # the UDF sees only the rows the filter kept, as Flink's Calc


def test_a_column_holding_another_python_type_falls_back_to_the_row_path() -> None:
    """A DOUBLE column holding ints (a from_elements of ints typed DOUBLE) divides as ints in the
    row path; the vectorized Calc must not turn them into doubles."""
    e = resolve(col("x") / col("y"), COLUMNS)
    rows = [Row(None, None, 7, 2, None, None, None, None, None),
            Row(None, None, 7.0, 2.0, None, None, None, None, None)]
    out = run(ArrowCalc([e], None, TYPES, min_rows=1), rows)
    assert out == [(RowKind.INSERT, (3,)), (RowKind.INSERT, (3.5,))]
    assert [type(v[0]) for _, v in out] == [int, float]


def test_a_batch_of_few_rows_runs_row_by_row() -> None:
    """Below MIN_ROWS a batch takes the row path (same rows), so a trickling stream pays no Arrow call."""
    e = resolve(col("a") + lit(1), COLUMNS)
    f = ArrowCalc([e], None, TYPES)
    f._vectorized = None  # type: ignore[assignment]  # would fail if called
    rows = random_rows(random.Random(3), arrow_calc.MIN_ROWS - 1, hazards=False)
    assert run(f, rows) == run(CalcFunction([e], None), rows)


def test_the_option_is_registered_on_by_default_and_read_by_the_planner() -> None:
    assert cfg.VECTORIZED_CALC_ENABLED.key == "table.exec.millstream.vectorized-calc.enabled"
    assert cfg.VECTORIZED_CALC_ENABLED in cfg.TABLE_OPTIONS
    from millstream.table import EnvironmentSettings, TableEnvironment
    from millstream.table import plan as p
    from millstream.table.planner import translate

    def calc_function(enabled: str | None) -> Any:
        t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        if enabled is not None:
            t_env.get_config().set("table.exec.millstream.vectorized-calc.enabled", enabled)
        table = t_env.from_elements([(1, "a")], ["id", "w"]).select(col("id") + 1, col("w").upper_case)
        node = table._node
        assert isinstance(node, p.Calc)
        stream = translate(node, t_env._env, batch=False)
        return stream.get_transformation().factory.function
    assert isinstance(calc_function(None), ArrowCalc)
    assert isinstance(calc_function("true"), ArrowCalc)
    assert isinstance(calc_function("false"), CalcFunction)


def test_sql_not_like_keeps_the_rows_like_drops() -> None:
    """``name NOT LIKE 'item1%'`` is the negation of LIKE (sqlglot marks it ``negate`` on its Like
    node; the planner had read it as LIKE), on both paths."""
    from millstream.table import EnvironmentSettings, TableEnvironment
    from millstream.table import plan as p
    from millstream.table.planner import optimize
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.create_temporary_view("t", t_env.from_elements([(1, "item1"), (2, "item2"), (3, None)], ["id", "name"]))
    node = optimize(t_env.sql_query("SELECT id FROM t WHERE name NOT LIKE 'item1%'")._node)
    assert isinstance(node, p.Calc) and "NOT(LIKE(name, 'item1%'))" in node.describe()
    rows = [Row(1, "item1"), Row(2, "item2"), Row(3, None)]
    types = [t for _, t in node.input.columns]
    for f in (CalcFunction(node.projections, node.condition),
              ArrowCalc(node.projections, node.condition, types, min_rows=1)):
        assert run(f, rows) == [(RowKind.INSERT, (2,))]
