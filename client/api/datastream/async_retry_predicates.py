"""Predicates for :meth:`AsyncRetryStrategy.fixed_delay` and friends (PyFlink's
``async_retry_predicates``): retry on an empty result, on any exception, or on one type."""
from __future__ import annotations

from typing import Any


def empty_result_predicate(result: list | None) -> bool:
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: Any) -> bool:
    return isinstance(error, expected_error_type)
