"""Flink's restart backoff time strategies, pure: the caller passes the time in.

The JobMaster calls ``notify_failure(now_ms)`` on every task failure (it returns False when the
failure is merged into an attempt still waiting to restart), then ``can_restart()``; when True it
waits ``backoff_ms()`` and restarts, otherwise the job fails. Semantics and defaults are Flink
1.20's (``RestartStrategyOptions``, ``RestartBackoffTimeStrategyFactoryLoader``; the
exponential-delay rules and defaults date from Flink 1.19, FLIP-364):

- none (``disable``, ``none``, ``off``): never restarts.
- fixed-delay (``fixeddelay``): ``attempts`` restarts (default 1), each after ``delay`` (1 s); the
  failure after the last allowed restart fails the job.
- failure-rate (``failurerate``): restarts, ``delay`` (1 s) apart, unless more than
  ``max-failures-per-interval`` (1) failures fell within ``failure-rate-interval`` (1 min): the
  job fails when the oldest of the last max+1 failures is not older than the interval (strictly).
- exponential-delay (``exponentialdelay``): the k-th consecutive restart waits
  ``initial-backoff * backoff-multiplier**(k-1)`` (1 s, 1.5) plus a jitter drawn uniformly from
  ``[-j, +j]``, ``j = int(backoff * jitter-factor)`` (0.1), clamped to ``[initial-backoff,
  max-backoff]`` (max 1 min). Failures while a restart is still waiting are merged into it. A
  failure at least ``reset-backoff-threshold`` (1 h) after the last restart resets backoff and
  count; more than ``attempts-before-reset-backoff`` (unlimited) consecutive restarts fail the job.

Which strategy applies (Flink's order): the job's ``RestartStrategyConfiguration`` unless it is
the fallback one; else ``restart-strategy.type`` in the configuration; else exponential-delay
with its defaults when checkpointing is enabled, none when it is not.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Union

from millstream.common.restart_strategy import RestartStrategyConfiguration
from millstream.runtime import config as cfg
from millstream.runtime.config import parse_duration

if TYPE_CHECKING:
    from millstream.proto import jobgraph_pb2 as pb
    from millstream.runtime.config import Configuration

INFINITE_ATTEMPTS = 2**31 - 1  # Java's Integer.MAX_VALUE, Flink's "infinite"
_LONG_MAX = 2**63 - 1

TYPE = "restart-strategy.type"
_LEGACY_TYPE = "restart-strategy"  # Flink's deprecated key for the type
FIXED_DELAY_ATTEMPTS = "restart-strategy.fixed-delay.attempts"
FIXED_DELAY_DELAY = "restart-strategy.fixed-delay.delay"
FAILURE_RATE_MAX_FAILURES = "restart-strategy.failure-rate.max-failures-per-interval"
FAILURE_RATE_INTERVAL = "restart-strategy.failure-rate.failure-rate-interval"
FAILURE_RATE_DELAY = "restart-strategy.failure-rate.delay"
EXP_INITIAL_BACKOFF = "restart-strategy.exponential-delay.initial-backoff"
EXP_MAX_BACKOFF = "restart-strategy.exponential-delay.max-backoff"
EXP_MULTIPLIER = "restart-strategy.exponential-delay.backoff-multiplier"
EXP_RESET_THRESHOLD = "restart-strategy.exponential-delay.reset-backoff-threshold"
EXP_JITTER = "restart-strategy.exponential-delay.jitter-factor"
EXP_ATTEMPTS = "restart-strategy.exponential-delay.attempts-before-reset-backoff"

_TYPE_NAMES = {"disable": "none", "none": "none", "off": "none",
               "fixed-delay": "fixed-delay", "fixeddelay": "fixed-delay",
               "failure-rate": "failure-rate", "failurerate": "failure-rate",
               "exponential-delay": "exponential-delay", "exponentialdelay": "exponential-delay"}


class RandInt(Protocol):
    def randint(self, a: int, b: int) -> int: ...


class RestartBackoffTimeStrategy(Protocol):
    def can_restart(self) -> bool: ...
    def backoff_ms(self, now_ms: int | None = None) -> int: ...
    def notify_failure(self, now_ms: int) -> bool: ...


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# ---- what to build (both configuration routes produce one of these) ------------------------------
@dataclass(frozen=True)
class NoRestart:
    def create(self, rng: RandInt | None = None) -> NoRestartBackoffTimeStrategy:
        return NoRestartBackoffTimeStrategy()


@dataclass(frozen=True)
class FixedDelay:
    attempts: int = 1
    delay_ms: int = 1000

    def __post_init__(self) -> None:
        _check(self.attempts >= 0, f"{FIXED_DELAY_ATTEMPTS} must be at least 0, got {self.attempts}")
        _check(self.delay_ms >= 0, f"{FIXED_DELAY_DELAY} must be at least 0 ms, got {self.delay_ms}")

    def create(self, rng: RandInt | None = None) -> FixedDelayRestartBackoffTimeStrategy:
        return FixedDelayRestartBackoffTimeStrategy(self)


@dataclass(frozen=True)
class FailureRate:
    max_failures_per_interval: int = 1
    failure_rate_interval_ms: int = 60_000
    delay_ms: int = 1000

    def __post_init__(self) -> None:
        _check(self.max_failures_per_interval > 0,
               f"{FAILURE_RATE_MAX_FAILURES} must be greater than 0, got {self.max_failures_per_interval}")
        _check(self.failure_rate_interval_ms > 0,
               f"{FAILURE_RATE_INTERVAL} must be greater than 0 ms, got {self.failure_rate_interval_ms}")
        _check(self.delay_ms >= 0, f"{FAILURE_RATE_DELAY} must be at least 0 ms, got {self.delay_ms}")

    def create(self, rng: RandInt | None = None) -> FailureRateRestartBackoffTimeStrategy:
        return FailureRateRestartBackoffTimeStrategy(self)


@dataclass(frozen=True)
class ExponentialDelay:
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    backoff_multiplier: float = 1.5
    reset_backoff_threshold_ms: int = 3_600_000
    jitter_factor: float = 0.1
    attempts_before_reset_backoff: int = INFINITE_ATTEMPTS

    def __post_init__(self) -> None:
        _check(self.initial_backoff_ms >= 1, f"{EXP_INITIAL_BACKOFF} must be at least 1 ms, got {self.initial_backoff_ms}")
        _check(self.max_backoff_ms >= 1, f"{EXP_MAX_BACKOFF} must be at least 1 ms, got {self.max_backoff_ms}")
        _check(self.initial_backoff_ms <= self.max_backoff_ms,
               f"{EXP_INITIAL_BACKOFF} ({self.initial_backoff_ms} ms) cannot be higher than "
               f"{EXP_MAX_BACKOFF} ({self.max_backoff_ms} ms)")
        _check(self.backoff_multiplier > 1, f"{EXP_MULTIPLIER} must be greater than 1, got {self.backoff_multiplier}")
        _check(self.reset_backoff_threshold_ms >= 1,
               f"{EXP_RESET_THRESHOLD} must be at least 1 ms, got {self.reset_backoff_threshold_ms}")
        _check(0 <= self.jitter_factor <= 1, f"{EXP_JITTER} must be >= 0 and <= 1, got {self.jitter_factor}")
        _check(self.attempts_before_reset_backoff >= 1,
               f"{EXP_ATTEMPTS} must be at least 1, got {self.attempts_before_reset_backoff}")

    def create(self, rng: RandInt | None = None) -> ExponentialDelayRestartBackoffTimeStrategy:
        return ExponentialDelayRestartBackoffTimeStrategy(self, rng)


RestartStrategySpec = Union[NoRestart, FixedDelay, FailureRate, ExponentialDelay]


# ---- the strategies -------------------------------------------------------------------------------
class NoRestartBackoffTimeStrategy:
    def can_restart(self) -> bool:
        return False

    def backoff_ms(self, now_ms: int | None = None) -> int:
        return 0

    def notify_failure(self, now_ms: int) -> bool:
        return True


class FixedDelayRestartBackoffTimeStrategy:
    def __init__(self, spec: FixedDelay) -> None:
        self.spec = spec
        self.attempt = 0  # failures so far; restart k is allowed while k <= attempts

    def can_restart(self) -> bool:
        return self.attempt <= self.spec.attempts

    def backoff_ms(self, now_ms: int | None = None) -> int:
        return self.spec.delay_ms

    def notify_failure(self, now_ms: int) -> bool:
        self.attempt += 1
        return True


class FailureRateRestartBackoffTimeStrategy:
    def __init__(self, spec: FailureRate) -> None:
        self.spec = spec
        self._failures: deque[int] = deque()  # the last max+1 failure times

    def can_restart(self, now_ms: int | None = None) -> bool:
        """``now_ms`` defaults to the last failure's time (the JobMaster asks right after it)."""
        if len(self._failures) <= self.spec.max_failures_per_interval:
            return True
        now = self._failures[-1] if now_ms is None else now_ms
        return now - self._failures[0] > self.spec.failure_rate_interval_ms

    def backoff_ms(self, now_ms: int | None = None) -> int:
        return self.spec.delay_ms

    def notify_failure(self, now_ms: int) -> bool:
        if len(self._failures) > self.spec.max_failures_per_interval:
            self._failures.popleft()
        self._failures.append(now_ms)
        return True


class ExponentialDelayRestartBackoffTimeStrategy:
    def __init__(self, spec: ExponentialDelay, rng: RandInt | None = None) -> None:
        self.spec = spec
        self._rng: RandInt = rng if rng is not None else random.Random()
        self.attempt = 0  # consecutive restarts since the last reset
        self._next_restart_ms: int | None = None
        self._last_failure_ms = 0

    def can_restart(self) -> bool:
        return self.attempt <= self.spec.attempts_before_reset_backoff

    def backoff_ms(self, now_ms: int | None = None) -> int:
        """Time left until the pending restart; ``now_ms`` defaults to the last failure's time."""
        if self._next_restart_ms is None:
            raise RuntimeError("backoff_ms() before any notify_failure()")
        now = self._last_failure_ms if now_ms is None else now_ms
        return max(0, self._next_restart_ms - now)

    def notify_failure(self, now_ms: int) -> bool:
        if self._next_restart_ms is not None and now_ms <= self._next_restart_ms:
            return False  # merged into the restart that is still waiting
        if self._next_restart_ms is None or now_ms - self._next_restart_ms >= self.spec.reset_backoff_threshold_ms:
            self.attempt = 0
        self._next_restart_ms = now_ms + self._backoff(self.attempt)
        self._last_failure_ms = now_ms
        self.attempt += 1
        return True

    def _backoff(self, attempt: int) -> int:
        spec = self.spec
        try:  # Java's (long) cast saturates at Long.MAX_VALUE where the double overflows
            backoff = min(int(spec.initial_backoff_ms * spec.backoff_multiplier ** attempt), _LONG_MAX)
        except OverflowError:
            backoff = _LONG_MAX
        jitter = 0
        if spec.jitter_factor:
            offset = int(backoff * spec.jitter_factor)
            jitter = self._rng.randint(-offset, offset)
        return max(spec.initial_backoff_ms, min(backoff + jitter, spec.max_backoff_ms))


# ---- configuration routes ------------------------------------------------------------------------
def _int(options: Mapping[str, object], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    raise ValueError(f"{key}: expected an integer, got {value!r}")


def _float(options: Mapping[str, object], key: str, default: float) -> float:
    value = options.get(key, default)
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        return float(value)
    except ValueError:
        raise ValueError(f"{key}: expected a number, got {value!r}") from None


def _duration(options: Mapping[str, object], key: str, default_ms: int) -> int:
    value = options.get(key, default_ms)
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(f"{key}: expected a duration like '10 s', '1 min' or milliseconds, got {value!r}") from None


def spec_from_options(options: Mapping[str, object]) -> RestartStrategySpec | None:
    """The strategy that ``restart-strategy.type`` and its options name; None when no type is set."""
    raw = options.get(TYPE, options.get(_LEGACY_TYPE))
    if raw is None:
        return None
    kind = _TYPE_NAMES.get(str(raw).strip().lower())
    if kind is None:
        raise ValueError(f"{TYPE}: unknown restart strategy {raw!r}; accepted: {', '.join(_TYPE_NAMES)}")
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(_int(options, FIXED_DELAY_ATTEMPTS, 1), _duration(options, FIXED_DELAY_DELAY, 1000))
    if kind == "failure-rate":
        return FailureRate(_int(options, FAILURE_RATE_MAX_FAILURES, 1),
                           _duration(options, FAILURE_RATE_INTERVAL, 60_000),
                           _duration(options, FAILURE_RATE_DELAY, 1000))
    defaults = ExponentialDelay()
    return ExponentialDelay(_duration(options, EXP_INITIAL_BACKOFF, defaults.initial_backoff_ms),
                            _duration(options, EXP_MAX_BACKOFF, defaults.max_backoff_ms),
                            _float(options, EXP_MULTIPLIER, defaults.backoff_multiplier),
                            _duration(options, EXP_RESET_THRESHOLD, defaults.reset_backoff_threshold_ms),
                            _float(options, EXP_JITTER, defaults.jitter_factor),
                            _int(options, EXP_ATTEMPTS, defaults.attempts_before_reset_backoff))


def spec_from_api(conf: RestartStrategyConfiguration) -> RestartStrategySpec | None:
    """The strategy a ``RestartStrategies.*`` configuration names; None for the fallback one.
    The API's exponential delay has no attempts: Flink takes the option's default (unlimited)."""
    kind = _TYPE_NAMES.get(conf.type, conf.type)
    if kind == "fallback":
        return None
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(conf.attempts, conf.delay_ms)
    if kind == "failure-rate":
        return FailureRate(conf.max_failures_per_interval, conf.failure_rate_interval_ms, conf.delay_ms)
    if kind == "exponential-delay":
        return ExponentialDelay(conf.initial_backoff_ms, conf.max_backoff_ms, conf.backoff_multiplier,
                                conf.reset_backoff_threshold_ms, conf.jitter_factor)
    raise ValueError(f"unknown restart strategy configuration {conf!r}")


def default_spec(checkpointing_enabled: bool) -> RestartStrategySpec:
    """Flink >= 1.19: exponential-delay with its defaults under checkpointing, else none."""
    return ExponentialDelay() if checkpointing_enabled else NoRestart()


def resolve_restart_strategy(job: RestartStrategyConfiguration | None, options: Mapping[str, object],
                             checkpointing_enabled: bool) -> RestartStrategySpec:
    """Flink's order: the job's configuration (unless fallback), the options, the default."""
    chosen = spec_from_api(job) if job is not None else None
    if chosen is None:
        chosen = spec_from_options(options)
    return chosen if chosen is not None else default_spec(checkpointing_enabled)


def options_of(conf: "Configuration") -> dict[str, object]:
    """The ``restart-strategy.*`` values of a cluster configuration, for :func:`spec_from_options`
    (no type when ``restart-strategy.type`` is unset)."""
    options: dict[str, object] = {
        FIXED_DELAY_ATTEMPTS: conf.get(cfg.RESTART_FIXED_DELAY_ATTEMPTS),
        FIXED_DELAY_DELAY: conf.get(cfg.RESTART_FIXED_DELAY_DELAY),
        FAILURE_RATE_MAX_FAILURES: conf.get(cfg.RESTART_FAILURE_RATE_MAX_FAILURES),
        FAILURE_RATE_INTERVAL: conf.get(cfg.RESTART_FAILURE_RATE_INTERVAL),
        FAILURE_RATE_DELAY: conf.get(cfg.RESTART_FAILURE_RATE_DELAY),
        EXP_INITIAL_BACKOFF: conf.get(cfg.RESTART_EXP_INITIAL_BACKOFF),
        EXP_MAX_BACKOFF: conf.get(cfg.RESTART_EXP_MAX_BACKOFF),
        EXP_MULTIPLIER: conf.get(cfg.RESTART_EXP_MULTIPLIER),
        EXP_RESET_THRESHOLD: conf.get(cfg.RESTART_EXP_RESET_THRESHOLD),
        EXP_JITTER: conf.get(cfg.RESTART_EXP_JITTER),
        EXP_ATTEMPTS: conf.get(cfg.RESTART_EXP_ATTEMPTS),
    }
    kind = conf.get(cfg.RESTART_STRATEGY_TYPE)
    if kind is not None:
        options[TYPE] = kind
    return options


def spec_for_job(job_graph: "pb.JobGraph", cluster: Mapping[str, object],
                 checkpointing_enabled: bool | None = None) -> RestartStrategySpec:
    """A submitted job's strategy: its ``set_restart_strategy`` (unless fallback), then the
    ``restart-strategy.*`` keys of its own configuration, then the cluster's, then Flink's default.
    Raises ValueError naming the bad key or value."""
    config = job_graph.execution_config
    job: RestartStrategyConfiguration | None = None
    if config.HasField("restart_strategy") and config.restart_strategy.type:
        r = config.restart_strategy
        job = RestartStrategyConfiguration(
            r.type, r.attempts, r.delay_ms, r.max_failures_per_interval, r.failure_rate_interval_ms,
            r.initial_backoff_ms, r.max_backoff_ms, r.backoff_multiplier, r.reset_backoff_threshold_ms,
            r.jitter_factor)
    own = {k: v for k, v in config.configuration.items() if k.startswith(_LEGACY_TYPE)}
    # Each key of the job's own (its Configuration, `millstream run -D`) wins over the cluster's;
    # a job's type under the deprecated key wins over the cluster's type under the new one.
    base = {k: v for k, v in cluster.items() if not (k == TYPE and _LEGACY_TYPE in own)}
    options = {**base, **own}
    if checkpointing_enabled is None:  # the job's own setting; the cluster's interval counts too
        checkpointing_enabled = config.checkpoint_interval_ms > 0
    return resolve_restart_strategy(job, options, checkpointing_enabled)


def describe(spec: RestartStrategySpec) -> str:
    """Flink's name of the strategy with its settings, for messages."""
    if isinstance(spec, FixedDelay):
        return f"fixed-delay (attempts {spec.attempts}, delay {spec.delay_ms} ms)"
    if isinstance(spec, FailureRate):
        return (f"failure-rate (max {spec.max_failures_per_interval} failures per "
                f"{spec.failure_rate_interval_ms} ms, delay {spec.delay_ms} ms)")
    if isinstance(spec, ExponentialDelay):
        return f"exponential-delay (initial backoff {spec.initial_backoff_ms} ms, max {spec.max_backoff_ms} ms)"
    return "none"
