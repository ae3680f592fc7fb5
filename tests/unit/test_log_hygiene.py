"""Bounded logs: repeated warnings rate limited, a process's stdout file rotated by size."""
from __future__ import annotations

import logging


from millstream.runtime.entrypoint.log_hygiene import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, repeat: RepeatFilter) -> tuple[logging.Logger, list[str]]:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    handler.addFilter(repeat)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, lines


def test_a_flood_of_one_error_is_a_burst_then_a_count() -> None:
    clock = Clock()
    logger, lines = _logger("test.flood", RepeatFilter(burst=3, interval_s=10, clock=clock))
    for i in range(1000):  # asyncio's accept error, once per retry
        logger.error("socket.accept() out of system resource\nsocket: fd=%d", 6)
        logger.info("info %d is never limited", i)
    errors = [line for line in lines if line.startswith("socket.accept()")]
    assert len(errors) == 3
    assert len([line for line in lines if line.startswith("info")]) == 1000
    logger.warning("another message")
    assert lines[-1] == "another message"  # other messages have their own allowance
    clock.now = 10.5
    logger.error("socket.accept() out of system resource\nsocket: fd=%d", 6)
    assert lines[-1] == "socket.accept() out of system resource\nsocket: fd=6 [997 more like this suppressed in 10 s]"


def test_each_handler_counts_a_record_once() -> None:
    from millstream.runtime.entrypoint.log_hygiene import install_repeat_filter

    logger = logging.getLogger("test.two-handlers")
    logger.propagate, logger.handlers[:] = False, []
    seen: list[list[str]] = [[], []]
    for lines in seen:
        handler = logging.Handler()
        handler.emit = lambda record, lines=lines: lines.append(record.getMessage())  # type: ignore[method-assign]
        logger.addHandler(handler)
    install_repeat_filter(logger, burst=4)
    for _ in range(10):
        logger.warning("refused a call from %s", "peer")
    assert [len(lines) for lines in seen] == [4, 4]
