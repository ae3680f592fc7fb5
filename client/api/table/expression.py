"""Expressions of the Table API: PyFlink's ``Expression`` DSL and how an expression is resolved
against a schema and evaluated on a row.

An :class:`Expression` is an immutable tree built by ``col('a')``, ``lit(1)``, operators
(``col('a') + 1``, ``col('a') == 3``, ``&``, ``|``, ``~``), properties (``col('id').count``) and
methods (``.alias('x')``, ``.cast(DataTypes.BIGINT())``, ``.json_value('$.name', ...)``).
:func:`resolve` binds it to a schema (column names become indices, types are derived by Flink's
rules) and gives a :class:`Resolved`, which the tasks evaluate (:meth:`Resolved.eval`). Functions
follow SQL's null rule: a null argument gives null (``AND``/``OR`` use three-valued logic).
"""
from __future__ import annotations

import datetime
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from millstream.table.date_format import compile_pattern, date_format
from millstream.table.types import INT_BITS, DataType, DataTypes, infer_type, is_integer, is_numeric, wider, wrap_int

__all__ = ["Expression", "Resolved", "resolve", "as_expression", "AGGREGATES", "TableException", "ValidationException"]


class TableException(Exception):
    """PyFlink's ``TableException``: an error of the Table API or SQL."""


class ValidationException(TableException):
    """A program the planner rejects before anything runs (unknown column, wrong types)."""


AGGREGATES = ("count", "sum", "sum0", "min", "max", "avg")


class Expression:
    """One node of an expression tree (immutable)."""

    __slots__ = ("kind", "args", "value", "dtype")

    def __init__(self, kind: str, args: Sequence["Expression"] = (), value: Any = None, dtype: DataType | None = None):
        self.kind = kind
        self.args = tuple(args)
        self.value = value
        self.dtype = dtype

    # -- the Python DSL -------------------------------------------------------------------------
    def _call(self, name: str, *others: Any) -> "Expression":
        return Expression("call", (self, *map(as_expression, others)), name)

    def __add__(self, o: Any) -> "Expression": return self._call("plus", o)
    def __radd__(self, o: Any) -> "Expression": return as_expression(o)._call("plus", self)
    def __sub__(self, o: Any) -> "Expression": return self._call("minus", o)
    def __rsub__(self, o: Any) -> "Expression": return as_expression(o)._call("minus", self)
    def __mul__(self, o: Any) -> "Expression": return self._call("times", o)
    def __rmul__(self, o: Any) -> "Expression": return as_expression(o)._call("times", self)
    def __truediv__(self, o: Any) -> "Expression": return self._call("divide", o)
    def __rtruediv__(self, o: Any) -> "Expression": return as_expression(o)._call("divide", self)
    def __mod__(self, o: Any) -> "Expression": return self._call("mod", o)
    def __neg__(self) -> "Expression": return self._call("negate")
    def __eq__(self, o: Any) -> "Expression": return self._call("equals", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> "Expression": return self._call("not_equals", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> "Expression": return self._call("less_than", o)
    def __le__(self, o: Any) -> "Expression": return self._call("less_than_or_equal", o)
    def __gt__(self, o: Any) -> "Expression": return self._call("greater_than", o)
    def __ge__(self, o: Any) -> "Expression": return self._call("greater_than_or_equal", o)
    def __and__(self, o: Any) -> "Expression": return self._call("and", o)
    def __rand__(self, o: Any) -> "Expression": return as_expression(o)._call("and", self)
    def __or__(self, o: Any) -> "Expression": return self._call("or", o)
    def __ror__(self, o: Any) -> "Expression": return as_expression(o)._call("or", self)
    # PyFlink's ~expr is isNotTrue (TRUE for NULL), not SQL's three-valued NOT
    def __invert__(self) -> "Expression": return self._call("is_not_true")
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("an Expression has no truth value: combine conditions with &, | and ~, not and/or/not")

    def _agg(self, name: str) -> "Expression":
        return Expression("agg", (self,), name)

    @property
    def distinct(self) -> "Expression":
        """PyFlink's ``col('a').count.distinct``: the aggregate sees each distinct non-NULL value
        once (SQL's ``COUNT(DISTINCT a)``)."""
        if self.kind != "agg" or self.args[0].kind == "distinct":
            raise ValidationException(f"distinct applies to an aggregate (col('a').count.distinct), got {self}")
        return Expression("agg", (Expression("distinct", self.args),), self.value)

    count = property(lambda self: self._agg("count"))
    sum = property(lambda self: self._agg("sum"))
    sum0 = property(lambda self: self._agg("sum0"))
    min = property(lambda self: self._agg("min"))
    max = property(lambda self: self._agg("max"))
    avg = property(lambda self: self._agg("avg"))
    is_null = property(lambda self: self._call("is_null"))
    is_not_null = property(lambda self: self._call("is_not_null"))
    is_true = property(lambda self: self._call("is_true"))
    is_false = property(lambda self: self._call("is_false"))
    is_not_true = property(lambda self: self._call("is_not_true"))
    is_not_false = property(lambda self: self._call("is_not_false"))
    upper_case = property(lambda self: self._call("upper"))
    lower_case = property(lambda self: self._call("lower"))
    char_length = property(lambda self: self._call("char_length"))
    abs = property(lambda self: self._call("abs"))
    asc = property(lambda self: Expression("order", (self,), "asc"))
    desc = property(lambda self: Expression("order", (self,), "desc"))

    # intervals (``lit(5).seconds``) and a group window's properties (``col('w').start``)
    def _interval(self, unit: str) -> "Expression":
        return Expression("interval", (self,), unit)

    milli = millis = property(lambda self: self._interval("MILLISECOND"))
    second = seconds = property(lambda self: self._interval("SECOND"))
    minute = minutes = property(lambda self: self._interval("MINUTE"))
    hour = hours = property(lambda self: self._interval("HOUR"))
    day = days = property(lambda self: self._interval("DAY"))
    start = property(lambda self: Expression("window_property", (self,), "start"))
    end = property(lambda self: Expression("window_property", (self,), "end"))
    rowtime = property(lambda self: Expression("window_property", (self,), "rowtime"))
    proctime = property(lambda self: Expression("window_property", (self,), "proctime"))

    def over(self, alias: Any) -> "Expression":
        """An aggregate over an over window (``col('price').max.over(col('w'))``)."""
        return Expression("over", (self, as_expression(alias)))

    def alias(self, name: str, *extra_names: str) -> "Expression":
        return Expression("alias", (self,), (name, *extra_names))

    def cast(self, data_type: DataType) -> "Expression":
        return Expression("cast", (self,), dtype=data_type)

    def json_value(self, path: str, returning_type: DataType | None = None, *args: Any) -> "Expression":
        return Expression("call", (self, as_expression(path)), "json_value", returning_type or DataTypes.STRING())

    def like(self, pattern: Any) -> "Expression": return self._call("like", pattern)
    def substring(self, begin_index: Any, length: Any = None) -> "Expression":
        return self._call("substring", begin_index) if length is None else self._call("substring", begin_index, length)
    def trim(self) -> "Expression": return self._call("trim")
    def in_(self, *values: Any) -> "Expression": return self._call("in", *values)
    def between(self, lower: Any, upper: Any) -> "Expression": return self._call("between", lower, upper)

    def then(self, if_true: Any, if_false: Any) -> "Expression":
        """PyFlink's ternary: ``if_true`` where this condition is TRUE, else ``if_false`` (a null
        condition counts as not true): SQL's ``CASE WHEN cond THEN a ELSE b END``."""
        return self._call("case", if_true, if_false)

    def __str__(self) -> str:
        if self.kind == "col":
            return str(self.value)
        if self.kind == "lit":
            return repr(self.value) if not isinstance(self.value, str) else f"'{self.value}'"
        if self.kind == "alias":
            return f"{self.args[0]} AS {', '.join(self.value)}"
        if self.kind == "cast":
            return f"CAST({self.args[0]} AS {self.dtype})"
        if self.kind == "udf":
            return f"{self.value.name}({', '.join(map(str, self.args))})"
        if self.kind == "interval":
            return f"INTERVAL {self.args[0]} {self.value}"
        if self.kind == "window_property":
            return f"{self.value}({self.args[0]})"
        if self.kind == "over":
            return f"{self.args[0]} OVER {self.args[1]}"
        if self.kind == "distinct":
            return f"DISTINCT {self.args[0]}"
        name = self.value.upper() if isinstance(self.value, str) else str(self.value)
        return f"{name}({', '.join(map(str, self.args))})"

    __repr__ = __str__


def as_expression(value: Any) -> Expression:
    """An expression for ``value``: itself, or a literal (``concat(col('a'), '_')``)."""
    if isinstance(value, Expression):
        return value
    return Expression("lit", value=value, dtype=literal_type(value))


def literal_type(value: Any) -> DataType:
    """Flink's literal types: an int literal is INT (BIGINT when it needs 64 bits), NOT NULL."""
    if isinstance(value, bool):
        return DataTypes.BOOLEAN(False)
    if isinstance(value, int):
        return DataTypes.INT(False) if -2**31 <= value < 2**31 else DataTypes.BIGINT(False)
    if isinstance(value, str):
        return DataTypes.CHAR(len(value), False) if value else DataTypes.STRING(False)
    if value is None:
        return DataTypes.NULL()
    if isinstance(value, datetime.timedelta):
        return DataTypes.INTERVAL_MILLIS(False)
    return infer_type(value).not_null()


# -- resolution ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """An expression bound to a schema: ``ref`` (column index), ``lit``, ``call``, ``cast``, ``udf``."""

    kind: str
    dtype: DataType
    args: tuple["Resolved", ...] = ()
    value: Any = None
    text: str = ""  # how Flink's plan prints it

    def eval(self, row: Sequence[Any]) -> Any:
        k = self.kind
        if k == "ref":
            return row[self.value]
        if k == "lit":
            return self.value
        if k == "cast":
            return cast_value(self.args[0].eval(row), self.dtype)
        if k == "udf":
            return self.value.eval(*[a.eval(row) for a in self.args])
        if self.value in _LOGIC:
            return _LOGIC[self.value](self.args, row)
        if self.value == "case":
            branch = _case(self.args, row)
            v = branch.eval(row)  # in the result type: an INT branch of a DOUBLE CASE gives a double
            return v if v is None or branch.dtype.root == self.dtype.root else cast_value(v, self.dtype)
        vals = [a.eval(row) for a in self.args]
        if any(v is None for v in vals) and self.value not in _NULL_AWARE:
            return None
        if self.value == "json_value":
            return _json_value(vals[0], vals[1], self.dtype)
        out = _FUNCTIONS[self.value][0](*vals)
        if self.value in _WRAPPING and type(out) is int:  # Java's fixed-width integers (Flink's codegen)
            bits = INT_BITS.get(self.dtype.root)
            if bits is not None:
                return wrap_int(out, bits)
        return out

    def __str__(self) -> str:
        return self.text


def _and(args: tuple[Resolved, ...], row: Sequence[Any]) -> Any:
    a = args[0].eval(row)
    if a is False:
        return False
    b = args[1].eval(row)
    if b is False:
        return False
    return None if a is None or b is None else True


def _or(args: tuple[Resolved, ...], row: Sequence[Any]) -> Any:
    a = args[0].eval(row)
    if a is True:
        return True
    b = args[1].eval(row)
    if b is True:
        return True
    return None if a is None or b is None else False


def _case(args: tuple[Resolved, ...], row: Sequence[Any]) -> Resolved:
    """CASE's chosen branch: args are (condition, result)* then the ELSE result; a null condition
    is not true. Only the chosen branch is evaluated (one that would fail on this row does not)."""
    for i in range(0, len(args) - 1, 2):
        if args[i].eval(row) is True:
            return args[i + 1]
    return args[-1]


_LOGIC: dict[str, Callable[[tuple[Resolved, ...], Sequence[Any]], Any]] = {"and": _and, "or": _or}


def common_type(types: Sequence[DataType]) -> DataType:
    """The type of CASE's branches (Flink's least restrictive type): numbers widen, CHARs of one
    length stay CHAR(n) and text of different lengths is VARCHAR of the longest (no blank padding,
    FLINK-9559); a NULL branch (or no ELSE) makes it nullable; other types must be equal."""
    known = [t for t in types if t.root != "NULL"]
    nullable = len(known) < len(types) or any(t.nullable for t in known)
    if not known:
        return DataTypes.NULL()
    first = known[0]
    if all(is_numeric(t) for t in known):
        out = first
        for t in known[1:]:
            out = wider(out, t)
    elif all(t.root in ("CHAR", "VARCHAR") for t in known):
        lengths = {t.length for t in known}
        if all(t.root == "CHAR" for t in known) and len(lengths) == 1:
            out = first
        else:
            out = DataTypes.VARCHAR(max(t.length if t.length is not None else 2147483647 for t in known))
    elif all(t.root == first.root and t.length == first.length and t.scale == first.scale for t in known):
        out = first.as_time_attr(None)
    else:
        raise TypeError(f"CASE branches have no common type: {', '.join(str(t) for t in known)}")
    return out.nullable_() if nullable else out.not_null()


def _case_type(ts: list[DataType]) -> DataType:
    for c in ts[0:-1:2]:
        if c.root not in ("BOOLEAN", "NULL"):
            raise TypeError(f"a CASE condition must be BOOLEAN, got {c}")
    return common_type([*ts[1:-1:2], ts[-1]])


def _int_div(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("/ by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    import math
    return math.fmod(a, b)


def _like(s: str, pattern: str) -> bool:
    import re
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, s, re.S) is not None


def _substring(s: str, begin: int, length: int | None = None) -> str:
    start = max(begin - 1, 0) if begin > 0 else max(len(s) + begin, 0) if begin < 0 else 0
    return s[start:] if length is None else s[start:start + length]


def _json_value(doc: Any, path: str, returning: DataType) -> Any:
    """JSON_VALUE: the scalar at a ``$.a.b`` path, null when absent or not a scalar (Flink's
    defaults NULL ON EMPTY, NULL ON ERROR)."""
    if doc is None or path is None:
        return None
    try:
        node = json.loads(doc)
    except ValueError:
        return None
    if not path.startswith("$"):
        return None
    import re
    for name, index in re.findall(r"\.([A-Za-z_][\w]*)|\[(\d+)\]", path[1:]):
        if name:
            if not isinstance(node, dict) or name not in node:
                return None
            node = node[name]
        else:
            if not isinstance(node, list) or int(index) >= len(node):
                return None
            node = node[int(index)]
    if isinstance(node, (dict, list)) or node is None:
        return None
    return cast_value(node, returning)


def _bool_text(v: Any) -> Any:
    return ("TRUE" if v else "FALSE") if isinstance(v, bool) else v


def cast_value(v: Any, t: DataType) -> Any:
    """CAST with Flink's rules for the common types (a failed cast raises, as Flink's CAST does)."""
    if v is None:
        return None
    r = t.root
    try:
        if is_integer(t):
            bits = INT_BITS[r]
            if isinstance(v, str):  # Flink's CAST of text to an integer fails beyond the type's range
                n = int(v.strip())
                if wrap_int(n, bits) != n:
                    raise ValueError(f"out of the range of {r}")
                return n
            if isinstance(v, float):  # Java's (int) / (long) of a double: saturates, NaN is 0
                if v != v:
                    return 0
                half = 1 << (bits - 1)
                return max(-half, min(half - 1, int(v))) if v not in (float("inf"), float("-inf")) else \
                    (half - 1 if v > 0 else -half)
            return wrap_int(int(v), bits)  # an integer (or DECIMAL) narrows as Java's cast
        if r == "FLOAT":
            return to_float32(float(v))
        if r == "DOUBLE":
            return float(v)
        if r in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            return _to_timestamp(v, t.length if t.length is not None else 6)
        if r == "DECIMAL":
            import decimal
            return decimal.Decimal(str(v)).quantize(decimal.Decimal(1).scaleb(-(t.scale or 0)))
        if r in ("VARCHAR", "CHAR"):
            s = ("TRUE" if v else "FALSE") if isinstance(v, bool) else str(v)
            return s if r == "VARCHAR" or t.length is None else s[:t.length].ljust(t.length)
        if r == "BOOLEAN":
            if isinstance(v, str):
                lowered = v.strip().lower()
                if lowered in ("true", "false"):
                    return lowered == "true"
                raise ValueError(v)
            return bool(v)
    except (ValueError, ArithmeticError) as e:
        raise TableException(f"Cannot cast {v!r} to {t}: {e}") from None
    return v


def to_float32(v: float) -> float:
    """``v`` rounded to a FLOAT (single precision), as Flink holds a FLOAT column's values."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _to_timestamp(v: Any, precision: int) -> datetime.datetime:
    """A TIMESTAMP(p) value (naive datetime, UTC) from a datetime, an Instant or SQL text."""
    if isinstance(v, datetime.datetime):
        ts = v if v.tzinfo is None else v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    elif hasattr(v, "to_epoch_milli") and hasattr(v, "nanos"):  # millstream.common.time.Instant
        ts = EPOCH + datetime.timedelta(seconds=v.seconds, microseconds=v.nanos // 1000)
    elif isinstance(v, str):
        ts = datetime.datetime.fromisoformat(v.strip().replace("T", " "))
    elif isinstance(v, datetime.date):
        ts = datetime.datetime(v.year, v.month, v.day)
    else:
        raise ValueError(f"{type(v).__name__} is not a timestamp")
    if precision < 6:
        unit = 10 ** (6 - precision)
        ts = ts.replace(microsecond=ts.microsecond - ts.microsecond % unit)
    return ts


def _temporal_plus(ts: list[DataType]) -> DataType:
    """The type of ``+``/``-``: a timestamp plus or minus an interval stays a timestamp (without
    the time attribute mark); numbers widen; ``+`` of strings concatenates."""
    if ts[0].root in ("TIMESTAMP", "TIMESTAMP_LTZ", "DATE"):
        return ts[0].as_time_attr(None)
    if ts[0].root == "INTERVAL" and ts[1].root in ("TIMESTAMP", "TIMESTAMP_LTZ", "DATE"):
        return ts[1].as_time_attr(None)
    return wider(ts[0], ts[1]) if is_numeric(ts[0]) else DataTypes.STRING()


def _date_format_type(ts: list[DataType]) -> DataType:
    if len(ts) != 2 or ts[0].root not in ("TIMESTAMP", "TIMESTAMP_LTZ", "DATE", "VARCHAR", "CHAR", "NULL") \
            or ts[1].root not in ("VARCHAR", "CHAR", "NULL"):
        raise TypeError("DATE_FORMAT takes (TIMESTAMP or its STRING, STRING format), got "
                        f"({', '.join(str(t) for t in ts)})")
    return DataTypes.STRING()


def _date_format(value: Any, pattern: str) -> str:
    try:
        return date_format(value, pattern)
    except ValueError as e:
        raise TableException(str(e)) from None


def _proctime() -> datetime.datetime:
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


# name -> (implementation, result type from the argument types)
_FUNCTIONS: dict[str, tuple[Callable[..., Any], Callable[[list[DataType]], DataType]]] = {
    "plus": (lambda a, b: a + b, _temporal_plus),
    "minus": (lambda a, b: a - b, _temporal_plus),
    "proctime": (_proctime, lambda ts: DataTypes.TIMESTAMP_LTZ(3, False).as_time_attr("PROCTIME")),
    "to_timestamp_ltz": (lambda v, p=3: from_epoch_millis(v if p == 3 else v * 1000),
                         lambda ts: DataTypes.TIMESTAMP_LTZ(3)),
    "times": (lambda a, b: a * b, lambda ts: wider(ts[0], ts[1])),
    "divide": (_int_div, lambda ts: wider(ts[0], ts[1])),
    "mod": (_mod, lambda ts: ts[1]),
    "negate": (lambda a: -a, lambda ts: ts[0]),
    "abs": (abs, lambda ts: ts[0]),
    "equals": (lambda a, b: a == b, lambda ts: DataTypes.BOOLEAN()),
    "not_equals": (lambda a, b: a != b, lambda ts: DataTypes.BOOLEAN()),
    "less_than": (lambda a, b: a < b, lambda ts: DataTypes.BOOLEAN()),
    "less_than_or_equal": (lambda a, b: a <= b, lambda ts: DataTypes.BOOLEAN()),
    "greater_than": (lambda a, b: a > b, lambda ts: DataTypes.BOOLEAN()),
    "greater_than_or_equal": (lambda a, b: a >= b, lambda ts: DataTypes.BOOLEAN()),
    "not": (lambda a: not a, lambda ts: DataTypes.BOOLEAN()),
    "and": (lambda a, b: a and b, lambda ts: DataTypes.BOOLEAN()),
    "or": (lambda a, b: a or b, lambda ts: DataTypes.BOOLEAN()),
    "is_null": (lambda a: a is None, lambda ts: DataTypes.BOOLEAN(False)),
    "is_not_null": (lambda a: a is not None, lambda ts: DataTypes.BOOLEAN(False)),
    "is_true": (lambda a: a is True, lambda ts: DataTypes.BOOLEAN(False)),
    "is_false": (lambda a: a is False, lambda ts: DataTypes.BOOLEAN(False)),
    "is_not_true": (lambda a: a is not True, lambda ts: DataTypes.BOOLEAN(False)),
    "is_not_false": (lambda a: a is not False, lambda ts: DataTypes.BOOLEAN(False)),
    "upper": (lambda s: s.upper(), lambda ts: DataTypes.STRING()),
    "lower": (lambda s: s.lower(), lambda ts: DataTypes.STRING()),
    "char_length": (len, lambda ts: DataTypes.INT()),
    "trim": (lambda s: s.strip(" "), lambda ts: DataTypes.STRING()),
    "concat": (lambda *a: "".join(map(str, map(_bool_text, a))), lambda ts: DataTypes.STRING()),
    "like": (_like, lambda ts: DataTypes.BOOLEAN()),
    "substring": (_substring, lambda ts: DataTypes.STRING()),
    "in": (lambda a, *vs: a in vs, lambda ts: DataTypes.BOOLEAN()),
    "between": (lambda a, lo, hi: lo <= a <= hi, lambda ts: DataTypes.BOOLEAN()),
    "coalesce": (lambda *a: next((x for x in a if x is not None), None), lambda ts: ts[0]),
    "json_value": (_json_value, lambda ts: DataTypes.STRING()),
    "case": (lambda *a: None, _case_type),  # evaluated by _case (lazily)
    "date_format": (_date_format, _date_format_type),
}
# integer results that wrap at their type's width (INT: 32 bits, BIGINT: 64 bits), as in Java
_WRAPPING = {"plus", "minus", "times", "divide", "mod", "negate", "abs"}
_NULL_AWARE = {"proctime", "is_null", "is_not_null", "is_true", "is_false", "is_not_true", "is_not_false", "coalesce"}
_SQL_TEXT = {"plus": "+", "minus": "-", "times": "*", "divide": "/", "mod": "MOD", "equals": "=", "not_equals": "<>",
             "less_than": "<", "less_than_or_equal": "<=", "greater_than": ">", "greater_than_or_equal": ">=",
             "and": "AND", "or": "OR"}


def builtin_names() -> frozenset[str]:
    return frozenset(_FUNCTIONS)


def text_of(kind: str, value: Any, args: Sequence[Resolved], dtype: DataType | None) -> str:
    """How Flink's plans print a resolved call (``id + 1``, ``CAST(tel AS BIGINT)``, ``UPPER(w)``)."""
    if kind == "cast":
        return f"CAST({args[0]} AS {dtype})"
    if kind == "udf":
        return f"{value.name}({', '.join(map(str, args))})"
    op = _SQL_TEXT.get(value)
    if op is not None and len(args) == 2:
        return f"{args[0]} {op} {args[1]}" if op != "MOD" else f"MOD({args[0]}, {args[1]})"
    return f"{str(value).upper()}({', '.join(map(str, args))})"


def resolve(expr: Expression, columns: Sequence[tuple[str, DataType]], where: str = "expression") -> Resolved:
    """Binds ``expr`` to ``columns`` (name, type). Aggregates and aliases are not allowed here:
    the planner takes them apart first."""
    names = [c[0] for c in columns]
    k = expr.kind
    if k == "col":
        if expr.value not in names:
            raise ValidationException(f"Cannot resolve field [{expr.value}], input field list:[{', '.join(names)}].")
        i = names.index(expr.value)
        return Resolved("ref", columns[i][1], value=i, text=expr.value)
    if k == "lit":
        text = f"'{expr.value}'" if isinstance(expr.value, str) else interval_text(expr.value) \
            if isinstance(expr.value, datetime.timedelta) else repr(expr.value)
        return Resolved("lit", expr.dtype or literal_type(expr.value), value=expr.value, text=text)
    if k == "cast":
        inner = resolve(expr.args[0], columns, where)
        return Resolved("cast", expr.dtype, (inner,), text=text_of("cast", None, (inner,), expr.dtype))  # type: ignore[arg-type]
    if k == "udf":
        args = tuple(resolve(a, columns, where) for a in expr.args)
        return Resolved("udf", expr.value.result_type(), args, value=expr.value,
                        text=text_of("udf", expr.value, args, None))
    if k == "call":
        if expr.value not in _FUNCTIONS:
            raise ValidationException(f"No match found for function signature {expr.value}()")
        args = tuple(resolve(a, columns, where) for a in expr.args)
        if expr.value == "date_format" and len(args) == 2 and args[1].kind == "lit" and isinstance(args[1].value, str):
            try:
                compile_pattern(args[1].value)  # a bad literal pattern fails before anything runs
            except ValueError as e:
                raise ValidationException(str(e)) from None
        if expr.value == "json_value":
            dtype = expr.dtype or DataTypes.STRING()
        else:
            try:
                dtype = _FUNCTIONS[expr.value][1]([a.dtype for a in args])
            except TypeError as e:
                raise ValidationException(f"Invalid arguments for {expr.value.upper()}: {e}") from None
        return Resolved("call", dtype, args, value=expr.value, text=text_of("call", expr.value, args, dtype))
    if k == "interval":
        n = expr.args[0]
        if n.kind != "lit" or not isinstance(n.value, int) or isinstance(n.value, bool):
            raise ValidationException(f"An interval needs an integer literal (lit(5).seconds), got {expr}")
        delta = datetime.timedelta(milliseconds=n.value * INTERVAL_UNITS_MS[expr.value])
        return Resolved("lit", DataTypes.INTERVAL_MILLIS(False), value=delta, text=interval_text(delta))
    if k == "window_property":
        raise ValidationException(f"The window property {expr} is only allowed in the select of a window "
                                  "aggregation (table.window(...).group_by(...).select(...))")
    if k == "over":
        raise ValidationException(f"{expr} is only allowed in the select of Table.over_window")
    if k == "agg":
        raise ValidationException(f"Aggregate {expr} is only allowed after group_by or in a global aggregation "
                                  f"(Table.select with only aggregates), not in {where}")
    if k == "alias":
        raise ValidationException(f"Alias {expr} is not allowed in {where}")
    raise ValidationException(f"Unsupported expression {expr} in {where}")


INTERVAL_UNITS_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}


def interval_text(delta: datetime.timedelta) -> str:
    """How Flink's plans print an interval literal: ``3000:INTERVAL SECOND``."""
    return f"{delta // datetime.timedelta(milliseconds=1)}:INTERVAL SECOND"


EPOCH = datetime.datetime(1970, 1, 1)


def epoch_millis(ts: datetime.datetime) -> int:
    """A TIMESTAMP / TIMESTAMP_LTZ value (a naive datetime in UTC, Millstream's session time zone)
    as milliseconds since the epoch: a row's event time."""
    if ts.tzinfo is not None:
        ts = ts.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return (ts - EPOCH) // datetime.timedelta(milliseconds=1)


def from_epoch_millis(millis: int) -> datetime.datetime:
    return EPOCH + datetime.timedelta(milliseconds=millis)


def output_name(expr: Expression) -> str | None:
    """The column name an expression gets in a projection: its alias, its column; else none
    (Flink then names it ``EXPR$n``)."""
    if expr.kind == "alias":
        return expr.value[0]
    if expr.kind == "col":
        return expr.value
    return None


def contains_aggregate(expr: Expression) -> bool:
    return expr.kind == "agg" or is_udaf_call(expr) or any(contains_aggregate(a) for a in expr.args)


def is_udaf_call(expr: Expression) -> bool:
    """A call of an aggregate function usable among a select's aggregates (a pandas UDAF)."""
    return expr.kind == "udf" and getattr(expr.value, "aggregate_in_select", False)
