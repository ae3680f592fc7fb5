"""Pickling user functions so that their tracebacks name the user's file, line and source line.

cloudpickle (since 3.0) sends the code of a function defined in ``__main__`` (a job script) by
value and replaces its ``co_filename`` with ``"<dynamic-code>"``, to make the bytes independent of
where the function was defined. A task's traceback then reads ``File "<dynamic-code>", line 7``
with no source line, on the CLI, in REST's exceptions and in the web UI. Flink's Python workers show
the user's file, so we keep the original file name, and we carry the file's text along (once per
file per pickle), registered in the worker's :mod:`linecache` when the code is loaded: the source
line shows even on a host where the job script does not exist.
"""
from __future__ import annotations

import io
import linecache
import os
import threading
import types
from typing import Any

import cloudpickle
from cloudpickle import cloudpickle as _cloudpickle_impl

# Held while a task unpickles its operators and partitioners. Slot placement runs a slot's subtasks
# as threads of one process, and unpickling imports modules (the user's, millstream.table's); when
# two threads import modules that import each other, Python hands one of them the other's half-run
# module ("partially initialized module ... has no attribute"), so these imports go one at a time.
LOADING_LOCK = threading.RLock()

MAX_SOURCE_BYTES = 1 << 20  # a bigger "script" is not sent along; its lines show only where it exists


def _source_lines(filename: str) -> tuple[str, ...] | None:
    """The lines of ``filename`` as :mod:`linecache` keeps them, or None when it is not a readable file."""
    try:
        if not os.path.isfile(filename) or os.path.getsize(filename) > MAX_SOURCE_BYTES:
            return None
    except OSError:
        return None
    lines = linecache.getlines(filename)
    return tuple(lines) if lines else None


def restore_code(args: tuple, filename: str, lines: tuple[str, ...] | None) -> types.CodeType:
    """Unpickling side: the code object with its original file name; its source goes to linecache."""
    code = types.CodeType(*args).replace(co_filename=filename)
    if lines:
        # mtime None: linecache.checkcache leaves the entry alone (as for a module's loader source).
        linecache.cache[filename] = (sum(len(line) for line in lines), None, list(lines), filename)
    return code


class UserCodePickler(cloudpickle.Pickler):
    """cloudpickle's Pickler, except that code objects keep their file name and carry their source."""

    def __init__(self, file: Any, protocol: int | None = None) -> None:
        super().__init__(file, protocol=protocol)
        self._sources: dict[str, tuple[str, ...] | None] = {}  # one tuple per file: the memo shares it

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            _, args = _cloudpickle_impl._code_reduce(obj)
            filename = obj.co_filename
            if filename not in self._sources:
                self._sources[filename] = _source_lines(filename)
            return restore_code, (args, filename, self._sources[filename])
        return super().reducer_override(obj)


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps`` for user functions (read back with plain ``pickle.loads``)."""
    with io.BytesIO() as file:
        UserCodePickler(file).dump(obj)
        return file.getvalue()
