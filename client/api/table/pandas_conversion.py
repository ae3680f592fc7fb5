"""``TableEnvironment.from_pandas`` and ``Table.to_pandas`` (PyFlink's pandas conversion).

``from_pandas(pdf, schema=None, splits_num=1)``: the DataFrame's columns through Arrow, as PyFlink's
Arrow serializer takes them: without a schema the types are inferred from Arrow's (``int64`` ->
BIGINT, ``float64`` -> DOUBLE, ``object`` of str -> STRING, ...); a list of names renames the
inferred columns, a list of DataTypes retypes them, a ROW type gives both. The index is not a
column. The rows are cut into ``splits_num`` consecutive slices of ``ceil(len / splits_num)`` rows
that ``splits_num`` parallel source subtasks read (one slice each).

``to_pandas()``: runs the table and collects its result into a DataFrame with one column per
field, typed through Arrow (a FLOAT column is float32, a BIGINT column int64 unless it holds a null).
An updating table's changelog is applied first: the DataFrame holds the final rows.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from millstream.common.row import Row, RowKind
from millstream.datastream.functions import FlatMapFunction
from millstream.table.pandas_values import arrow_type, from_series
from millstream.table.types import DataType, DataTypes

__all__ = ["from_arrow_type", "dataframe_columns", "dataframe_rows", "splits", "to_dataframe", "SplitReader"]


def from_arrow_type(arrow_type: Any, nullable: bool = True) -> DataType:
    """The Flink type PyFlink gives an Arrow type (PyFlink's ``from_arrow_type``)."""
    from pyarrow import types as t
    simple = [(t.is_boolean, DataTypes.BOOLEAN), (t.is_int8, DataTypes.TINYINT), (t.is_int16, DataTypes.SMALLINT),
              (t.is_int32, DataTypes.INT), (t.is_int64, DataTypes.BIGINT), (t.is_float32, DataTypes.FLOAT),
              (t.is_float64, DataTypes.DOUBLE), (t.is_string, DataTypes.STRING), (t.is_large_string, DataTypes.STRING),
              (t.is_date32, DataTypes.DATE)]
    for test, make in simple:
        if test(arrow_type):
            return make(nullable)
    if t.is_decimal(arrow_type):
        return DataTypes.DECIMAL(arrow_type.precision, arrow_type.scale, nullable)
    if t.is_fixed_size_binary(arrow_type):
        return DataTypes.BINARY(arrow_type.byte_width, nullable)
    if t.is_binary(arrow_type):
        return DataTypes.BYTES(nullable)
    if t.is_timestamp(arrow_type):
        return DataTypes.TIMESTAMP({"s": 0, "ms": 3, "us": 6}.get(arrow_type.unit, 9), nullable)
    if t.is_list(arrow_type):
        return DataTypes.ARRAY(from_arrow_type(arrow_type.value_type), nullable)
    if t.is_null(arrow_type):
        return DataTypes.NULL()
    raise TypeError(f"Unsupported data type to convert to Flink type: {arrow_type}")


def dataframe_columns(pdf: Any, schema: Any) -> list[tuple[str, DataType]]:
    """The table's columns for ``from_pandas(pdf, schema)`` (see the module docstring)."""
    import pandas as pd
    import pyarrow as pa
    if not isinstance(pdf, pd.DataFrame):
        raise TypeError(f"Unsupported type, expected pandas.DataFrame, got {type(pdf)}")
    arrow_schema = pa.Schema.from_pandas(pdf, preserve_index=False)
    inferred = [(f.name, from_arrow_type(f.type, f.nullable)) for f in arrow_schema]
    if schema is None:
        columns = inferred
    elif isinstance(schema, DataType) and schema.root == "ROW":
        columns = [(f.name, f.data_type) for f in schema.fields]
    elif isinstance(schema, (list, tuple)) and schema and all(isinstance(x, str) for x in schema):
        columns = [(n, t) for n, (_, t) in zip(schema, inferred)]
    elif isinstance(schema, (list, tuple)) and schema and all(isinstance(x, DataType) for x in schema):
        columns = [(n, t) for (n, _), t in zip(inferred, schema)]
    else:
        raise TypeError("Unsupported schema type, it could only be of RowType, a list of str or a list of DataType, "
                        f"got {schema}")
    if len(columns) != len(pdf.columns):
        raise ValueError(f"from_pandas: the schema has {len(columns)} fields, the DataFrame {len(pdf.columns)} columns")
    return columns


def dataframe_rows(pdf: Any, columns: Sequence[tuple[str, DataType]]) -> list[tuple[Any, ...]]:
    """The DataFrame's rows as the columns' Python values (NaN and None: NULL)."""
    values = [from_series(pdf.iloc[:, i], t) for i, (_, t) in enumerate(columns)]
    return list(zip(*values)) if values else [() for _ in range(len(pdf))]


def splits(rows: list[tuple[Any, ...]], splits_num: int) -> list[list[tuple[Any, ...]]]:
    """PyFlink's slicing: consecutive slices of ``ceil(len / splits_num)`` rows (fewer slices when short)."""
    if isinstance(splits_num, bool) or not isinstance(splits_num, int) or splits_num <= 0:
        raise ValueError(f"from_pandas: splits_num must be a positive int, got {splits_num!r}")
    step = max(1, math.ceil(len(rows) / splits_num))
    return [rows[start:start + step] for start in range(0, len(rows), step)]


class SplitReader(FlatMapFunction):
    """A source subtask's part of a split DataFrame: the rows of the slices it was given."""

    def flat_map(self, value: Any) -> Any:
        return (Row(*r) for r in value)


def to_dataframe(rows: list[Row], columns: Sequence[tuple[str, DataType]]) -> Any:
    """The final rows of a changelog as a DataFrame of the table's columns."""
    import pandas as pd
    import pyarrow as pa
    final: list[tuple[Any, ...]] = []
    for r in rows:
        values = tuple(r)
        if r.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            final.append(values)
        elif values in final:  # -U / -D take back the row they name
            final.remove(values)
    names = [n for n, _ in columns]
    if not final:
        return pd.DataFrame.from_records([], columns=names)
    data = {}
    for i, (name, t) in enumerate(columns):
        column = [v[i] for v in final]
        at = arrow_type(t)
        try:
            data[name] = (pa.array(column, type=at) if at is not None else pa.array(column)).to_pandas()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # values Arrow cannot hold (a ROW of mixed types)
            data[name] = pd.Series(column, dtype=object)
    return pd.DataFrame(data, columns=names)
