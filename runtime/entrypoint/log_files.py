"""One log file per JobManager / TaskManager process, rotated by size, and reading it back.

Each process writes ``<log dir>/millstream-<role>-<index>-<host>.log`` (Flink's
``flink-<user>-standalonesession-<index>-<host>.log``): the index is the lowest one no other live
process of that role on this host holds, so a restarted process appends to its predecessor's file
and two TaskManagers on one host never share one. The claim is an ``flock`` on a ``.lock`` file
beside the log, released by the kernel when the process dies. When the file reaches
``log.file.max-size`` it is renamed ``.log.1`` (older ones shift up to ``env.log.max``).

The REST API reads these back: :meth:`ProcessLog.files` lists the process's files (and its stdout
when that is a regular file, as under ``millstream cluster start``: Flink's ``.out``), and
:func:`read_tail` returns the end of one of them.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import logging.handlers
import os
import socket
from dataclasses import dataclass

from millstream.runtime import config as cfg

ENV_LOG_DIR = "MILLSTREAM_LOG_DIR"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_INDEX = 1000  # more processes of one role on one host than this is a misconfiguration
DEFAULT_TAIL_BYTES = 1 << 20  # what a "tail" returns: the last MiB, from a line start


@dataclass(frozen=True)
class LogFileInfo:
    name: str
    size: int
    mtime_ms: int = 0  # last modified, wall clock (Flink's LogInfo mtime)


def default_log_dir() -> str:
    """``MILLSTREAM_LOG_DIR``, else ``~/.millstream/log`` (the client's log files live there too)."""
    return os.environ.get(ENV_LOG_DIR) or os.path.join(os.path.expanduser("~"), ".millstream", "log")


def configured_log_dir(configuration: cfg.Configuration) -> str:
    """``env.log.dir``, else ``MILLSTREAM_LOG_DIR``, else ``~/.millstream/log``."""
    return configuration.get(cfg.LOG_DIR) or default_log_dir()


def _safe_host(host: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "localhost"


class ProcessLog:
    """This process's claimed log file and its rotating handler (see the module docstring)."""

    def __init__(self, directory: str, role: str, max_bytes: int, backups: int, host: str | None = None) -> None:
        if max_bytes < 1:
            raise cfg.ConfigurationError(f"{cfg.LOG_FILE_MAX_SIZE.key}: must be at least 1 byte, got {max_bytes}")
        if backups < 1:
            raise cfg.ConfigurationError(f"{cfg.LOG_MAX_BACKUPS.key}: must be at least 1, got {backups}")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise cfg.ConfigurationError(f"{cfg.LOG_DIR.key}: cannot create log directory {directory}: {exc}") from exc
        self.directory = directory
        self.role = role
        host = _safe_host(host or socket.gethostname())
        self._lock_fd = -1
        for index in range(MAX_INDEX):
            stem = f"millstream-{role}-{index}-{host}"
            fd = os.open(os.path.join(directory, stem + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._lock_fd = fd
            self.name = stem + ".log"
            break
        else:
            raise cfg.ConfigurationError(f"{directory}: {MAX_INDEX} {role} processes on {host} hold a log file already")
        self.path = os.path.join(directory, self.name)
        self.handler = logging.handlers.RotatingFileHandler(self.path, maxBytes=max_bytes, backupCount=backups,
                                                            encoding="utf-8")
        self.handler.setFormatter(logging.Formatter(LOG_FORMAT))

    def files(self) -> list[LogFileInfo]:
        """The current log first, then its rotated backups (newest first), then stdout if a file."""
        found: list[LogFileInfo] = []
        for name in [self.name, *sorted((f for f in _listdir(self.directory) if f.startswith(self.name + ".")),
                                        key=_backup_number)]:
            size = _size(os.path.join(self.directory, name))
            if size is not None and (name == self.name or _backup_number(name) > 0):
                found.append(LogFileInfo(name, size, _mtime_ms(os.path.join(self.directory, name))))
        stdout = stdout_file()
        if stdout is not None and os.path.basename(stdout) not in {f.name for f in found}:
            size = _size(stdout)
            if size is not None:
                found.append(LogFileInfo(os.path.basename(stdout), size, _mtime_ms(stdout)))
        return found

    def resolve(self, name: str) -> str | None:
        """The path of the listed file called ``name`` (never anything else: no path tricks)."""
        if name not in {f.name for f in self.files()}:
            return None
        stdout = stdout_file()
        if stdout is not None and os.path.basename(stdout) == name and not os.path.exists(os.path.join(self.directory, name)):
            return stdout
        return os.path.join(self.directory, name)

    def close(self) -> None:
        self.handler.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _mtime_ms(path: str) -> int:
    try:
        return int(os.path.getmtime(path) * 1000)
    except OSError:
        return 0


def _backup_number(name: str) -> int:
    suffix = name.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def stdout_file() -> str | None:
    """The file this process's stdout writes to, when it is a regular file (else None)."""
    with contextlib.suppress(OSError):
        if os.path.isfile(f"/proc/self/fd/{1}"):
            return os.path.realpath("/proc/self/fd/1")
    return None


def read_tail(path: str, max_bytes: int = DEFAULT_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of the file, from the first whole line in them (blocking: call it
    from a thread). An OSError if the file cannot be read."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(size - start)
    if start > 0:
        newline = data.find(b"\n")
        data = data[newline + 1:] if newline >= 0 else data
    return data.decode("utf-8", errors="replace")


_current: ProcessLog | None = None


def install_process_log(role: str, configuration: cfg.Configuration) -> ProcessLog:
    """Claims this process's log file and sends the root logger's records to it too (stderr keeps
    its handler). One per process: a second call replaces the first."""
    global _current
    process_log = ProcessLog(configured_log_dir(configuration), role, configuration.get(cfg.LOG_FILE_MAX_SIZE),
                             configuration.get(cfg.LOG_MAX_BACKUPS))
    root = logging.getLogger()
    if _current is not None:
        root.removeHandler(_current.handler)
        _current.close()
    root.addHandler(process_log.handler)
    _current = process_log
    return process_log


def current_process_log() -> ProcessLog | None:
    """The log file :func:`install_process_log` set up in this process (None: none, e.g. embedded)."""
    return _current


def listed_files() -> tuple[list[LogFileInfo], str, str]:
    """This process's log files, its current log's name and its stdout file's name ("": none)."""
    process_log = current_process_log()
    stdout = stdout_file()
    if process_log is None:
        files = [] if stdout is None or _size(stdout) is None else [
            LogFileInfo(os.path.basename(stdout), _size(stdout) or 0, _mtime_ms(stdout))]
        return files, "", os.path.basename(stdout) if files and stdout else ""
    return process_log.files(), process_log.name, os.path.basename(stdout) if stdout else ""


def read_log(name: str = "", stdout: bool = False, max_bytes: int = 0) -> tuple[str | None, str]:
    """The end of this process's log (``name`` ""), its stdout file, or a listed file: (text, "")
    or (None, why not). Blocking: call it from a thread."""
    max_bytes = max_bytes if max_bytes > 0 else DEFAULT_TAIL_BYTES
    process_log = current_process_log()
    if stdout:
        path = stdout_file()
        if path is None:
            return None, "this process's stdout is not a file (it was started in a terminal or a pipe)"
    elif not name:
        if process_log is None:
            return None, "this process writes no log file (an embedded cluster logs to its program's log)"
        path = process_log.path
    else:
        path = process_log.resolve(name) if process_log is not None else None
        if path is None:
            listed = ", ".join(f.name for f in listed_files()[0]) or "none"
            return None, f"no log file named {name!r} here (files: {listed})"
    try:
        return read_tail(path, max_bytes), ""
    except OSError as exc:
        return None, f"cannot read {os.path.basename(path)}: {exc.strerror or exc}"
