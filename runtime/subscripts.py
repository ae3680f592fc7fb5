"""User functions that only subscript an argument by a constant, run as ``operator.itemgetter``.

``key_by(lambda e: e[1])`` and a TimestampAssigner whose ``extract_timestamp`` returns
``value[0]`` are the common shapes of PyFlink programs. Calling such a function and calling
``operator.itemgetter(c)`` on the argument are the same subscription (the same ``__getitem__``
call, result and error), but the getter is a C call: ``map`` runs it per record without a Python
frame (~40 ns a record). Anything else (a default, a closure, a global, another constant type,
another bytecode) is called as written.
"""
from __future__ import annotations

import dis
import types
from operator import itemgetter
from typing import Any, Callable

__all__ = ["field_getter", "getter_of", "subscript_of"]

_TEMPLATE = (lambda record: record[0]).__code__  # RESUME, LOAD_FAST 0, LOAD_CONST 1, BINARY_SUBSCR, RETURN_VALUE
_LOAD_FAST_0 = bytes((dis.opmap["LOAD_FAST"], 0))


def _template(position: int) -> bytes:
    """The bytecode of ``lambda *args: args[position][<constant>]`` (the same but for LOAD_FAST's
    operand); if this Python compiles the template otherwise, nothing matches and all is called."""
    return _TEMPLATE.co_code.replace(_LOAD_FAST_0, bytes((dis.opmap["LOAD_FAST"], position)), 1)


def subscript_of(fn: Any, position: int = 0, arity: int = 1) -> int | str | None:
    """``c`` when ``fn(*args)`` (``arity`` arguments) is exactly ``args[position][c]`` for an int
    or str constant ``c``: a plain function (a lambda or a def, any argument names, no default,
    closure or global), a method bound to its object (``self`` comes first), or, for one argument,
    ``operator.itemgetter(c)``. None otherwise."""
    if type(fn) is itemgetter:
        items = fn.__reduce__()[1]
        field = items[0] if arity == 1 and len(items) == 1 else None
        return field if type(field) in (int, str) else None
    if type(fn) is types.MethodType:
        fn, position, arity = fn.__func__, position + 1, arity + 1
    code = getattr(fn, "__code__", None)
    if (type(fn) is not types.FunctionType or code is None or code.co_argcount != arity
            or code.co_kwonlyargcount or code.co_names or code.co_freevars or len(code.co_consts) != 2
            or fn.__defaults__ is not None or fn.__kwdefaults__ is not None or code.co_code != _template(position)):
        return None
    field = code.co_consts[1]  # [0] is None or a def's docstring
    return field if type(field) in (int, str) else None


def getter_of(fn: Any, position: int = 0, arity: int = 1) -> Callable[[Any], Any] | None:
    """``operator.itemgetter(c)`` applied to argument ``position`` when ``fn`` is exactly
    ``args[position][c]`` (see :func:`subscript_of`), else None."""
    field = subscript_of(fn, position, arity)
    return None if field is None else itemgetter(field)


def field_getter(fn: Callable[..., Any]) -> Callable[[Any], Any]:
    """``operator.itemgetter(c)`` for a one-argument ``fn`` that is ``r[c]``, else ``fn`` itself."""
    return getter_of(fn) or fn
