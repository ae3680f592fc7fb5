"""SQL on the Table API: statements parsed with sqlglot (its Hive dialect reads Flink's backquoted
identifiers), translated to Table operations, so SQL and the Table API share one planner.

Supported: ``SELECT [DISTINCT] ... FROM t [JOIN u ON ...] [, LATERAL TABLE(f(...)) AS x(a, b)]
[WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT]`` with Flink's built-in functions (see
``_FUNCTIONS``) and COUNT/SUM/MIN/MAX/AVG; ``CREATE [TEMPORARY] TABLE t (...) WITH (...)``; ``INSERT
INTO t SELECT ...``. A syntax error names the line, column and token as Flink's parser does; a
construct Millstream does not translate yet says which.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from millstream.table.expression import Expression, TableException, ValidationException
from millstream.table.expressions import col, lit
from millstream.table.table_descriptor import TableDescriptor
from millstream.table.types import Schema, parse_type

if TYPE_CHECKING:
    from millstream.table.table import Table
    from millstream.table.table_environment import TableEnvironment

__all__ = ["SqlParserException", "parse", "query", "create_table", "insert_target"]

DIALECT = "hive"


class SqlParserException(TableException):
    """A statement that does not parse: names the line, column and token."""


def parse(statement: str, known_names: list[str]) -> Any:
    # PyFlink's names of unregistered tables (str(table)) contain '$': quote them for the parser.
    for name in known_names:
        if "$" in name:
            statement = re.sub(r"(?<![`\w$])" + re.escape(name) + r"(?![\w$`])", f"`{name}`", statement)
    try:
        parsed = sqlglot.parse(statement, read=DIALECT)
    except sqlglot.errors.ParseError as e:
        err = e.errors[0] if e.errors else {}
        token = err.get("highlight") or ""
        column = int(err.get("col", 0)) - len(token) + 1
        raise SqlParserException(f'SQL parse failed. Encountered "{token}" at line {err.get("line")}, column '
                                 f'{column}.') from None
    statements = [s for s in parsed if s is not None]
    if len(statements) != 1:
        raise SqlParserException(f"expected one SQL statement, got {len(statements)}")
    return statements[0]


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
        return expression(node.this, t_env).cast(parse_type(node.to.sql(dialect=DIALECT)))
    name = _BINARY.get(type(node))
    if name is not None:
        return Expression("call", (expression(node.this, t_env), expression(node.expression, t_env)), name)
    name = _UNARY.get(type(node))
    if name is not None:
        return Expression("call", (expression(node.this, t_env),), name)
    name = _AGGS.get(type(node))
    if name is not None:
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise _unsupported(node)
        inner = lit(1) if isinstance(arg, exp.Star) or arg is None else expression(arg, t_env)
        return Expression("agg", (inner,), name)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return Expression("call", (expression(node.this, t_env),), "is_null")
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
    if isinstance(node, exp.Substring):
        args = [node.this, node.args.get("start"), node.args.get("length")]
        return Expression("call", tuple(expression(a, t_env) for a in args if a is not None), "substring")
    if isinstance(node, exp.Anonymous):
        name = str(node.this)
        args = [expression(a, t_env) for a in node.expressions]
        if name.upper() == "JSON_VALUE":
            return args[0].json_value(args[1].value)
        return t_env._bind(Expression("call_by_name", tuple(args), name))
    raise _unsupported(node)


# -- queries --------------------------------------------------------------------------------------


def _table_of(source: exp.Expression, t_env: "TableEnvironment") -> "Table":
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
    table = _table_of(from_.this, t_env)
    for join in select.args.get("joins") or []:
        if isinstance(join.this, exp.Lateral):
            table = _lateral(table, join.this, t_env, outer=(join.side or "").upper() == "LEFT")
            continue
        side = (join.side or join.kind or "").upper()
        if side not in ("", "INNER", "LEFT"):
            raise TableException(f"Unsupported join type {side} JOIN: Millstream has inner and left outer joins")
        on = join.args.get("on")
        if on is None:
            raise TableException("A join needs an ON condition (cross joins are not supported)")
        other = _table_of(join.this, t_env)
        table = table.left_outer_join(other, expression(on, t_env)) if side == "LEFT" else \
            table.join(other, expression(on, t_env))
    where = select.args.get("where")
    if where is not None:
        table = table.where(expression(where.this, t_env))
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
        if isinstance(c, exp.ColumnDef):
            builder.column(c.name, parse_type(c.args["kind"].sql(dialect=DIALECT)))
        else:
            raise _unsupported(c)
    options: dict[str, str] = {}
    props = create.args.get("properties")
    for prop in (props.expressions if props is not None else []):
        key = prop.this.this if isinstance(prop.this, exp.Literal) else prop.name
        value = prop.args.get("value")
        options[str(key)] = value.this if isinstance(value, exp.Literal) else value.sql(dialect=DIALECT)
    if "connector" not in options:
        raise ValidationException(f"Table options do not contain an option key 'connector' for table {name}")
    descriptor = TableDescriptor.for_connector(options.pop("connector")).schema(builder.build())
    for k, v in options.items():
        descriptor.option(k, v)
    t_env.create_temporary_table(name, descriptor.build())


def insert_target(insert: exp.Insert) -> str:
    target = insert.this
    if isinstance(target, exp.Schema):
        raise TableException("INSERT INTO with a column list is not supported yet")
    return target.name

