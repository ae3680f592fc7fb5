"""``TableDescriptor`` and ``FormatDescriptor``: a connector table described in Python, as
``create_temporary_table`` takes it (the same options as SQL's ``CREATE TABLE ... WITH (...)``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from millstream.table.types import Schema

__all__ = ["TableDescriptor", "FormatDescriptor"]


@dataclass(frozen=True)
class FormatDescriptor:
    format: str
    options: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def for_format(format: str) -> "FormatDescriptor.Builder":
        return FormatDescriptor.Builder(format)

    class Builder:
        def __init__(self, format: str) -> None:
            self._format, self._options = format, {}  # type: ignore[var-annotated]

        def option(self, key: str, value: Any) -> "FormatDescriptor.Builder":
            self._options[key] = str(value)
            return self

        def build(self) -> "FormatDescriptor":
            return FormatDescriptor(self._format, tuple(self._options.items()))


@dataclass(frozen=True)
class TableDescriptor:
    schema: Schema | None
    options: tuple[tuple[str, str], ...] = ()
    partition_keys: tuple[str, ...] = ()
    comment: str | None = None

    @staticmethod
    def for_connector(connector: str) -> "TableDescriptor.Builder":
        return TableDescriptor.Builder(connector)

    def get_options(self) -> dict[str, str]:
        return dict(self.options)

    def get_schema(self) -> Schema | None:
        return self.schema

    def __str__(self) -> str:
        opts = ",\n".join(f"  '{k}' = '{v}'" for k, v in self.options)
        return f"{self.schema or ''}\nWITH (\n{opts}\n)"

    class Builder:
        def __init__(self, connector: str) -> None:
            self._options: dict[str, str] = {"connector": connector}
            self._schema: Schema | None = None
            self._partition_keys: tuple[str, ...] = ()
            self._comment: str | None = None

        def schema(self, schema: Schema) -> "TableDescriptor.Builder":
            self._schema = schema
            return self

        def option(self, key: str, value: Any) -> "TableDescriptor.Builder":
            self._options[key] = str(value).lower() if isinstance(value, bool) else str(value)
            return self

        def format(self, format: "str | FormatDescriptor", format_option: Any = None) -> "TableDescriptor.Builder":
            key = "format" if format_option is None else f"{format_option}.format"
            if isinstance(format, FormatDescriptor):
                self._options[key] = format.format
                for k, v in format.options:
                    self._options[f"{format.format}.{k}"] = v
            else:
                self._options[key] = format
            return self

        def partitioned_by(self, *partition_keys: str) -> "TableDescriptor.Builder":
            self._partition_keys = partition_keys
            return self

        def comment(self, comment: str) -> "TableDescriptor.Builder":
            self._comment = comment
            return self

        def build(self) -> "TableDescriptor":
            return TableDescriptor(self._schema, tuple(self._options.items()), self._partition_keys, self._comment)
