"""In-process channels: a consumer whose producer serves its partition from the same process
(placement ``slot``: a slot's subtasks are threads of one Python worker) reads the subpartition
directly, as Flink's local input channel does: no socket and no helper thread.

The producer's task thread hands each frame it may send (credit permitting) straight to the
consumer's :class:`LocalConsumer`, which queues it for the consumer's ``poll``; the consumer's task
thread returns credit by calling the partition, which hands over what the new credit lets through.
So a buffer costs no thread wake-up besides the consumer's own, and credit-based flow control,
in-band events and failures keep the network path's rules and messages. Buffers are still the
serialized bytes the producer wrote (as in Flink, a consumer never shares record objects with its
producer).

A :class:`~millstream.runtime.network.partition.PartitionServer` built with ``local=True``
registers itself here while it serves; a consumer that resolves a producer to an address found
here finds the partition with :meth:`PartitionServer.partition_for` and attaches to it
(:meth:`ResultPartition.attach_local`) instead of connecting.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from millstream.runtime.network.partition import PartitionServer

_lock = threading.Lock()
_servers: dict[tuple[str, int], PartitionServer] = {}


class LocalConsumer(Protocol):
    """The consumer's end of an in-process channel; called with the producer's partition lock held,
    so neither method may call back into the partition."""

    def deliver(self, frame: bytes) -> None:
        """One frame (a buffer within the channel's credit, or an event), in send order."""

    def fail(self, message: str) -> None:
        """The channel ended before END_OF_PARTITION: the producer failed or was released."""


def register(address: tuple[str, int], server: PartitionServer) -> None:
    with _lock:
        _servers[address] = server


def unregister(address: tuple[str, int]) -> None:
    with _lock:
        _servers.pop(address, None)


def server_at(address: tuple[str, int]) -> PartitionServer | None:
    """The server at ``address`` when it serves in this process, else None (connect by socket)."""
    with _lock:
        return _servers.get(address)
