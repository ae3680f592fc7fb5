"""close_channel: a channel whose close blocks (grpc/grpc#19973, after a Ctrl-C cut one of its
RPCs) does not hold up the process; a healthy channel closes as before."""
from __future__ import annotations

import threading
import time

import grpc

from millstream.client.cluster_client import close_channel


class BlockedChannel:
    """Stands in for a channel whose close() never returns."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.close_called = threading.Event()

    def close(self) -> None:
        self.close_called.set()
        self.release.wait()


def test_a_close_that_blocks_gives_up_after_the_wait() -> None:
    channel = BlockedChannel()
    started = time.monotonic()
    assert close_channel(channel, wait_s=0.2) is False  # type: ignore[arg-type]
    assert 0.2 <= time.monotonic() - started < 2
    assert channel.close_called.is_set()
    channel.release.set()


def test_a_real_channel_closes_and_its_calls_end_cancelled() -> None:
    channel = grpc.insecure_channel("127.0.0.1:1")  # nothing listens: the call waits for a connection
    call = channel.unary_unary("/x.Y/Z").future(b"", wait_for_ready=True)
    assert close_channel(channel) is True
    assert call.exception(timeout=5).code() is grpc.StatusCode.CANCELLED
