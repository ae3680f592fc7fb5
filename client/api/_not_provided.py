"""Imports of PyFlink modules that Millstream does not provide yet fail naming the module.

An import hook placed after Python's own finders: it is consulted only for a ``millstream.*`` module
that does not exist, and answers only for the PyFlink modules of
:data:`millstream._pyflink_modules.PYFLINK_MODULES`. Importing one raises
:class:`NotProvidedByMillstream`, a ``ModuleNotFoundError`` (so ``except ImportError`` still works)
whose message names the module and its PyFlink counterpart. Any other missing module fails as usual.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Sequence

from millstream._pyflink_modules import PYFLINK_MODULES

__all__ = ["NotProvidedByMillstream", "install"]

_KNOWN = frozenset(PYFLINK_MODULES)


class NotProvidedByMillstream(ModuleNotFoundError):
    """A PyFlink module that has no Millstream counterpart yet."""


def _pyflink_module(fullname: str) -> str | None:
    """The PyFlink module ``fullname`` (``millstream.X``) stands for, when it is a known one.

    Only exact names: a module under a package Millstream lacks (``millstream.table.udf``) fails at
    its package's import first, and a name under a package Millstream has
    (``millstream.datastream.no_such``) is a plain missing module, not a PyFlink one."""
    if not fullname.startswith("millstream."):
        return None
    pyflink = "pyflink" + fullname[len("millstream"):]
    return pyflink if pyflink in _KNOWN else None


class _NotProvidedLoader(importlib.abc.Loader):
    def __init__(self, pyflink: str) -> None:
        self.pyflink = pyflink

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        # name stays None: `from millstream.x import y` would otherwise swallow this error in favour
        # of a vaguer "cannot import name 'y'".
        raise NotProvidedByMillstream(
            f"No module named {spec.name!r}: PyFlink's {self.pyflink} is not provided by Millstream yet "
            "(see the README's PyFlink API coverage)"
        )

    def exec_module(self, module: Any) -> None:  # never reached: create_module raises
        raise NotProvidedByMillstream(module.__name__)


class _NotProvidedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        pyflink = _pyflink_module(fullname)
        if pyflink is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _NotProvidedLoader(pyflink))


def install() -> None:
    """Appends the hook to ``sys.meta_path`` once (after the finders of real modules)."""
    if not any(isinstance(f, _NotProvidedFinder) for f in sys.meta_path):
        sys.meta_path.append(_NotProvidedFinder())
