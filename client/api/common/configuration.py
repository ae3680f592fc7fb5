"""``Configuration``: PyFlink's string-keyed option map for jobs and environments."""
from __future__ import annotations

from typing import Iterator


class Configuration:
    """A mutable map of Flink-style keys (``execution.buffer-timeout``) to string values."""

    def __init__(self, other: "Configuration | dict[str, object] | None" = None) -> None:
        self._data: dict[str, str] = {}
        if isinstance(other, Configuration):
            self._data.update(other._data)
        elif other:
            for key, value in other.items():
                self.set_string(key, value)

    def set_string(self, key: str, value: object) -> "Configuration":
        self._data[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
        return self

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        return self._data.get(key, default_value)

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self.set_string(key, int(value))

    def get_integer(self, key: str, default_value: int = 0) -> int:
        value = self._data.get(key)
        return default_value if value is None else int(value)

    set_long = set_integer
    get_long = get_integer

    def set_float(self, key: str, value: float) -> "Configuration":
        return self.set_string(key, float(value))

    def get_float(self, key: str, default_value: float = 0.0) -> float:
        value = self._data.get(key)
        return default_value if value is None else float(value)

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        return self.set_string(key, bool(value))

    def get_boolean(self, key: str, default_value: bool = False) -> bool:
        value = self._data.get(key)
        if value is None:
            return default_value
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{key}: expected true or false, got {value!r}")
        return value.lower() == "true"

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def add_all(self, other: "Configuration") -> "Configuration":
        self._data.update(other._data)
        return self

    def key_set(self) -> set[str]:
        return set(self._data)

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._data == other._data

    def __repr__(self) -> str:
        return f"Configuration({self._data})"
