"""SQL on the Table API: statements parsed with sqlglot (its Hive dialect reads Flink's backquoted
identifiers), translated to Table operations, so SQL and the Table API share one planner.

Supported: ``SELECT [DISTINCT] ... FROM t [JOIN u ON ...] [, LATERAL TABLE(f(...)) AS x(a, b)]
[WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT]`` with Flink's built-in functions (see
``_FUNCTIONS``) and COUNT/SUM/MIN/MAX/AVG; ``CREATE [TEMPORARY] TABLE t (...) WITH (...)``; ``INSERT
INTO t SELECT ...``. A syntax error names the line, column and token as Flink's parser does; a
construct Millstream does not translate yet says which.
"""
from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Any, cast

import sqlglot
from sqlglot import exp
from sqlglot.dialects.hive import Hive
from sqlglot.tokens import TokenType

from millstream.table import plan as p
from millstream.table.expression import Expression, TableException, ValidationException
from millstream.table.expressions import UNBOUNDED_RANGE, UNBOUNDED_ROW, col, lit, row_interval
from millstream.table.table import Table
from millstream.table.table_descriptor import TableDescriptor
from millstream.table.types import DataTypes, Schema, parse_type
from millstream.table.window import Over, WindowSpec

if TYPE_CHECKING:
    from millstream.table.table_environment import TableEnvironment

__all__ = ["SqlParserException", "parse", "query", "create_table", "insert_target"]

DIALECT = "hive"


class _Dialect(Hive):
    """Hive's dialect reading Flink's ``BYTES`` (VARBINARY(2147483647)) as a type and, as Flink's
    standard SQL, ``''`` in a string literal as a quote (Hive reads 'a''b' as two literals)."""

    class Tokenizer(Hive.Tokenizer):
        KEYWORDS = {**Hive.Tokenizer.KEYWORDS, "BYTES": TokenType.VARBINARY}
        STRING_ESCAPES = ["'", *Hive.Tokenizer.STRING_ESCAPES]


# sqlglot's Hive dialect reads DATE_FORMAT as Hive's (and rewrites its pattern): renamed to a name
# of the same length that stays a plain function call (error columns stay right), named back below.
_DATE_FORMAT, _DATE_FORMAT_ALIAS = re.compile(r"\bDATE_FORMAT(?=\s*\()", re.I), "DATEFORMAT_"


def _rename_date_format(statement: str) -> str:
    parts = statement.split("'")  # outside string literals only (even parts)
    return "'".join(_DATE_FORMAT.sub(_DATE_FORMAT_ALIAS, x) if i % 2 == 0 else x for i, x in enumerate(parts))


class SqlParserException(TableException):
    """A statement that does not parse: names the line, column and token."""


def parse(statement: str, known_names: list[str]) -> Any:
    # PyFlink's names of unregistered tables (str(table)) contain '$': quote them for the parser.
    for name in known_names:
        if "$" in name:
            statement = re.sub(r"(?<![`\w$])" + re.escape(name) + r"(?![\w$`])", f"`{name}`", statement)
    statement, watermarks = _take_watermarks(statement)
    statement, tvfs = _take_window_tvfs(statement)
    statement = _rename_date_format(statement)
    try:
        parsed = sqlglot.parse(statement, read=_Dialect)
    except sqlglot.errors.ParseError as e:
        err = e.errors[0] if e.errors else {}
        token = err.get("highlight") or ""
        column = int(err.get("col", 0)) - len(token) + 1
        raise SqlParserException(f'SQL parse failed. Encountered "{token}" at line {err.get("line")}, column '
                                 f'{column}.') from None
    statements = [s for s in parsed if s is not None]
    if len(statements) != 1:
        raise SqlParserException(f"expected one SQL statement, got {len(statements)}")
    statements[0].meta["watermarks"] = watermarks
    for node in statements[0].find_all(exp.Table):
        if node.name in tvfs:
            node.meta["window_tvf"] = tvfs[node.name]
    return statements[0]


_TVF = re.compile(r"\bTABLE\s*\(\s*(TUMBLE|HOP|CUMULATE|SESSION)\s*\(", re.I)


def _top_level(text: str, i: int, stops: str) -> int:
    """The index of the first character in ``stops`` from ``i`` on that is outside quotes and
    outside parentheses opened after ``i``; len(text) when there is none."""
    depth, quoted = 0, False
    while i < len(text):
        ch = text[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted:
            if depth == 0 and ch in stops:
                return i
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
        i += 1
    return len(text)


def _closing(text: str, i: int) -> int:
    """The index of the parenthesis closing the one opened just before ``i``."""
    end = _top_level(text, i, ")")
    if end == len(text):
        raise SqlParserException("SQL parse failed. Encountered \"<EOF>\": a window table function is not closed")
    return end


def _split_args(text: str) -> list[str]:
    args, start = [], 0
    while True:
        end = _top_level(text, start, ",")
        args.append(text[start:end].strip())
        if end == len(text):
            return args
        start = end + 1


def _take_window_tvfs(statement: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND))`` (and HOP, CUMULATE,
    SESSION; positional or named ``DATA =>`` arguments) replaced by a placeholder table name the
    parser reads, padded to the same length (error positions stay right); returns what each one says."""
    found: dict[str, dict[str, Any]] = {}
    while True:
        m = _TVF.search(statement)
        if m is None:
            return statement, found
        inner_end = _closing(statement, m.end())
        outer_end = _closing(statement, inner_end + 1)
        args = _split_args(statement[m.end():inner_end])
        named = {}
        positional = []
        for a in args:
            nm = re.match(r"^(\w+)\s*=>\s*(.*)$", a, re.S)
            if nm:
                named[nm.group(1).upper()] = nm.group(2).strip()
            else:
                positional.append(a)
        kind = m.group(1).upper()
        order = {"TUMBLE": ["DATA", "TIMECOL", "SIZE", "OFFSET"], "HOP": ["DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"],
                 "CUMULATE": ["DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"], "SESSION": ["DATA", "TIMECOL", "GAP"]}[kind]
        if len(positional) > len(order):
            raise SqlParserException(f"SQL parse failed: {kind} takes at most {len(order)} arguments "
                                     f"({', '.join(order)}), got {len(positional)}"
                                     + ("; SESSION takes no OFFSET" if kind == "SESSION" else ""))
        values = dict(zip(order, positional))
        values.update(named)
        data = re.match(r"^TABLE\s+`?([\w$]+)`?(?:\s+PARTITION\s+BY\s+(.+))?$", values.get("DATA", ""), re.I | re.S)
        timecol = re.match(r"^DESCRIPTOR\s*\(\s*`?(\w+)`?\s*\)$", values.get("TIMECOL", ""), re.I)
        if data is None or timecol is None:
            raise SqlParserException(f"SQL parse failed in {kind}: expected {kind}(TABLE t, DESCRIPTOR(time_col), ...), "
                                     f"got {kind}({', '.join(args)})")
        if "OFFSET" in values and kind == "SESSION":
            raise TableException("SESSION takes no OFFSET (Flink's offset is for TUMBLE, HOP and CUMULATE)")
        placeholder = f"__window_tvf_{len(found)}__"
        found[placeholder] = {"kind": kind, "table": data.group(1), "time_col": timecol.group(1),
                              "intervals": {k: values[k] for k in ("SIZE", "SLIDE", "STEP", "GAP", "OFFSET") if k in values}}
        span = outer_end + 1 - m.start()
        statement = statement[:m.start()] + placeholder.ljust(span) + statement[outer_end + 1:]


_WATERMARK = re.compile(r",\s*WATERMARK\s+FOR\s+`?(\w+)`?\s+AS\s+", re.I)


def _take_watermarks(statement: str) -> tuple[str, list[tuple[str, str]]]:
    """CREATE TABLE's ``WATERMARK FOR col AS expr`` clauses (sqlglot does not read them): blanked
    out of the statement (so the parser's line and column numbers stay right), returned as
    (column, expression text)."""
    found: list[tuple[str, str]] = []
    while True:
        m = _WATERMARK.search(statement)
        if m is None:
            return statement, found
        end = _top_level(statement, m.end(), "),")  # the clause ends at the column list's , or )
        found.append((m.group(1), statement[m.end():end].strip()))
        statement = statement[:m.start()] + re.sub(r"[^\n]", " ", statement[m.start():end]) + statement[end:]


def _unsupported(node: exp.Expression) -> TableException:
    return TableException(f"Unsupported SQL construct {type(node).__name__}: {node.sql(dialect=DIALECT)[:80]}")


# -- expressions ----------------------------------------------------------------------------------

_BINARY: dict[type, str] = {exp.Add: "plus", exp.Sub: "minus", exp.Mul: "times", exp.Div: "divide", exp.Mod: "mod",
           exp.EQ: "equals", exp.NEQ: "not_equals", exp.GT: "greater_than", exp.GTE: "greater_than_or_equal",
           exp.LT: "less_than", exp.LTE: "less_than_or_equal", exp.And: "and", exp.Or: "or", exp.Like: "like"}
_AGGS: dict[type, str] = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}
_UNARY: dict[type, str] = {exp.Upper: "upper", exp.Lower: "lower", exp.Length: "char_length", exp.Trim: "trim", exp.Abs: "abs",
          exp.Neg: "negate", exp.Not: "not"}


def expression(node: exp.Expression, t_env: "TableEnvironment") -> Expression:
    """The Table API expression of a SQL expression."""
    if isinstance(node, exp.Paren):
        return expression(node.this, t_env)
    if isinstance(node, exp.Star):
        return col("*")
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            return col("*")
        return col(node.name)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return lit(node.this)
        text = node.this
        return lit(int(text)) if re.fullmatch(r"-?\d+", text) else lit(float(text))
    if isinstance(node, exp.Boolean):
        return lit(bool(node.this))
    if isinstance(node, exp.Null):
        return lit(None)
    if isinstance(node, exp.Alias):
        return expression(node.this, t_env).alias(node.alias)
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return expression(node.this, t_env).cast(_cast_type(node.to))
    if isinstance(node, exp.Interval):
        return lit(interval_of(node))
    name = _BINARY.get(type(node))
    if name is not None:
        call = Expression("call", (expression(node.this, t_env), expression(node.expression, t_env)), name)
        return Expression("call", (call,), "not") if node.args.get("negate") else call  # sqlglot's NOT LIKE
    name = _UNARY.get(type(node))
    if name is not None:
        return Expression("call", (expression(node.this, t_env),), name)
    name = _AGGS.get(type(node))
    if name is not None:
        arg = node.this
        if isinstance(arg, exp.Distinct):  # COUNT(DISTINCT a): one argument only, as Flink's
            if len(arg.expressions) != 1:
                raise _unsupported(node)
            return Expression("agg", (Expression("distinct", (expression(arg.expressions[0], t_env),)),), name)
        inner = lit(1) if isinstance(arg, exp.Star) or arg is None else expression(arg, t_env)
        return Expression("agg", (inner,), name)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return Expression("call", (expression(node.this, t_env),), "is_null")
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean):  # IS [NOT] TRUE / FALSE
        # NOT over IS TRUE is IS NOT TRUE, as IS TRUE is never NULL
        return Expression("call", (expression(node.this, t_env),), "is_true" if node.expression.this else "is_false")
    if isinstance(node, exp.DPipe):
        return Expression("call", (expression(node.this, t_env), expression(node.expression, t_env)), "concat")
    if isinstance(node, exp.Concat):
        return Expression("call", tuple(expression(a, t_env) for a in node.expressions), "concat")
    if isinstance(node, exp.Coalesce):
        return Expression("call", tuple(expression(a, t_env) for a in [node.this, *node.expressions]), "coalesce")
    if isinstance(node, exp.In):
        return Expression("call", (expression(node.this, t_env), *(expression(a, t_env) for a in node.expressions)), "in")
    if isinstance(node, exp.Between):
        return Expression("call", tuple(expression(a, t_env) for a in (node.this, node.args["low"], node.args["high"])),
                          "between")
    if isinstance(node, exp.Case):
        return _case(node, t_env)
    if isinstance(node, exp.If):  # Flink's IF(condition, a, b)
        args = [node.this, node.args["true"], node.args.get("false") or exp.Null()]
        return Expression("call", tuple(expression(a, t_env) for a in args), "case")
    if isinstance(node, exp.Substring):
        args = [node.this, node.args.get("start"), node.args.get("length")]
        return Expression("call", tuple(expression(a, t_env) for a in args if a is not None), "substring")
    if isinstance(node, exp.Anonymous):
        name = str(node.this)
        name = "DATE_FORMAT" if name.upper() == _DATE_FORMAT_ALIAS else name
        args = [expression(a, t_env) for a in node.expressions]
        if name.upper() == "JSON_VALUE":
            return args[0].json_value(args[1].value)
        if name.upper() in ("TUMBLE", "HOP", "CUMULATE", "SESSION", "DESCRIPTOR"):
            raise TableException(f"{name.upper()} is a window table function: use it in FROM as "
                                 f"TABLE({name.upper()}(TABLE t, DESCRIPTOR(time_col), ...))")
        return t_env._bind(Expression("call_by_name", tuple(args), name))
    raise _unsupported(node)


def _case(node: exp.Case, t_env: "TableEnvironment") -> Expression:
    """``CASE WHEN c THEN r ... [ELSE e] END`` and ``CASE x WHEN v THEN r ...`` (each WHEN ``x = v``)
    as one "case" call: (condition, result)* then the ELSE result, NULL without an ELSE."""
    subject = expression(node.this, t_env) if node.this is not None else None
    args: list[Expression] = []
    for branch in node.args.get("ifs") or []:
        when = expression(branch.this, t_env)
        args += [Expression("call", (subject, when), "equals") if subject is not None else when,
                 expression(branch.args["true"], t_env)]
    default = node.args.get("default")
    args.append(expression(default, t_env) if default is not None else lit(None))
    return Expression("call", tuple(args), "case")


_TIMESTAMP_TYPES = {exp.DataType.Type.TIMESTAMP: "TIMESTAMP", exp.DataType.Type.TIMESTAMPLTZ: "TIMESTAMP_LTZ",
                    exp.DataType.Type.TIMESTAMPTZ: "TIMESTAMP_LTZ"}


def _cast_type(to: exp.DataType) -> Any:
    """The DataType of a CAST's target (sqlglot's Hive dialect prints TIMESTAMP without its precision
    and VARBINARY as BINARY)."""
    if to.this in (exp.DataType.Type.VARBINARY, exp.DataType.Type.BINARY):
        params = [e.this.this for e in to.expressions if isinstance(e, exp.DataTypeParam)]
        binary = "VARBINARY" if to.this == exp.DataType.Type.VARBINARY else "BINARY"
        return parse_type(f"{binary}({params[0]})" if params else "BYTES" if binary == "VARBINARY" else "BINARY")
    name = _TIMESTAMP_TYPES.get(to.this)
    if name is not None:
        params = [e.this.this for e in to.expressions if isinstance(e, exp.DataTypeParam)]
        return parse_type(f"{name}({params[0]})" if params else name)
    return parse_type(to.sql(dialect=DIALECT))


_UNIT_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}


def interval_of(node: exp.Interval) -> datetime.timedelta:
    """``INTERVAL '5' SECOND`` (or MINUTES, HOUR, ...) as a timedelta."""
    unit = (node.unit.name if node.unit is not None else "").upper()
    unit = unit[:-1] if unit.endswith("S") else unit
    if unit not in _UNIT_MS:
        raise TableException(f"Unsupported interval unit {unit or '(none)'} in {node.sql(dialect=DIALECT)}: "
                             f"Millstream has {', '.join(_UNIT_MS)}")
    try:
        amount = int(str(node.this.this).strip())
    except ValueError:
        raise TableException(f"An interval needs a whole number, got {node.sql(dialect=DIALECT)}") from None
    return datetime.timedelta(milliseconds=amount * _UNIT_MS[unit])


def parse_expression(text: str, t_env: "TableEnvironment") -> Expression:
    """A SQL expression's text (a computed column, a watermark) as a Table API expression."""
    try:
        node = sqlglot.parse_one(_rename_date_format(text), read=_Dialect)
    except sqlglot.errors.ParseError as e:
        raise SqlParserException(f"SQL parse failed in the expression {text!r}: {str(e).splitlines()[0]}") from None
    return expression(cast(exp.Expression, node), t_env)


def watermark_delay(text: str, column: str, t_env: "TableEnvironment") -> int:
    """The delay (ms) of a watermark expression ``column`` or ``column - INTERVAL 'n' unit``."""
    e = parse_expression(text, t_env)
    if e.kind == "col" and e.value == column:
        return 0
    if (e.kind == "call" and e.value == "minus" and e.args[0].kind == "col" and e.args[0].value == column
            and e.args[1].kind == "lit" and isinstance(e.args[1].value, datetime.timedelta)):
        return e.args[1].value // datetime.timedelta(milliseconds=1)
    raise TableException(f"Unsupported watermark expression {text!r}: Millstream supports `{column}` and "
                         f"`{column} - INTERVAL 'n' unit` (bounded out-of-orderness)")


def window_tvf(spec: dict[str, Any], t_env: "TableEnvironment") -> "Table":
    """The Table of a window table function (see :func:`_take_window_tvfs`)."""
    table = t_env.from_path(spec["table"])
    kind = spec["kind"]
    column_type = table._resolve(col(spec["time_col"]), f"{kind}'s DESCRIPTOR").dtype
    if column_type.time_attr is None:  # Flink's words (a regular join's output, for one, has none)
        raise ValidationException(f"The window function requires the timecol is a time attribute type, but is "
                                  f"{column_type}.")
    column, event_time = table._time_attribute(col(spec["time_col"]), f"{kind}'s DESCRIPTOR")
    ms = {k: interval_of(cast(exp.Interval, sqlglot.parse_one(v, read=DIALECT))) // datetime.timedelta(milliseconds=1)
          for k, v in spec["intervals"].items()}
    need = {"TUMBLE": ["SIZE"], "HOP": ["SLIDE", "SIZE"], "CUMULATE": ["STEP", "SIZE"], "SESSION": ["GAP"]}[kind]
    missing = [k for k in need if k not in ms]
    if missing:
        raise ValidationException(f"{kind} needs {', '.join(need)}; missing {', '.join(missing)}")
    window = WindowSpec({"TUMBLE": "tumble", "HOP": "hop", "CUMULATE": "cumulate", "SESSION": "session"}[kind], column,
                        table._node.names[column], ms.get("SIZE", 0), ms.get("SLIDE", ms.get("STEP", 0)), ms.get("GAP", 0),
                        event_time, ms.get("OFFSET", 0))
    time_type = table._node.columns[column][1]
    columns = tuple((n, t.as_time_attr(None) if t.time_attr == "ROWTIME" else t) for n, t in table._node.columns) + (
        ("window_start", DataTypes.TIMESTAMP(3, False)), ("window_end", DataTypes.TIMESTAMP(3, False)),
        ("window_time", time_type.not_null() if event_time else DataTypes.TIMESTAMP_LTZ(3, False)))
    return Table(p.WindowTVF(columns, table._node, window), t_env)


# -- queries --------------------------------------------------------------------------------------


def _table_of(source: exp.Expression, t_env: "TableEnvironment") -> "Table":
    if isinstance(source, exp.Table) and "window_tvf" in source.meta:
        return window_tvf(source.meta["window_tvf"], t_env)
    if isinstance(source, exp.Table):
        return t_env.from_path(source.name)
    if isinstance(source, exp.Subquery):
        return query(source.this, t_env)
    raise _unsupported(source)


def _lateral(table: "Table", lateral: exp.Lateral, t_env: "TableEnvironment", outer: bool) -> "Table":
    call = lateral.this
    if isinstance(call, exp.Anonymous) and str(call.this).upper() == "TABLE" and call.expressions:
        call = call.expressions[0]
    if not isinstance(call, exp.Anonymous):
        raise _unsupported(lateral)
    func_call = t_env._bind(Expression("call_by_name", tuple(expression(a, t_env) for a in call.expressions),
                                       str(call.this)))
    alias = lateral.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    target = func_call.alias(*names) if names else func_call
    return table.left_outer_join_lateral(target) if outer else table.join_lateral(target)


def query(select: exp.Expression, t_env: "TableEnvironment") -> "Table":
    """The Table of a SELECT (or a UNION ALL of SELECTs)."""
    if isinstance(select, exp.Union):
        if select.args.get("distinct"):
            raise _unsupported(select)
        return query(select.this, t_env).union_all(query(select.expression, t_env))
    if not isinstance(select, exp.Select):
        raise _unsupported(select)
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise TableException("SELECT without FROM is not supported yet")
    where = select.args.get("where")
    if isinstance(from_.this, exp.Subquery) and _row_number_alias(from_.this.this) is not None:
        table, where = _ranked(from_.this.this, select, t_env)
    else:
        table = _table_of(from_.this, t_env)
    # each FROM item's alias -> its column names in the joined table (a right side's names that the
    # left already has are renamed name0, name1, ... as Calcite does; qualified references follow)
    scope: dict[str, dict[str, str]] = {_alias(from_.this): {n: n for n in table._node.names}}
    renamed = False
    for join in select.args.get("joins") or []:
        if isinstance(join.this, exp.Lateral):
            table = _lateral(table, join.this, t_env, outer=(join.side or "").upper() == "LEFT")
            continue
        _check_join_form(join)
        side = (join.side or join.kind or "").upper()
        if side not in ("", "INNER", "LEFT", "RIGHT", "FULL", "CROSS"):
            raise TableException(f"Unsupported join type {side} JOIN: Millstream has INNER, LEFT, RIGHT and FULL "
                                 "(OUTER) joins")
        on = join.args.get("on")
        other, names = _disambiguate(table, _table_of(join.this, t_env))
        scope[_alias(join.this)] = names
        renamed = renamed or any(k != v for k, v in names.items())
        if on is None and side in ("", "CROSS") and where is not None:
            # FROM a, b WHERE ...: the WHERE is the join's condition (Flink's planner pushes it in)
            on, where = where.this, None
        if on is None:
            raise TableException("A join needs an ON condition (cross joins are not supported)")
        if renamed:
            on = _qualified(on, scope)
        table = table._join(other, expression(on, t_env), left_outer=side == "LEFT",
                            join_type={"": "INNER", "CROSS": "INNER"}.get(side, side))
    if renamed:
        select = select.copy()
        select.set("expressions", [_qualified(e, scope) for e in select.expressions])
        for part in ("group", "having", "order"):
            if select.args.get(part) is not None:
                select.set(part, _qualified(select.args[part], scope))
        where = _qualified(where, scope) if where is not None else None
    if where is not None:
        table, where = _subquery_joins(table, where, scope, t_env)
    if where is not None:
        table = table.where(expression(where.this, t_env))
    windows = [w for e in select.expressions for w in e.find_all(exp.Window)]
    if windows:
        if any(isinstance(w.this, exp.RowNumber) for w in windows):
            raise TableException("ROW_NUMBER() OVER (...) is supported as Top-N or deduplication: in a subquery, "
                                 "with WHERE rn <= N (or rn = 1) outside it")
        over = _over_window(windows, t_env)
        over_items = [_over_item(e, i, over.alias_name, t_env) for i, e in enumerate(select.expressions)]
        return table.over_window(over).select(*over_items)
    items: list[Expression] = []
    for i, e in enumerate(select.expressions):
        x = expression(e, t_env)
        if x.kind not in ("alias", "col"):
            x = x.alias(f"EXPR${i}")  # Calcite names an unnamed select item by its position
        items.append(x)
    group = select.args.get("group")
    having = select.args.get("having")
    if group is not None:
        keys = [expression(k, t_env) for k in group.expressions]
        hidden = [expression(having.this, t_env).alias("$having")] if having is not None else []
        table = table.group_by(*keys).select(*items, *hidden)
        if hidden:
            table = table.where(col("$having")).drop_columns(col("$having"))
    else:
        if having is not None:
            raise TableException("HAVING without GROUP BY is not supported")
        table = table.select(*items)
    if select.args.get("distinct"):
        table = table.distinct()
    order = select.args.get("order")
    if order is not None:
        keys = []
        for o in order.expressions:
            e = expression(o.this, t_env)
            keys.append(e.desc if o.args.get("desc") else e.asc)
        table = table.order_by(*keys)
    limit = select.args.get("limit")
    if limit is not None:
        table = table.limit(int(limit.expression.this))
    return table


def _alias(source: exp.Expression) -> str:
    return source.alias_or_name if isinstance(source, (exp.Table, exp.Subquery)) else ""


def _disambiguate(table: "Table", other: "Table") -> tuple["Table", dict[str, str]]:
    """``other`` with the names ``table`` already has renamed (``num`` -> ``num0``), and its
    original -> new names."""
    taken = set(table._node.names) | set(other._node.names)
    names: dict[str, str] = {}
    for n in other._node.names:
        new = n
        if n in table._node.names:
            i = 0
            while f"{n}{i}" in taken:
                i += 1
            new = f"{n}{i}"
            taken.add(new)
        names[n] = new
    if all(k == v for k, v in names.items()):
        return other, names
    return other.select(*[col(n).alias(v) if v != n else col(n) for n, v in names.items()]), names


def _qualified(node: exp.Expression, scope: dict[str, dict[str, str]], inner: str | None = None) -> exp.Expression:
    """``node`` with each column reference (``R.num`` or an unambiguous ``num``) by its name in the
    joined table; an unqualified name that more than one joined table has is an error, as in Flink.
    ``inner``: a subquery's own alias, whose names an unqualified one means first (SQL's scoping)."""
    def fix(c: exp.Expression) -> exp.Expression:
        if not isinstance(c, exp.Column) or isinstance(c.this, exp.Star):
            return c
        if c.table:
            names = scope.get(c.table)
            return exp.column(names[c.name]) if names is not None and c.name in names else c
        if inner is not None and c.name in scope[inner]:
            return exp.column(scope[inner][c.name])
        owners = [a for a, names in scope.items() if c.name in names]
        if len(owners) > 1:
            raise ValidationException(f"Column '{c.name}' is ambiguous: it is in {', '.join(owners)}; qualify it "
                                      f"({owners[0]}.{c.name})")
        return exp.column(scope[owners[0]][c.name]) if owners else c
    return node.transform(fix)


def _check_join_form(join: exp.Join) -> None:
    """Refuses, naming it, a join form Millstream does not run (before anything is planned)."""
    method, kind = (join.method or "").upper(), (join.kind or "").upper()
    if method:
        raise TableException(f"Unsupported join form {method} JOIN: name the join condition with ON (Millstream "
                             "has INNER, LEFT, RIGHT and FULL joins ON an equality of keys)")
    if join.args.get("using"):
        raise TableException("Unsupported join form JOIN ... USING (...): write ON left.k = right.k instead")
    if kind not in ("", "INNER", "OUTER", "CROSS"):
        raise TableException(f"Unsupported join type {' '.join(x for x in ((join.side or '').upper(), kind) if x)} "
                             "JOIN: semi and anti joins come from IN / EXISTS subqueries of window TVFs")


def _subquery_joins(table: "Table", where: exp.Where, scope: dict[str, dict[str, str]],
                    t_env: "TableEnvironment") -> tuple["Table", exp.Where | None]:
    """The WHERE's ``x IN (SELECT ...)`` / ``EXISTS (SELECT ...)`` conjuncts (and their NOT) as
    semi (anti) joins of ``table`` with the subquery's table, its correlated WHERE the join
    condition (Flink plans them so; Millstream runs them as window joins); the rest of the WHERE."""
    rest: list[exp.Expression] = []
    for c in _conjuncts(where):
        negated = isinstance(c, exp.Not)
        inner = c.this if negated else c
        if isinstance(inner, exp.In) and isinstance(inner.args.get("query"), exp.Subquery):
            sub, needle = inner.args["query"].this, inner.this
        elif isinstance(inner, exp.Exists) and isinstance(inner.this, exp.Select):
            sub, needle = inner.this, None
        else:
            rest.append(c)
            continue
        if not isinstance(sub, exp.Select) or sub.args.get("joins") or sub.args.get("group"):
            raise TableException(f"Unsupported subquery in WHERE: Millstream has IN / EXISTS over one table with a "
                                 f"correlated WHERE, got {sub.sql(dialect=DIALECT)[:80]}")
        from_ = sub.args.get("from_") or sub.args.get("from")
        if from_ is None:
            raise TableException("An IN / EXISTS subquery needs a FROM")
        source = from_.this
        other, names = _disambiguate(table, _table_of(source, t_env))
        alias = _alias(source) or "$subquery"
        inner_scope = {**scope, alias: names}
        conds = [_qualified(x, inner_scope, alias) for x in _conjuncts(sub.args.get("where"))]
        if needle is not None:
            if len(sub.expressions) != 1:
                raise TableException("IN (SELECT ...) needs the subquery to select one column")
            conds.append(exp.EQ(this=_qualified(needle, scope), expression=_qualified(sub.expressions[0], inner_scope,
                                                                                          alias)))
        if not conds:
            raise TableException("An IN / EXISTS subquery needs a condition relating it to the outer query")
        table = table._join(other, expression(cast(exp.Expression, exp.and_(*conds)), t_env), left_outer=False,
                            join_type="ANTI" if negated else "SEMI")
    if len(rest) == len(_conjuncts(where)):
        return table, where  # no subquery: the WHERE as written
    return table, (exp.Where(this=exp.and_(*rest)) if rest else None)


# -- OVER, Top-N and deduplication ----------------------------------------------------------------


def _frame(spec: exp.WindowSpec | None) -> Any:
    """An over frame's ``preceding`` as the Table API has it (None: RANGE UNBOUNDED PRECEDING)."""
    if spec is None:
        return None
    end = str(spec.args.get("end") or "CURRENT ROW").upper()
    if end != "CURRENT ROW":
        raise TableException(f"OVER frames end at CURRENT ROW in Flink, got {end}")
    rows = str(spec.args.get("kind")).upper() == "ROWS"
    start = spec.args.get("start")
    if str(start).upper() == "UNBOUNDED":
        return UNBOUNDED_ROW if rows else UNBOUNDED_RANGE
    if rows and isinstance(start, exp.Literal) and not start.is_string:
        return row_interval(int(start.this))
    if not rows and isinstance(start, exp.Interval):
        return Expression("interval", (lit(interval_of(start) // datetime.timedelta(milliseconds=1)),), "MILLISECOND")
    raise TableException(f"Unsupported OVER frame {spec.sql(dialect=DIALECT)}: ROWS BETWEEN n PRECEDING, RANGE BETWEEN "
                         "INTERVAL ... PRECEDING or UNBOUNDED PRECEDING, AND CURRENT ROW")


def _over_window(windows: list[exp.Window], t_env: "TableEnvironment") -> Any:
    shapes = {(tuple(p.sql() for p in w.args.get("partition_by") or []), (w.args.get("order") or exp.Order()).sql(),
               (w.args.get("spec") or exp.WindowSpec()).sql()) for w in windows}
    if len(shapes) != 1:
        raise TableException("OVER aggregates of one SELECT must use the same window (Flink supports one)")
    w = windows[0]
    order = w.args.get("order")
    if order is None or len(order.expressions) != 1 or order.expressions[0].args.get("desc"):
        raise TableException("OVER needs ORDER BY one time attribute, ascending")
    over = Over.partition_by(*[expression(e, t_env) for e in w.args.get("partition_by") or []]) \
        .order_by(expression(order.expressions[0].this, t_env))
    preceding = _frame(w.args.get("spec"))
    return (over.preceding(preceding) if preceding is not None else over).alias("$over")


def _over_item(e: exp.Expression, i: int, alias: str, t_env: "TableEnvironment") -> Expression:
    """A select item with its OVER aggregates as ``agg.over(col(alias))``; unnamed ones named EXPR$i."""
    def convert(node: exp.Expression) -> Expression:
        if isinstance(node, exp.Window):
            return Expression("over", (expression(node.this, t_env), col(alias)))
        if isinstance(node, exp.Alias):
            return convert(node.this).alias(node.alias)
        if any(isinstance(x, exp.Window) for x in node.find_all(exp.Window)):
            raise TableException(f"Millstream supports OVER aggregates as whole select items, got {node.sql(dialect=DIALECT)}")
        return expression(node, t_env)

    x = convert(e)
    return x if x.kind in ("alias", "col") else x.alias(f"EXPR${i}")


def _row_number_alias(select: exp.Expression) -> str | None:
    if not isinstance(select, exp.Select):
        return None
    for e in select.expressions:
        if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window) and isinstance(e.this.this, exp.RowNumber):
            return e.alias
    return None


def _conjuncts(where: exp.Expression | None) -> list[exp.Expression]:
    if where is None:
        return []
    return cast(list[exp.Expression], list(where.this.flatten())) if isinstance(where.this, exp.And) else [where.this]


def _is_rank_filter(c: exp.Expression, rn: str) -> bool:
    return (isinstance(c, (exp.LTE, exp.LT, exp.EQ)) and isinstance(c.this, exp.Column) and c.this.name == rn
            and isinstance(c.expression, exp.Literal) and not c.expression.is_string)


def _rank_bound(where: exp.Expression | None, rn: str) -> int:
    """N of the outer ``WHERE rn <= N`` (``rn < N``, ``rn = 1``) of a Top-N."""
    for c in _conjuncts(where):
        if _is_rank_filter(c, rn):
            n = int(c.expression.this)
            if isinstance(c, exp.EQ) and n != 1:
                raise TableException(f"Top-N takes {rn} <= N (or {rn} = 1 for deduplication), got {c.sql()}")
            return n - 1 if isinstance(c, exp.LT) else n
    raise TableException(f"ROW_NUMBER() needs a filter on {rn} outside its subquery ({rn} <= N or {rn} = 1): an "
                         "unbounded ranking is not supported")


def _ranked(inner: exp.Select, outer: exp.Select, t_env: "TableEnvironment") -> tuple["Table", Any]:
    """``SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x) AS rn FROM t`` filtered by ``rn <= N``
    outside: a Deduplicate when N is 1 and the order is a time attribute, else a Rank (Top-N).
    The rank column is output only when the outer query uses it beyond its filter (as Flink,
    whose changelog differs: -U/+U per shifted rank with it, +I/-D without). Returns the table and
    the outer WHERE left to apply."""
    rn = _row_number_alias(inner)
    if rn is None:
        raise TableException("Top-N needs ROW_NUMBER() OVER (...) AS <alias> in its subquery")
    window = next(e.this for e in inner.expressions if isinstance(e, exp.Alias) and e.alias == rn)
    where = outer.args.get("where")
    n = _rank_bound(where, rn)
    rest = [c for c in _conjuncts(where) if not _is_rank_filter(c, rn)]
    with_rank = any(isinstance(c, exp.Star) or (isinstance(c, exp.Column) and c.name in (rn, "*"))
                    for e in [*outer.expressions, *rest] for c in e.find_all(exp.Column, exp.Star))
    if with_rank:
        rest = _conjuncts(where)
    remaining = exp.Where(this=exp.and_(*rest)) if rest else None
    inner = inner.copy()
    inner.set("expressions", [e for e in inner.expressions if not (isinstance(e, exp.Alias) and e.alias == rn)])
    table = query(inner, t_env)
    node = table._node
    partition = []
    for k in window.args.get("partition_by") or []:
        r = table._resolve(expression(k, t_env), "PARTITION BY")
        if r.kind != "ref":
            raise TableException(f"PARTITION BY takes columns, got {k.sql(dialect=DIALECT)}")
        partition.append(r.value)
    order = []
    for o in (window.args.get("order") or exp.Order()).expressions:
        r = table._resolve(expression(o.this, t_env), "ORDER BY")
        if r.kind != "ref":
            raise TableException(f"ORDER BY of ROW_NUMBER takes columns, got {o.sql(dialect=DIALECT)}")
        order.append((r.value, not o.args.get("desc")))
    if not order:
        raise TableException("ROW_NUMBER() OVER needs an ORDER BY")
    columns = tuple(node.columns) + (((rn, DataTypes.BIGINT(False)),) if with_rank else ())
    time_attr = node.columns[order[0][0]][1].time_attr
    if n == 1 and len(order) == 1 and time_attr in ("ROWTIME", "PROCTIME"):
        dedup = p.Deduplicate(columns, node, tuple(partition), keep_last=not order[0][1], order=order[0][0],
                              rowtime=time_attr == "ROWTIME", with_rank=with_rank)
        return Table(dedup, t_env), remaining
    return Table(p.Rank(columns, node, tuple(partition), tuple(order), n, with_rank=with_rank), t_env), remaining


# -- DDL and DML ----------------------------------------------------------------------------------


def create_table(create: exp.Create, t_env: "TableEnvironment") -> None:
    if str(create.args.get("kind", "")).upper() != "TABLE":
        raise _unsupported(create)
    schema_node = create.this
    if not isinstance(schema_node, exp.Schema):
        raise TableException("CREATE TABLE needs a column list")
    name = schema_node.this.name
    builder = Schema.new_builder()
    for c in schema_node.expressions:
        computed = [k.kind for k in c.args.get("constraints") or [] if isinstance(k.kind, exp.ComputedColumnConstraint)] \
            if isinstance(c, exp.ColumnDef) else []
        if computed:
            builder.column_by_expression(c.name, expression(computed[0].this, t_env))
        elif isinstance(c, exp.ColumnDef) and c.args.get("kind") is not None:
            dtype = _cast_type(c.args["kind"])
            if any(isinstance(k.kind, exp.NotNullColumnConstraint) and not k.kind.args.get("allow_null")
                   for k in c.args.get("constraints") or []):
                dtype = dtype.not_null()
            builder.column(c.name, dtype)
        elif isinstance(c, exp.PrimaryKey):
            if "NOT ENFORCED" not in [str(o).upper() for o in c.args.get("options") or []]:
                raise ValidationException("Flink doesn't support ENFORCED mode for PRIMARY KEY constraint. ENFORCED/"
                                          "NOT ENFORCED controls if the constraint checks are performed on the "
                                          "incoming/outgoing data. Flink does not own the data therefore the only "
                                          "supported mode is the NOT ENFORCED mode")
            builder.primary_key(*[k.name for k in c.expressions])
        else:
            raise _unsupported(c)
    for column, text in create.meta.get("watermarks", []):
        builder.watermark(column, text)
    options: dict[str, str] = {}
    props = create.args.get("properties")
    partition_keys: list[str] = []
    for prop in (props.expressions if props is not None else []):
        if isinstance(prop, exp.PartitionedByProperty):
            partition_keys += [k.name for k in prop.this.expressions]
            continue
        key = prop.this.this if isinstance(prop.this, exp.Literal) else prop.name
        value = prop.args.get("value")
        options[str(key)] = value.this if isinstance(value, exp.Literal) else value.sql(dialect=DIALECT)
    if "connector" not in options:
        raise ValidationException(f"Table options do not contain an option key 'connector' for table {name}")
    descriptor = TableDescriptor.for_connector(options.pop("connector")).schema(builder.build())
    for k, v in options.items():
        descriptor.option(k, v)
    if partition_keys:
        descriptor.partitioned_by(*partition_keys)
    t_env.create_temporary_table(name, descriptor.build())


def insert_target(insert: exp.Insert) -> str:
    target = insert.this
    if isinstance(target, exp.Schema):
        raise TableException("INSERT INTO with a column list is not supported yet")
    return target.name

