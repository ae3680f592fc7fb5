"""The import alias ``pyflink`` -> ``millstream``, for the harness process only.

:func:`install` puts a meta-path finder first on ``sys.meta_path``. For ``pyflink.<x>`` it gives:
- a stand-in module of this package when ``<x>`` is one of PyFlink's Java-backed test utilities
  (:data:`STANDINS`);
- PyFlink's own file when ``<x>`` lies under a ``tests`` package (the test modules themselves,
  read from ``tests_root``, a checkout's ``flink-python/pyflink``);
- otherwise a proxy of ``millstream.<x>``: its attributes are Millstream's own objects (so
  ``pyflink.common.Row is millstream.common.Row``), and a name Millstream lacks resolves to a
  :class:`Missing` placeholder that raises :class:`MillstreamLacks` when used. A module Millstream
  lacks altogether is an empty proxy of the same kind. One missing name thus fails the tests that
  use it, not every test of the module that imports it.

Test modules get their own ``__import__``: importing ``py4j`` (PyFlink's Java gateway) from a
test raises :class:`JavaObjectNeeded`, while Millstream's own imports of it (through PySpark) are
untouched.
"""
from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any, Sequence

from tests.pyflink_compat.classify import JavaObjectNeeded, MillstreamLacks

PREFIX = "pyflink"
_HERE = os.path.dirname(os.path.abspath(__file__))

# PyFlink module -> this package's stand-in file (under standins/).
STANDINS = {
    "pyflink.testing": "testing_pkg.py",
    "pyflink.testing.test_case_utils": "case_utils.py",
    "pyflink.datastream.tests.test_util": "collect_sink.py",
    "pyflink.java_gateway": "java_gateway.py",
    "pyflink.util.java_utils": "java_utils.py",
    "pyflink.find_flink_home": "find_flink_home.py",
}


_NOT_API = ("__", "pytest", "setup", "teardown", "setUp", "tearDown", "load_tests")


class Missing:
    """A PyFlink name Millstream does not provide: raises :class:`MillstreamLacks` once used."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def _lacks(self) -> MillstreamLacks:
        return MillstreamLacks(f"Millstream lacks {self._qualname}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("_", "pytest")):
            raise AttributeError(name)  # what pytest and the copy/pickle protocols probe for
        raise self._lacks()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._lacks()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[Any, ...]:
        raise self._lacks()

    def __reduce__(self) -> Any:
        raise self._lacks()  # never shipped into a job, where the task would meet it instead

    def __repr__(self) -> str:
        return f"<missing {self._qualname}>"


class ProxyModule(types.ModuleType):
    """``pyflink.<x>`` over ``millstream.<x>`` (``target`` None: Millstream has no such module)."""

    def __init__(self, name: str, target: types.ModuleType | None) -> None:
        super().__init__(name)
        self.__dict__["_target"] = target
        if target is None or hasattr(target, "__path__"):
            self.__path__: list[str] = []  # a package: its submodules come through the finder too

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__["_target"]
        if target is not None:
            try:
                return getattr(target, name)
            except AttributeError:
                pass
            sub = f"{self.__name__}.{name}"
            # a submodule not imported yet (`pyflink.datastream.window` after `import pyflink`)
            if sub in STANDINS or _module_exists("millstream" + sub[len(PREFIX):]):
                return importlib.import_module(sub)
        if name.startswith(_NOT_API):
            raise AttributeError(name)  # what pytest and unittest probe modules for
        return Missing(f"{self.__name__}.{name}")


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _test_import(java_modules: Sequence[str] = ("py4j",)):
    """An ``__import__`` for test modules: ``py4j`` is PyFlink's Java gateway."""
    real = builtins.__import__

    def guarded(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name.split(".")[0] in java_modules:
            raise JavaObjectNeeded(f"imports {name}, PyFlink's Java gateway library")
        return real(name, globals, locals, fromlist, level)

    return guarded


class _Loader(importlib.abc.Loader):
    def __init__(self, finder: "PyFlinkAliasFinder") -> None:
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        kind = spec.loader_state
        if kind == "proxy":
            target = self.finder.millstream_module(spec.name)
            return ProxyModule(spec.name, target)
        return None  # a file module: the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        spec = module.__spec__
        assert spec is not None
        if spec.loader_state == "proxy":
            return
        path = spec.origin
        assert path is not None
        if spec.loader_state == "test":
            own = dict(vars(builtins))
            own["__import__"] = _test_import()
            module.__dict__["__builtins__"] = own
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        exec(code, module.__dict__)


class PyFlinkAliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``pyflink.*`` to stand-ins, PyFlink's test files, or Millstream proxies."""

    def __init__(self, tests_root: str | None) -> None:
        self.tests_root = os.path.abspath(tests_root) if tests_root else None
        self.loader = _Loader(self)

    @staticmethod
    def millstream_module(name: str) -> types.ModuleType | None:
        """``millstream.<x>`` for ``pyflink.<x>``, or None when Millstream has no such module."""
        target = "millstream" + name[len(PREFIX):]
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as e:
            # e.name None: Millstream's own word that it does not provide this PyFlink module
            # (NotProvidedByMillstream); a name elsewhere is a real missing dependency
            if e.name is None or target == e.name or target.startswith(e.name + "."):
                return None
            raise

    def _test_file(self, name: str) -> tuple[str, bool] | None:
        """PyFlink's own file for a module under a ``tests`` package: (path, is_package)."""
        parts = name.split(".")[1:]
        if self.tests_root is None or "tests" not in parts:
            return None
        base = os.path.join(self.tests_root, *parts)
        if os.path.isfile(os.path.join(base, "__init__.py")):
            return os.path.join(base, "__init__.py"), True
        if os.path.isdir(base):
            return base, True  # a tests folder without __init__.py: a namespace of test files
        if os.path.isfile(base + ".py"):
            return base + ".py", False
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != PREFIX and not fullname.startswith(PREFIX + "."):
            return None
        if fullname in STANDINS:
            origin = os.path.join(_HERE, "standins", STANDINS[fullname])
            spec = importlib.machinery.ModuleSpec(fullname, self.loader, origin=origin,
                                                  is_package=fullname == "pyflink.testing")
            spec.loader_state = "standin"
            spec.has_location = True
            if fullname == "pyflink.testing":
                spec.submodule_search_locations = []
            return spec
        found = self._test_file(fullname)
        if found is not None:
            file, is_package = found
            if os.path.isdir(file):
                spec = importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)
                spec.loader_state = "proxy"
                spec.submodule_search_locations = [file]
                return spec
            spec = importlib.machinery.ModuleSpec(fullname, self.loader, origin=file, is_package=is_package)
            spec.loader_state = "test"
            spec.has_location = True
            if is_package:
                spec.submodule_search_locations = [os.path.dirname(file)]
            return spec
        spec = importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)
        spec.loader_state = "proxy"
        spec.submodule_search_locations = []
        return spec


def install(tests_root: str | None) -> PyFlinkAliasFinder:
    """Puts the alias first on ``sys.meta_path`` (idempotent) and returns its finder."""
    for finder in sys.meta_path:
        if isinstance(finder, PyFlinkAliasFinder):
            return finder
    finder = PyFlinkAliasFinder(tests_root)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall() -> None:
    """Removes the alias and every ``pyflink`` module it made (for unit tests of the alias)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, PyFlinkAliasFinder)]
    for name in [n for n in sys.modules if n == PREFIX or n.startswith(PREFIX + ".")]:
        del sys.modules[name]
