"""Values between the Table API's rows and pandas, through Arrow as PyFlink's Arrow serializer
takes them: a FLOAT column is a float32 Series, an INT column int32 (float64 when it holds a
null), a TIMESTAMP(3) column datetime64[ms]; NaN and None come back as NULL. pandas and pyarrow are
imported when a pandas function or conversion first runs, so a table program without one does not
load them."""
from __future__ import annotations

from typing import Any, Sequence

from millstream.common.row import Row
from millstream.table.expression import to_float32
from millstream.table.types import DataType

__all__ = ["arrow_type", "to_series", "from_series", "scalar_value"]


def arrow_type(t: DataType) -> Any:
    """The Arrow type PyFlink's serializer gives a column of Flink type ``t`` (None: let Arrow infer)."""
    import pyarrow as pa
    r = t.root
    simple = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
              "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
              "CHAR": pa.string(), "VARBINARY": pa.binary(), "BINARY": pa.binary(), "DATE": pa.date32()}
    if r in simple:
        return simple[r]
    if r == "DECIMAL":
        return pa.decimal128(t.length or 10, t.scale or 0)
    if r in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        p = t.length if t.length is not None else 6
        return pa.timestamp("s" if p == 0 else "ms" if p <= 3 else "us" if p <= 6 else "ns")
    if r == "ARRAY" and t.element is not None:
        inner = arrow_type(t.element)
        return None if inner is None else pa.list_(inner)
    return None


def to_series(values: Sequence[Any], t: DataType) -> Any:
    """One column's values as the ``pandas.Series`` a pandas function receives."""
    import pandas as pd
    import pyarrow as pa
    at = arrow_type(t)
    if at is not None:
        try:
            return pa.array(list(values), type=at, from_pandas=True).to_pandas()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass  # a value Arrow cannot take as this type (a tz-aware timestamp): pandas infers
    return pd.Series(list(values), dtype=object if t.root in ("ROW", "MAP", "MULTISET") else None)


def from_series(result: Any, t: DataType) -> list[Any]:
    """A Series a pandas function returned as the column's Python values (NaN and None: NULL)."""
    import pandas as pd
    import pyarrow as pa
    if isinstance(result, pd.DataFrame):  # a ROW result: one column per field
        columns = [from_series(result.iloc[:, i], f.data_type) for i, f in enumerate(t.fields)]
        return [Row(*vals) for vals in zip(*columns)]
    at = arrow_type(t)
    if at is not None:
        values = pa.Array.from_pandas(result, mask=result.isnull(), type=at).to_pylist()
    else:
        values = [None if _is_null(v) else v for v in result.tolist()]
    if t.root == "FLOAT":
        return [to_float32(v) if v is not None else None for v in values]
    if t.root in ("TIMESTAMP", "TIMESTAMP_LTZ"):  # nanosecond precision comes back as pandas.Timestamp
        return [v.to_pydatetime() if hasattr(v, "to_pydatetime") else v for v in values]
    return values


def scalar_value(v: Any, t: DataType) -> Any:
    """A pandas aggregate function's result as a Python value of type ``t``."""
    if t.root == "ROW" and isinstance(v, (tuple, list, Row)):  # a ROW result: one value per field
        return Row(*[scalar_value(x, f.data_type) for x, f in zip(v, t.fields)])
    if _is_null(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, tuple, str, bytes)):  # a numpy scalar
        v = v.item()
    root = t.root
    if root in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        return int(v)
    if root == "DOUBLE":
        return float(v)
    if root == "FLOAT":
        return to_float32(float(v))
    if root == "BOOLEAN":
        return bool(v)
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def _is_null(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN, NaT
    except (TypeError, ValueError):
        return False
