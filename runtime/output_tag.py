"""``OutputTag``: names a side output. Defined here so the user API and the operators share it."""
from __future__ import annotations

from millstream.common.typeinfo import TypeInformation


class OutputTag:
    """Names a side output; ``yield tag, value`` in a process function emits to it."""

    def __init__(self, tag_id: str, type_info: TypeInformation | None = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError("OutputTag id must be a non-empty string")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r}, {self.type_info})"
