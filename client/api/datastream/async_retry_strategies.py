"""Ready-made :class:`AsyncRetryStrategy` classes (PyFlink's ``async_retry_strategies``), with
their base classes, which ``functions`` re-exports under PyFlink's names there: the factories on
:class:`AsyncRetryStrategy` build the classes below."""
from __future__ import annotations

import abc
from typing import Callable, Generic, TypeVar

__all__ = ["RetryPredicate", "NoRetryStrategy", "FixedDelayRetryStrategy", "ExponentialBackoffDelayRetryStrategy"]

OUT = TypeVar("OUT")
ResultPredicate = Callable[[list], bool]
ExceptionPredicate = Callable[[Exception], bool]


class AsyncRetryPredicate(Generic[OUT], abc.ABC):
    """When a finished call is retried: its result list matches ``result_predicate()`` or its
    exception matches ``exception_predicate()`` (None: never on that ground)."""

    def result_predicate(self) -> Callable[[list[OUT]], bool] | None:
        return None

    def exception_predicate(self) -> Callable[[Exception], bool] | None:
        return None


class AsyncRetryStrategy(Generic[OUT], abc.ABC):
    """How often and after what pause a call that matched the retry predicate is tried again.
    ``current_attempts`` counts the attempts made so far (1 after the first call)."""

    @abc.abstractmethod
    def can_retry(self, current_attempts: int) -> bool: ...

    @abc.abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int: ...

    @abc.abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]: ...

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int,
                    result_predicate: Callable[[list[OUT]], bool] | None = None,
                    exception_predicate: Callable[[Exception], bool] | None = None) -> "AsyncRetryStrategy[OUT]":
        """Up to ``max_attempts`` retries, ``backoff_time_millis`` apart."""
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                            result_predicate: Callable[[list[OUT]], bool] | None = None,
                            exception_predicate: Callable[[Exception], bool] | None = None) -> "AsyncRetryStrategy[OUT]":
        """Up to ``max_attempts`` retries, the pause growing from ``initial_delay`` by ``multiplier``
        up to ``max_retry_delay`` milliseconds."""
        return ExponentialBackoffDelayRetryStrategy(max_attempts, initial_delay, max_retry_delay, multiplier,
                                                    result_predicate, exception_predicate)


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
