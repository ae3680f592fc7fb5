"""Where the client's internal log lines go: a file, not the user's console.

A user program (``python job.py``) owns its console and its root logger: PyFlink's own examples
call ``logging.basicConfig(level=logging.INFO)``. Millstream's, py4j's and PySpark's loggers
therefore never propagate to the root logger; they write to a log file under ``~/.millstream/log``
(``MILLSTREAM_LOG_DIR``), and to stderr only when ``MILLSTREAM_LOG_LEVEL`` (or a CLI command's
``-v``) asks for them. The embedded Spark JVM's stderr (its banner, log4j's WARN lines, its
workers' stderr) goes to the same file.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Iterator

from millstream.runtime.config import ConfigurationError
from millstream.runtime.entrypoint.log_files import default_log_dir

ENV_LOG_LEVEL = "MILLSTREAM_LOG_LEVEL"
INTERNAL_LOGGERS = ("millstream", "py4j", "pyspark", "kazoo")
KEEP_LOG_FILES = 20  # a log file per program run: the oldest beyond these are removed
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_dir() -> str:
    return default_log_dir()


def console_level(verbose: int = 0) -> int | None:
    """The level internal logs reach stderr at: ``MILLSTREAM_LOG_LEVEL``, else INFO for ``-v`` and
    DEBUG for ``-vv``, else None (the log file only). A bad level names itself."""
    text = os.environ.get(ENV_LOG_LEVEL, "").strip()
    if text:
        level = logging.getLevelName(text.upper())
        if not isinstance(level, int):
            raise ConfigurationError(f"{ENV_LOG_LEVEL}: expected DEBUG, INFO, WARNING or ERROR, got {text!r}")
        return level
    if verbose:
        return logging.DEBUG if verbose > 1 else logging.INFO
    return None


def new_log_file(kind: str) -> str:
    """A fresh log file for this process (``<kind>-<time>-<pid>.log``); old ones are pruned."""
    directory = log_dir()
    os.makedirs(directory, exist_ok=True)
    ours = sorted((f for f in os.listdir(directory) if f.startswith(f"{kind}-") and f.endswith(".log")),
                  key=lambda f: os.path.getmtime(os.path.join(directory, f)) if os.path.exists(os.path.join(directory, f)) else 0)
    for old in ours[: max(0, len(ours) - (KEEP_LOG_FILES - 1))]:
        with contextlib.suppress(OSError):  # another process may prune the same file
            os.remove(os.path.join(directory, old))
    return os.path.join(directory, f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")


def route_internal_logs(path: str | None, level: int | None) -> None:
    """Internal loggers write to ``path`` (INFO and up) and, if ``level`` is set, to stderr at that
    level; they never propagate to the root logger, whatever the user configured there."""
    handlers: list[logging.Handler] = []
    if path:
        file_handler = logging.FileHandler(path, delay=True, encoding="utf-8")
        file_handler.setLevel(min(logging.INFO, level or logging.INFO))
        handlers.append(file_handler)
    if level is not None:
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(level)
        handlers.append(console)
    for handler in handlers:
        handler.setFormatter(logging.Formatter(_FORMAT))
        setattr(handler, "_millstream", True)
    for name in INTERNAL_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "_millstream", False)]:
            logger.removeHandler(old)
            old.close()
        logger.propagate = False
        logger.setLevel(min([h.level for h in handlers], default=logging.CRITICAL))
        if not handlers:
            logger.addHandler(logging.NullHandler())
        for handler in handlers:
            logger.addHandler(handler)


@contextlib.contextmanager
def stderr_redirected_to(path: str | None) -> Iterator[None]:
    """While inside, file descriptor 2 is ``path``: child processes started meanwhile (Spark's
    JVM) keep it as their stderr. ``None``: no redirection."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as target:
            os.dup2(target.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
