"""Restart strategies with PyFlink's factory names, recorded in the JobGraph; the JobMaster applies
them (``millstream.runtime.restart_strategy``). Without checkpoints a job restarts from the beginning."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartStrategyConfiguration:
    """One restart strategy (Flink's ``restart-strategy.type`` and its options)."""

    type: str
    attempts: int = 0
    delay_ms: int = 0
    max_failures_per_interval: int = 0
    failure_rate_interval_ms: int = 0
    initial_backoff_ms: int = 0
    max_backoff_ms: int = 0
    backoff_multiplier: float = 0.0
    reset_backoff_threshold_ms: int = 0
    jitter_factor: float = 0.0


def _millis(value: object) -> int:
    to_ms = getattr(value, "to_milliseconds", None)
    return int(to_ms()) if to_ms else int(value)  # type: ignore[call-overload]


class RestartStrategies:
    @staticmethod
    def no_restart() -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("none")

    @staticmethod
    def fall_back_restart() -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("fallback")

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: object) -> RestartStrategyConfiguration:
        if restart_attempts < 0:
            raise ValueError(f"restart attempts must be >= 0, got {restart_attempts}")
        return RestartStrategyConfiguration(
            "fixed-delay", attempts=restart_attempts, delay_ms=_millis(delay_between_attempts)
        )

    @staticmethod
    def failure_rate_restart(
        failure_rate: int, failure_interval: object, delay_interval: object
    ) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration(
            "failure-rate",
            max_failures_per_interval=failure_rate,
            failure_rate_interval_ms=_millis(failure_interval),
            delay_ms=_millis(delay_interval),
        )

    @staticmethod
    def exponential_delay_restart(
        initial_backoff: object,
        max_backoff: object,
        backoff_multiplier: float,
        reset_backoff_threshold: object,
        jitter_factor: float,
    ) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration(
            "exponential-delay",
            initial_backoff_ms=_millis(initial_backoff),
            max_backoff_ms=_millis(max_backoff),
            backoff_multiplier=float(backoff_multiplier),
            reset_backoff_threshold_ms=_millis(reset_backoff_threshold),
            jitter_factor=float(jitter_factor),
        )
