"""A Calc evaluated over Arrow arrays (pyarrow.compute), a batch of rows at a time.

The row path (:class:`~millstream.table.runtime_functions.CalcFunction`) evaluates each
expression tree once per row in Python. :func:`compile_expression` turns the parts of a Calc that
pyarrow.compute can evaluate with *exactly* the row path's results (arithmetic, comparisons,
three-valued AND/OR/NOT, IS [NOT] NULL/TRUE/FALSE, UPPER/LOWER of ASCII text, CHAR_LENGTH, TRIM,
CONCAT, LIKE with a literal pattern, SUBSTRING with literal bounds, IN of literals, BETWEEN,
COALESCE, CASE, CASTs between integer, double, boolean and string where the text is the same) into
functions of the batch's columns. Everything else (Python UDFs, JSON_VALUE, temporal and DECIMAL
values, a FLOAT cast, ...) stays on the row path, expression by expression: :class:`ArrowCalc`
computes the filter and the projections that compiled over arrays and the others row by row on the
same batch.

Exactness: the row path's integers wrap at their declared type's width as Java's do (INT 32 bits,
BIGINT 64) and a zero divisor raises. Where Arrow would answer differently, the batch *falls back*
to the row path instead (the row path then gives its own answer or error): an integer result
outside its type's range (Arrow's checked kernels raise beyond 64 bits; a narrower type is checked),
a zero divisor, an integer beyond 2**53 meeting a double (Python compares and converts exactly),
non-ASCII text under UPPER/LOWER (Python maps e.g. 'ß' to 'SS'), a column value of a Python type
other than its column type's (a DOUBLE column holding ints divides as ints in Python), a value
Arrow cannot hold. A batch that fell back computes the same rows the row path would.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

from millstream.common.row import Row, positional_rows, values_and_kinds
from millstream.datastream.functions import FlatMapFunction
from millstream.table.expression import Resolved
from millstream.table.types import DataType, is_integer

__all__ = ["ArrowCalc", "compile_expression", "vectorizes"]


class _Fallback(Exception):
    """This batch cannot be computed over arrays with the row path's exact results."""


# A compiled expression: the batch's columns (position -> array) and the row count -> an Arrow
# array or scalar, with its "kind" (the Python type the row path's values have) known statically.
_Fn = Callable[[dict[int, Any], int], Any]


def column_kind(t: DataType) -> str | None:
    """The Python type of a column's values: int, float, str or bool; None: not vectorized."""
    if is_integer(t):
        return "int"
    if t.root == "DOUBLE":  # FLOAT columns hold float32-rounded values, arithmetic on them stays in Python
        return "float"
    if t.root in ("VARCHAR", "CHAR"):
        return "str"
    if t.root == "BOOLEAN":
        return "bool"
    return None


_PY_KIND = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null"}


def _pa() -> Any:
    import pyarrow as pa
    return pa


def _pc() -> Any:
    import pyarrow.compute as pc
    return pc


def _arrow_type(kind: str) -> Any:
    pa = _pa()
    return {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_(), "null": pa.null()}[kind]


class _Compiler:
    """Builds the array function of an expression, or None when it is not exactly vectorizable.
    ``columns`` collects the input columns the functions read, with their kinds."""

    def __init__(self, input_types: Sequence[DataType]) -> None:
        self.input_types = input_types
        self.columns: dict[int, str] = {}

    def compile(self, e: Resolved) -> tuple[_Fn, str] | None:
        if e.kind == "ref":
            kind = column_kind(self.input_types[e.value])
            if kind is None:
                return None
            self.columns[e.value] = kind
            i = e.value
            return (lambda cols, n: cols[i]), kind
        if e.kind == "lit":
            kind = _PY_KIND.get(type(e.value))
            if kind is None or (kind == "int" and not -2 ** 63 <= e.value < 2 ** 63):
                return None
            scalar = _pa().scalar(e.value, _arrow_type(kind))
            return (lambda cols, n: scalar), kind
        if e.kind == "cast":
            return _in_range(self._cast(e), e.dtype)
        if e.kind != "call":
            return None
        builder = _CALLS.get(e.value)
        if builder is None:
            return None
        if e.value in ("like", "substring", "in"):  # literal-shaped arguments, checked by the builder
            return builder(self, e)
        args = [self.compile(a) for a in e.args]
        if any(a is None for a in args):
            return None
        out = builder(self, e, args)
        return _in_range(out, e.dtype) if e.value in _WRAPPING else out

    def _cast(self, e: Resolved) -> tuple[_Fn, str] | None:
        inner = self.compile(e.args[0])
        if inner is None:
            return None
        f, kind = inner
        pc, pa = _pc(), _pa()
        target = column_kind(e.dtype)
        if target == "int" and kind == "int":
            return f, "int"
        if target == "int" and kind == "bool":
            return (lambda cols, n: pc.cast(f(cols, n), pa.int64())), "int"
        if target == "int" and kind == "float":  # int(v): truncation; NaN, inf and beyond 64 bits raise in Python
            def to_int(cols: dict[int, Any], n: int) -> Any:
                v = f(cols, n)
                if not _all(pc.and_(pc.is_finite(v), pc.less(pc.abs(v), 2.0 ** 63))):
                    raise _Fallback("a double beyond BIGINT")
                return pc.cast(pc.trunc(v), pa.int64())
            return to_int, "int"
        if target == "float" and kind == "float":
            return f, "float"
        if target == "float" and kind in ("int", "bool"):
            return (lambda cols, n: _to_double(f(cols, n), kind)), "float"
        if target == "bool" and kind == "bool":
            return f, "bool"
        if target == "bool" and kind == "int":
            return (lambda cols, n: pc.not_equal(f(cols, n), 0)), "bool"
        if e.dtype.root == "VARCHAR":  # CHAR(n) pads: stays on the row path
            if kind == "str":
                return f, "str"
            if kind == "int":
                return (lambda cols, n: pc.cast(f(cols, n), pa.string())), "str"
            if kind == "bool":
                return (lambda cols, n: pc.if_else(f(cols, n), "TRUE", "FALSE")), "str"
        return None


_WRAPPING = {"plus", "minus", "times", "divide", "mod", "negate", "abs"}
_NARROW = {"TINYINT": 8, "SMALLINT": 16, "INT": 32}


def _in_range(compiled: tuple[_Fn, str] | None, dtype: DataType) -> tuple[_Fn, str] | None:
    """An integer result of a type narrower than 64 bits, checked to be in its range: the row path
    wraps it as Java does (INT's 2147483647 + 1 is -2147483648), Arrow's int64 would not, so a batch
    with a value outside falls back. (BIGINT overflow raises in Arrow's checked kernels: falls back too.)"""
    bits = _NARROW.get(dtype.root)
    if compiled is None or compiled[1] != "int" or bits is None:
        return compiled
    f = compiled[0]
    pc = _pc()
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def checked(cols: dict[int, Any], n: int) -> Any:
        v = f(cols, n)
        if not _all(pc.and_(pc.greater_equal(v, lo), pc.less_equal(v, hi))):
            raise _Fallback(f"a {dtype.root} result outside {bits} bits wraps")
        return v
    return checked, "int"


def _all(mask: Any) -> bool:
    """Every non-null value of a boolean array or scalar is true."""
    pc = _pc()
    v = pc.all(mask) if hasattr(mask, "__len__") else mask
    return v.as_py() is not False


def _to_double(v: Any, kind: str) -> Any:
    """An int (or bool) array or scalar as doubles, exactly as Python's float() converts it (a safe
    cast refuses an integer beyond 2**53, which Python compares and rounds its own way: the batch
    falls back)."""
    return _pc().cast(v, _pa().float64())


def _numeric(kinds: Sequence[str]) -> bool:
    return all(k in ("int", "float") for k in kinds)


def _widened(args: Sequence[tuple[_Fn, str]]) -> tuple[list[_Fn], str]:
    """Functions giving the arguments in one kind: all ints, or all doubles (ints converted)."""
    if all(k == "int" for _, k in args):
        return [f for f, _ in args], "int"

    def as_double(f: _Fn, k: str) -> _Fn:
        return f if k == "float" else (lambda cols, n: _to_double(f(cols, n), k))
    return [as_double(f, k) for f, k in args], "float"


def _arith(checked: str, plain: str) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        kinds = [k for _, k in args]
        pc = _pc()
        if checked == "add_checked" and kinds == ["str", "str"]:  # Python's + of two strings
            (fa, _), (fb, _) = args
            return (lambda cols, n: pc.binary_join_element_wise(fa(cols, n), fb(cols, n), "")), "str"
        if not _numeric(kinds):
            return None
        (fa, fb), kind = _widened(args)
        op = getattr(pc, checked if kind == "int" else plain)
        return (lambda cols, n: op(fa(cols, n), fb(cols, n))), kind
    return build


def _no_zero(v: Any) -> None:
    pc = _pc()
    if not _all(pc.not_equal(v, 0)):
        raise _Fallback("a zero divisor")  # Python raises ZeroDivisionError (row path)


def _divide(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    if not _numeric([k for _, k in args]):
        return None
    (fa, fb), kind = _widened(args)
    pc = _pc()
    op = pc.divide_checked if kind == "int" else pc.divide  # ints truncate toward zero, as _int_div does

    def divide(cols: dict[int, Any], n: int) -> Any:
        b = fb(cols, n)
        _no_zero(b)
        return op(fa(cols, n), b)
    return divide, kind


def _mod(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    if [k for _, k in args] != ["int", "int"]:  # math.fmod of doubles has no exact array form
        return None
    (fa, _), (fb, _) = args
    pc = _pc()

    def mod(cols: dict[int, Any], n: int) -> Any:  # the sign of the dividend (Java's %)
        a, b = fa(cols, n), fb(cols, n)
        _no_zero(b)
        return pc.subtract_checked(a, pc.multiply_checked(pc.divide_checked(a, b), b))
    return mod, "int"


def _unary(int_op: str, float_op: str) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        (f, kind), = args
        if kind not in ("int", "float"):
            return None
        op = getattr(_pc(), int_op if kind == "int" else float_op)
        return (lambda cols, n: op(f(cols, n))), kind
    return build


def _comparable(kinds: Sequence[str]) -> bool:
    return _numeric(kinds) or len(set(kinds)) == 1 and kinds[0] in ("str", "bool")


def _compare(name: str) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        kinds = [k for _, k in args]
        if not _comparable(kinds):
            return None
        fa, fb = _widened(args)[0] if _numeric(kinds) else [f for f, _ in args]
        op = getattr(_pc(), name)
        return (lambda cols, n: op(fa(cols, n), fb(cols, n))), "bool"
    return build


def _logic(name: str) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        if any(k not in ("bool", "null") for _, k in args):
            return None
        fs = [f if k == "bool" else (lambda cols, n: _pa().scalar(None, _pa().bool_())) for f, k in args]
        op = getattr(_pc(), name)
        if len(fs) == 1:
            return (lambda cols, n: op(fs[0](cols, n))), "bool"
        return (lambda cols, n: op(fs[0](cols, n), fs[1](cols, n))), "bool"
    return build


# name -> (invert the value?, the answer for NULL)
_TRUTH_TESTS = {"is_true": (False, False), "is_false": (True, False), "is_not_true": (True, True),
                "is_not_false": (False, True)}


def _null_test(name: str) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        (f, kind), = args
        pc = _pc()
        if name in _TRUTH_TESTS:
            if kind != "bool":
                return None
            negate, when_null = _TRUTH_TESTS[name]
            op = (lambda v: pc.fill_null(pc.invert(v) if negate else v, when_null))
            return (lambda cols, n: _array(op(f(cols, n)), n)), "bool"
        test = pc.is_null if name == "is_null" else pc.is_valid
        return (lambda cols, n: _array(test(f(cols, n)), n)), "bool"
    return build


def _array(v: Any, n: int) -> Any:
    """``v`` as an array of ``n`` values (a scalar repeated)."""
    pa = _pa()
    return pa.repeat(v, n) if isinstance(v, pa.Scalar) else v


def _string_fn(name: str, result: str = "str", **options: Any) -> Callable[..., tuple[_Fn, str] | None]:
    def build(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
        (f, kind), = args
        if kind != "str":
            return None
        pc, pa = _pc(), _pa()
        op = getattr(pc, name)
        if name in ("ascii_upper", "ascii_lower"):
            def case(cols: dict[int, Any], n: int) -> Any:
                v = f(cols, n)
                if not _all(pc.string_is_ascii(v)):
                    raise _Fallback("non-ASCII text changes case by Python's rules")
                return op(v)
            return case, result
        if result == "int":
            return (lambda cols, n: pc.cast(op(f(cols, n)), pa.int64())), "int"
        return (lambda cols, n: op(f(cols, n), **options)), result
    return build


def _concat(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    if not args or any(k not in ("str", "int") for _, k in args):  # str(int) is Arrow's text too
        return None
    pc, pa = _pc(), _pa()
    fs = [f if k == "str" else (lambda cols, n, f=f: pc.cast(f(cols, n), pa.string())) for f, k in args]

    def concat(cols: dict[int, Any], n: int) -> Any:
        return _array(pc.binary_join_element_wise(*[g(cols, n) for g in fs], ""), n)
    return concat, "str"


def _like(c: _Compiler, e: Resolved) -> tuple[_Fn, str] | None:
    s, pattern = e.args
    if pattern.kind != "lit" or not isinstance(pattern.value, str) or "\\" in pattern.value:
        return None  # Arrow's LIKE reads a backslash as an escape, the row path as a character
    inner = c.compile(s)
    if inner is None or inner[1] != "str":
        return None
    f, text = inner[0], pattern.value
    pc = _pc()
    return (lambda cols, n: pc.match_like(f(cols, n), text)), "bool"


def _substring(c: _Compiler, e: Resolved) -> tuple[_Fn, str] | None:
    s, *bounds = e.args
    if any(b.kind != "lit" or type(b.value) is not int for b in bounds):
        return None
    begin = bounds[0].value
    length = bounds[1].value if len(bounds) > 1 else None
    if length is not None and (length < 0 or begin < 0):
        return None  # the row path's slices of these differ from Arrow's clamping
    inner = c.compile(s)
    if inner is None or inner[1] != "str":
        return None
    f = inner[0]
    start = begin - 1 if begin > 0 else begin
    stop = None if length is None else start + length
    pc = _pc()
    return (lambda cols, n: pc.utf8_slice_codeunits(f(cols, n), start, stop)), "str"


def _in(c: _Compiler, e: Resolved) -> tuple[_Fn, str] | None:
    a, *values = e.args
    inner = c.compile(a)
    if inner is None or any(v.kind != "lit" or _PY_KIND.get(type(v.value)) != inner[1] for v in values):
        return None
    f, kind = inner
    if kind not in ("int", "str", "bool"):  # doubles: NaN and -0.0 compare unlike Python's ==
        return None
    pc, pa = _pc(), _pa()
    value_set = pa.array([v.value for v in values], _arrow_type(kind))

    def is_in(cols: dict[int, Any], n: int) -> Any:
        v = _array(f(cols, n), n)
        return pc.if_else(pc.is_null(v), pa.scalar(None, pa.bool_()), pc.is_in(v, value_set=value_set))
    return is_in, "bool"


def _between(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    kinds = [k for _, k in args]
    if not _comparable(kinds):
        return None
    fa, lo, hi = _widened(args)[0] if _numeric(kinds) else [f for f, _ in args]
    pc = _pc()
    # a plain (not Kleene) AND: null when any of the three is null, as the row path
    return (lambda cols, n: pc.and_(pc.greater_equal(fa(cols, n), lo(cols, n)),
                                    pc.less_equal(fa(cols, n), hi(cols, n)))), "bool"


def _coalesce(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    kinds = {k for _, k in args} - {"null"}
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    pc, pa = _pc(), _pa()
    fs = [f for f, k in args if k != "null"]
    return (lambda cols, n: _array(pc.coalesce(*[g(cols, n) for g in fs]), n)), kind


def _case(c: _Compiler, e: Resolved, args: list[tuple[_Fn, str]]) -> tuple[_Fn, str] | None:
    """CASE as pyarrow's case_when (a null condition is not true, as on the row path). Every branch
    is computed for every row: a branch that would fail on a row it is not chosen for makes the
    batch fall back (the row path evaluates only the chosen branch)."""
    conds, results = args[0:-1:2], [*args[1:-1:2], args[-1]]
    if any(k not in ("bool", "null") for _, k in conds):
        return None
    kinds = {k for _, k in results} - {"null"}
    if not kinds:
        return None
    if kinds <= {"int", "float"}:
        kind = "float" if "float" in kinds else "int"
        if kind == "float" and e.dtype.root != "DOUBLE":
            return None  # a FLOAT or DECIMAL result: the row path's values
    elif len(kinds) == 1:
        kind = kinds.pop()
    else:
        return None
    pc, pa = _pc(), _pa()
    target = _arrow_type(kind)

    def as_kind(f: _Fn, k: str) -> _Fn:
        if k == kind:
            return f
        if k == "null":
            return lambda cols, n: pa.scalar(None, target)
        return lambda cols, n: _to_double(f(cols, n), k)
    cfs = [f if k == "bool" else (lambda cols, n: pa.scalar(None, pa.bool_())) for f, k in conds]
    rfs = [as_kind(f, k) for f, k in results]
    names = [str(i) for i in range(len(cfs))]

    def case(cols: dict[int, Any], n: int) -> Any:
        struct = pa.StructArray.from_arrays([_array(g(cols, n), n) for g in cfs], names=names)
        return pc.case_when(struct, *[_array(g(cols, n), n) for g in rfs])
    return case, kind


_CALLS: dict[str, Callable[..., tuple[_Fn, str] | None]] = {
    "plus": _arith("add_checked", "add"),
    "minus": _arith("subtract_checked", "subtract"),
    "times": _arith("multiply_checked", "multiply"),
    "divide": _divide,
    "mod": _mod,
    "negate": _unary("negate_checked", "negate"),
    "abs": _unary("abs_checked", "abs"),
    "equals": _compare("equal"),
    "not_equals": _compare("not_equal"),
    "less_than": _compare("less"),
    "less_than_or_equal": _compare("less_equal"),
    "greater_than": _compare("greater"),
    "greater_than_or_equal": _compare("greater_equal"),
    "and": _logic("and_kleene"),
    "or": _logic("or_kleene"),
    "not": _logic("invert"),
    "is_null": _null_test("is_null"),
    "is_not_null": _null_test("is_not_null"),
    "is_true": _null_test("is_true"),
    "is_false": _null_test("is_false"),
    "is_not_true": _null_test("is_not_true"),
    "is_not_false": _null_test("is_not_false"),
    "upper": _string_fn("ascii_upper"),
    "lower": _string_fn("ascii_lower"),
    "char_length": _string_fn("utf8_length", "int"),
    "trim": _string_fn("utf8_trim", characters=" "),
    "concat": _concat,
    "like": _like,
    "substring": _substring,
    "in": _in,
    "between": _between,
    "coalesce": _coalesce,
    "case": _case,
}


def compile_expression(e: Resolved, input_types: Sequence[DataType]) -> tuple[_Fn, str, dict[int, str]] | None:
    """The array function of ``e``, its result kind and the columns (position -> kind) it reads;
    None when ``e`` stays on the row path."""
    if e.kind == "ref":
        return None  # a column passes through as it is (any type, no conversion)
    c = _Compiler(input_types)
    out = c.compile(e)
    return None if out is None else (out[0], out[1], c.columns)


def vectorizes(projections: Sequence[Resolved], condition: Resolved | None, input_types: Sequence[DataType]) -> bool:
    """Whether an :class:`ArrowCalc` computes any of this Calc over arrays (else the row path is all)."""
    exprs = [*projections, *([condition] if condition is not None else [])]
    return any(compile_expression(e, input_types) is not None for e in exprs)


# Fewer rows than this in a batch run row by row: pyarrow's cost per kernel call (some µs) makes
# arrays slower below ~32 rows of a six-expression Calc and ~4x faster at 128.
MIN_ROWS = 64


class ArrowCalc(FlatMapFunction):
    """Flink's Calc over a batch of rows: the filter and the projections that compile as Arrow
    array functions, the rest row by row (see the module docstring); the row kind passes through.
    The task's FlatMap operator hands it each slice of records as one list (``flat_map_batch``)."""

    def __init__(self, projections: Sequence[Resolved], condition: Resolved | None,
                 input_types: Sequence[DataType], min_rows: int = MIN_ROWS) -> None:
        self.min_rows = min_rows
        self.projections = tuple(projections)
        self.condition = condition
        self.input_types = tuple(input_types)
        self._compiled: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_compiled"] = None  # closures over Arrow objects are built again in the task
        return state

    def _compile(self) -> Any:
        if self._compiled is None:
            cond = compile_expression(self.condition, self.input_types) if self.condition is not None else None
            projs = [compile_expression(p, self.input_types) for p in self.projections]
            columns: dict[int, str] = {}
            for c in [cond, *projs]:
                if c is not None:
                    columns.update(c[2])
            self._compiled = (cond, projs, columns)
        return self._compiled

    def flat_map(self, value: Row) -> Any:
        return self.flat_map_batch([value])[0]

    def flat_map_batch(self, records: list[Row]) -> list[list[Row]]:
        """One list of output rows per input record (the row or nothing)."""
        if len(records) < self.min_rows:  # a few rows: Arrow's per-call cost outweighs the rows' (a trickling stream)
            return self._rows(records)
        try:
            return self._vectorized(records)
        except _Fallback:
            return self._rows(records)
        except Exception as e:
            if _is_arrow_error(e):
                return self._rows(records)  # e.g. a checked kernel's overflow: the row path's answer
            raise

    def _rows(self, records: list[Row]) -> list[list[Row]]:
        out: list[list[Row]] = []
        cond, projs = self.condition, self.projections
        for record in records:
            values = list(record)
            if cond is not None and cond.eval(values) is not True:
                out.append([])
                continue
            out.append([_row([p.eval(values) for p in projs], record.get_row_kind())])
        return out

    def _vectorized(self, records: list[Row]) -> list[list[Row]]:
        pa, pc = _pa(), _pc()
        cond, projs, kinds = self._compile()
        n = len(records)
        values, row_kinds = values_and_kinds(records)
        transposed = list(zip(*values)) if kinds else []
        arrays = {i: _to_array(transposed[i], kind) for i, kind in kinds.items()}
        if self.condition is None:
            mask = None
        elif cond is not None:
            selector = pc.fill_null(_array(cond[0](arrays, n), n), False)
            mask = selector.to_pylist()
        else:
            mask = [self.condition.eval(v) is True for v in values]
            selector = pa.array(mask, pa.bool_())
        kept, kept_values, kept_kinds = n, values, row_kinds
        if mask is not None:
            kept = mask.count(True)
            if kept == 0:
                return [[] for _ in records]
            if kept < n:
                arrays = {i: a.filter(selector) for i, a in arrays.items()}
                kept_values = list(itertools.compress(values, mask))
                kept_kinds = list(itertools.compress(row_kinds, mask))
        columns: list[Any] = []
        for p, compiled in zip(self.projections, projs):
            if p.kind == "ref":
                columns.append([v[p.value] for v in kept_values])
            elif compiled is not None:
                result = compiled[0](arrays, kept)
                columns.append([result.as_py()] * kept if isinstance(result, pa.Scalar) else result.to_pylist())
            else:
                columns.append([p.eval(v) for v in kept_values])
        rows = positional_rows(zip(*columns) if columns else [()] * kept, kept_kinds)
        if mask is None:
            return [[r] for r in rows]
        out: list[list[Row]] = []
        it = iter(rows)
        for keep in mask:
            out.append([next(it)] if keep else [])
        return out


def _row(values: list[Any], kind: Any) -> Row:
    r = Row(*values)
    r.set_row_kind(kind)
    return r


_TYPES_OF_KIND: dict[str, set[type]] = {"int": {int}, "float": {float}, "str": {str}, "bool": {bool}}


def _to_array(column: Sequence[Any], kind: str) -> Any:
    """A column's values as an Arrow array of its kind; _Fallback when a value is of another Python
    type (the row path computes with the value's own type) or does not fit."""
    found = set(map(type, column))
    found.discard(type(None))
    if not found <= _TYPES_OF_KIND[kind]:
        raise _Fallback(f"a {kind} column holds {sorted(t.__name__ for t in found)}")
    try:
        return _pa().array(column, _arrow_type(kind))
    except (OverflowError, ValueError, TypeError) as e:  # ArrowInvalid is a ValueError
        raise _Fallback(str(e)) from None


def _is_arrow_error(e: BaseException) -> bool:
    return type(e).__module__.startswith("pyarrow")
