"""Ready-made :class:`AsyncRetryStrategy` classes (PyFlink's ``async_retry_strategies``)."""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

from millstream.datastream.functions import AsyncRetryPredicate, AsyncRetryStrategy

__all__ = ["RetryPredicate", "NoRetryStrategy", "FixedDelayRetryStrategy", "ExponentialBackoffDelayRetryStrategy"]

OUT = TypeVar("OUT")
ResultPredicate = Callable[[list], bool]
ExceptionPredicate = Callable[[Exception], bool]


def _positive(value: float, what: str) -> None:
    if not value > 0:
        raise ValueError(f"{what} should be greater than zero, got {value!r}")


class RetryPredicate(AsyncRetryPredicate[OUT], Generic[OUT]):
    def __init__(self, result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None) -> None:
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> ResultPredicate | None:
        return self._result_predicate

    def exception_predicate(self) -> ExceptionPredicate | None:
        return self._exception_predicate


class NoRetryStrategy(AsyncRetryStrategy[OUT], Generic[OUT]):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy[OUT], Generic[OUT]):
    """At most ``max_attempts`` retries, each after ``backoff_time_millis``."""

    def __init__(self, max_attempts: int, backoff_time_millis: int, result_predicate: ResultPredicate | None,
                 exception_predicate: ExceptionPredicate | None) -> None:
        _positive(max_attempts, "max_attempts")
        _positive(backoff_time_millis, "backoff_time_millis")
        self._max_attempts = max_attempts
        self._backoff_time_millis = backoff_time_millis
        self._predicate: RetryPredicate[OUT] = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self._backoff_time_millis

    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return self._predicate


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy[OUT], Generic[OUT]):
    """At most ``max_attempts`` retries; the first after ``initial_delay`` ms, each next one
    ``multiplier`` times longer, never longer than ``max_retry_delay`` ms."""

    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None) -> None:
        for value, what in ((max_attempts, "max_attempts"), (initial_delay, "initial_delay"),
                            (max_retry_delay, "max_retry_delay"), (multiplier, "multiplier")):
            _positive(value, what)
        self._max_attempts = max_attempts
        self._initial_delay = initial_delay
        self._max_retry_delay = max_retry_delay
        self._multiplier = multiplier
        self._predicate: RetryPredicate[OUT] = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        # a function of the attempt alone: the strategy is shared by every record in flight
        delay = self._initial_delay * self._multiplier ** max(current_attempts - 1, 0)
        return int(min(delay, self._max_retry_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return self._predicate


NO_RETRY_STRATEGY: NoRetryStrategy = NoRetryStrategy()
