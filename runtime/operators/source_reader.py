"""The pull reader interface every source reader implements (see :mod:`.sources`); its own module
so that a reader loaded only when used (the Kafka reader) can implement it without importing
:mod:`.sources`, which picks the reader."""
from __future__ import annotations

from typing import Any

__all__ = ["SourceReader"]


class SourceReader:
    """A pull reader over this subtask's splits."""

    # The split the last ``poll()``'s records all came from, when a reader reads split by split
    # (the source operator then runs its WatermarkStrategy per split, as Flink's sources do).
    batch_split: str | None = None

    def open(self) -> None:
        pass

    def poll(self) -> list[Any] | None:
        raise NotImplementedError

    def wait_hint_ms(self) -> int:
        """After ``poll()`` returned ``[]``: how long until more is available."""
        return 1

    def position(self) -> dict[str, Any]:
        return {}

    def added_splits(self) -> list[str]:
        """Splits this reader started reading since the last call (a reader with ``batch_split``):
        each holds the subtask's watermark back until its own records move it."""
        return []

    def released_splits(self) -> list[str]:
        """Splits finished since the last call: their watermark no longer holds the subtask's back."""
        return []

    def on_checkpoint(self, checkpoint_id: int) -> None:
        """The barrier of ``checkpoint_id``, just before ``position()`` is taken for it."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (a Kafka reader commits its offsets then)."""

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass
