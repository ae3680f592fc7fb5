"""Restart backoff strategies from Flink 1.20's rules, documented defaults and examples
(docs/ops/state/task_failure_recovery), and the two configuration routes."""
from __future__ import annotations

import pytest

from millstream.common.restart_strategy import RestartStrategies
from millstream.runtime.restart_strategy import (
    INFINITE_ATTEMPTS, ExponentialDelay, FailureRate, FixedDelay, NoRestart, RestartBackoffTimeStrategy,
    default_spec,
    resolve_restart_strategy, spec_from_api, spec_from_options)


class Extreme:
    """An injectable random that always draws the lowest or the highest jitter."""

    def __init__(self, high: bool) -> None:
        self.high = high
        self.ranges: list[tuple[int, int]] = []

    def randint(self, a: int, b: int) -> int:
        self.ranges.append((a, b))
        return b if self.high else a


# ---- none / fixed-delay ----------------------------------------------------------------------------
def test_no_restart_never_restarts() -> None:
    strategy = NoRestart().create()
    strategy.notify_failure(0)
    assert strategy.can_restart() is False


def test_fixed_delay_allows_exactly_attempts_restarts() -> None:
    strategy = FixedDelay(attempts=3, delay_ms=10_000).create()
    verdicts = []
    for t in range(4):
        assert strategy.notify_failure(t * 60_000) is True
        verdicts.append(strategy.can_restart())
        assert strategy.backoff_ms() == 10_000
    assert verdicts == [True, True, True, False]


def test_fixed_delay_with_zero_attempts_fails_on_the_first_failure() -> None:
    strategy = FixedDelay(attempts=0, delay_ms=0).create()
    strategy.notify_failure(0)
    assert strategy.can_restart() is False


# ---- exponential-delay -------------------------------------------------------------------------------
def failures_after_each_restart(strategy: RestartBackoffTimeStrategy, count: int, start: int = 0) -> list[int]:
    """Fails ``count`` times, each time 1 ms after the previous restart happened; the backoffs."""
    now, backoffs = start, []
    for _ in range(count):
        assert strategy.notify_failure(now) is True
        backoff = strategy.backoff_ms()
        backoffs.append(backoff)
        now += backoff + 1
    return backoffs


def test_exponential_delay_documented_example() -> None:
    # initial 1 s, multiplier 2, max 10 s, no jitter: 1, 2, 4, 8, then 10 s forever
    strategy = ExponentialDelay(1000, 10_000, 2.0, 3_600_000, 0.0).create()
    assert failures_after_each_restart(strategy, 7) == [1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]
    assert strategy.can_restart()


def test_exponential_delay_flink_defaults_grow_by_one_and_a_half_up_to_a_minute() -> None:
    strategy = ExponentialDelay(jitter_factor=0.0).create()
    backoffs = failures_after_each_restart(strategy, 12)
    assert backoffs[:5] == [1000, 1500, 2250, 3375, 5062]
    assert backoffs[-1] == 60_000 and max(backoffs) == 60_000


def test_exponential_delay_jitter_range_from_the_docs() -> None:
    # jitter 0.1: the 3rd retry waits between 3.6 s and 4.4 s, the 4th between 7.2 s and 8.8 s
    for high, third, fourth in ((False, 3600, 7200), (True, 4400, 8800)):
        rng = Extreme(high)
        strategy = ExponentialDelay(1000, 10_000, 2.0, 3_600_000, 0.1).create(rng)
        backoffs = failures_after_each_restart(strategy, 4)
        assert backoffs[2:] == [third, fourth]
        assert rng.ranges == [(-100, 100), (-200, 200), (-400, 400), (-800, 800)]


def test_exponential_delay_jitter_never_leaves_initial_and_max_backoff() -> None:
    low = ExponentialDelay(1000, 1500, 1.5, 3_600_000, 1.0).create(Extreme(False))
    assert failures_after_each_restart(low, 1) == [1000]  # 1000 - 1000 is raised to the initial backoff
    high = ExponentialDelay(1000, 1500, 1.5, 3_600_000, 1.0).create(Extreme(True))
    assert failures_after_each_restart(high, 2) == [1500, 1500]  # capped at max-backoff


def test_exponential_delay_merges_failures_while_a_restart_is_waiting() -> None:
    strategy = ExponentialDelay(1000, 60_000, 2.0, 3_600_000, 0.0).create()
    assert strategy.notify_failure(0) is True  # restart at 1000
    assert strategy.notify_failure(500) is False
    assert strategy.notify_failure(1000) is False  # still not restarted (now <= restart time)
    assert strategy.backoff_ms(500) == 500 and strategy.backoff_ms(2000) == 0
    assert strategy.notify_failure(1001) is True
    assert strategy.backoff_ms() == 2000  # the second attempt, not the fourth


def test_exponential_delay_resets_after_running_for_the_threshold() -> None:
    strategy = ExponentialDelay(1000, 60_000, 2.0, 10_000, 0.0, attempts_before_reset_backoff=3).create()
    strategy.notify_failure(0)  # restart at 1000
    strategy.notify_failure(1001)  # backoff 2000, restart at 3001
    assert strategy.backoff_ms() == 2000
    strategy.notify_failure(3001 + 9_999)  # ran 1 ms short of the threshold: no reset
    assert strategy.backoff_ms() == 4000  # restart at 17000
    strategy.notify_failure(17_000 + 10_000)  # ran for the threshold: reset to the initial backoff
    assert strategy.backoff_ms() == 1000
    # and the attempt counter was reset too: three more restarts are allowed
    assert failures_after_each_restart(strategy, 2, start=28_001) == [2000, 4000]
    assert strategy.can_restart()


def test_exponential_delay_attempts_before_reset_backoff() -> None:
    # docs: with 8, the job fails if it still fails after 8 consecutive retries
    strategy = ExponentialDelay(1000, 10_000, 2.0, 3_600_000, 0.0, attempts_before_reset_backoff=8).create()
    now, verdicts = 0, []
    for _ in range(9):
        strategy.notify_failure(now)
        verdicts.append(strategy.can_restart())
        now += strategy.backoff_ms() + 1
    assert verdicts == [True] * 8 + [False]


def test_exponential_delay_backoff_needs_a_failure_first() -> None:
    with pytest.raises(RuntimeError, match="before any notify_failure"):
        ExponentialDelay().create().backoff_ms()


def test_exponential_delay_survives_huge_attempt_counts() -> None:
    strategy = ExponentialDelay(1, 5, 10.0, 3_600_000, 0.5).create(Extreme(True))
    assert set(failures_after_each_restart(strategy, 400)[5:]) == {5}


# ---- failure-rate -------------------------------------------------------------------------------------
def test_failure_rate_fails_when_more_than_max_failures_fall_in_the_interval() -> None:
    strategy = FailureRate(max_failures_per_interval=2, failure_rate_interval_ms=10_000, delay_ms=1000).create()
    strategy.notify_failure(0)
    assert strategy.can_restart() and strategy.backoff_ms() == 1000
    strategy.notify_failure(1000)
    assert strategy.can_restart()
    strategy.notify_failure(5000)  # a third failure within 10 s
    assert not strategy.can_restart()


@pytest.mark.parametrize("third, allowed", [(9_999, False), (10_000, False), (10_001, True)])
def test_failure_rate_window_edge_is_strict(third: int, allowed: bool) -> None:
    strategy = FailureRate(2, 10_000, 0).create()
    strategy.notify_failure(0)
    strategy.notify_failure(4000)
    strategy.notify_failure(third)
    assert strategy.can_restart() is allowed


def test_failure_rate_window_slides() -> None:
    strategy = FailureRate(2, 10_000, 0).create()
    for t in (0, 6000, 10_001):
        strategy.notify_failure(t)
    assert strategy.can_restart()
    strategy.notify_failure(12_000)  # 6000, 10001, 12000 within 10 s
    assert not strategy.can_restart()
    assert strategy.can_restart(now_ms=16_001)  # asked later, the oldest of them left the window


def test_failure_rate_defaults_one_failure_per_minute() -> None:
    spec = spec_from_options({"restart-strategy.type": "failure-rate"})
    assert spec == FailureRate(1, 60_000, 1000)
    strategy = spec.create()
    strategy.notify_failure(0)
    assert strategy.can_restart()
    strategy.notify_failure(60_000)
    assert not strategy.can_restart()
    strategy.notify_failure(120_001)
    assert strategy.can_restart()


# ---- configuration routes ---------------------------------------------------------------------------
def test_documented_defaults_for_each_type() -> None:
    assert spec_from_options({"restart-strategy.type": "fixed-delay"}) == FixedDelay(1, 1000)
    assert spec_from_options({"restart-strategy.type": "exponential-delay"}) == ExponentialDelay(
        1000, 60_000, 1.5, 3_600_000, 0.1, INFINITE_ATTEMPTS)
    for name in ("none", "off", "disable"):
        assert spec_from_options({"restart-strategy.type": name}) == NoRestart()


def test_flink_durations_and_aliases_in_options() -> None:
    options: dict[str, object] = {"restart-strategy.type": "fixeddelay", "restart-strategy.fixed-delay.attempts": "3",
               "restart-strategy.fixed-delay.delay": "10 s"}
    assert spec_from_options(options) == FixedDelay(3, 10_000)
    options = {"restart-strategy": "failurerate",  # Flink's deprecated key for the type
               "restart-strategy.failure-rate.max-failures-per-interval": 3,
               "restart-strategy.failure-rate.failure-rate-interval": "5 min",
               "restart-strategy.failure-rate.delay": "500ms"}
    assert spec_from_options(options) == FailureRate(3, 300_000, 500)
    options = {"restart-strategy.type": "exponentialdelay",
               "restart-strategy.exponential-delay.initial-backoff": "10 s",
               "restart-strategy.exponential-delay.max-backoff": "2 min",
               "restart-strategy.exponential-delay.backoff-multiplier": "1.4",
               "restart-strategy.exponential-delay.reset-backoff-threshold": "10 min",
               "restart-strategy.exponential-delay.jitter-factor": 0.1,
               "restart-strategy.exponential-delay.attempts-before-reset-backoff": "10"}
    assert spec_from_options(options) == ExponentialDelay(10_000, 120_000, 1.4, 600_000, 0.1, 10)
    assert spec_from_options({}) is None


def test_api_and_options_routes_give_the_same_strategy() -> None:
    pairs = [
        (RestartStrategies.no_restart(), {"restart-strategy.type": "none"}),
        (RestartStrategies.fixed_delay_restart(3, 10_000),
         {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
          "restart-strategy.fixed-delay.delay": "10 s"}),
        (RestartStrategies.failure_rate_restart(3, 300_000, 10_000),
         {"restart-strategy.type": "failure-rate", "restart-strategy.failure-rate.max-failures-per-interval": "3",
          "restart-strategy.failure-rate.failure-rate-interval": "5 min",
          "restart-strategy.failure-rate.delay": "10 s"}),
        (RestartStrategies.exponential_delay_restart(1, 1000, 1.1, 2000, 0.1),
         {"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.initial-backoff": "1 ms",
          "restart-strategy.exponential-delay.max-backoff": "1 s",
          "restart-strategy.exponential-delay.backoff-multiplier": "1.1",
          "restart-strategy.exponential-delay.reset-backoff-threshold": "2 s",
          "restart-strategy.exponential-delay.jitter-factor": "0.1"}),
    ]
    for api, options in pairs:
        assert spec_from_api(api) == spec_from_options(options)
    assert spec_from_api(RestartStrategies.fall_back_restart()) is None


def test_default_depends_on_checkpointing() -> None:
    assert default_spec(checkpointing_enabled=False) == NoRestart()
    assert default_spec(checkpointing_enabled=True) == ExponentialDelay(1000, 60_000, 1.5, 3_600_000, 0.1)


def test_resolution_order_job_then_options_then_default() -> None:
    options = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 5}
    job = RestartStrategies.fixed_delay_restart(2, 100)
    assert resolve_restart_strategy(job, options, True) == FixedDelay(2, 100)
    assert resolve_restart_strategy(RestartStrategies.fall_back_restart(), options, True) == FixedDelay(5, 1000)
    assert resolve_restart_strategy(None, options, False) == FixedDelay(5, 1000)
    assert resolve_restart_strategy(RestartStrategies.fall_back_restart(), {}, True) == default_spec(True)
    assert resolve_restart_strategy(None, {}, False) == NoRestart()


@pytest.mark.parametrize("options, message", [
    ({"restart-strategy.type": "sometimes"}, "unknown restart strategy 'sometimes'"),
    ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "ten seconds"},
     "restart-strategy.fixed-delay.delay: expected a duration"),
    ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "three"},
     "restart-strategy.fixed-delay.attempts: expected an integer"),
    ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": -1},
     "attempts must be at least 0"),
    ({"restart-strategy.type": "failure-rate", "restart-strategy.failure-rate.max-failures-per-interval": 0},
     "max-failures-per-interval must be greater than 0"),
    ({"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.backoff-multiplier": 1},
     "backoff-multiplier must be greater than 1"),
    ({"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.initial-backoff": "2 min"},
     "cannot be higher than"),
    ({"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.jitter-factor": "1.5"},
     "jitter-factor must be >= 0 and <= 1"),
    ({"restart-strategy.type": "exponential-delay",
      "restart-strategy.exponential-delay.attempts-before-reset-backoff": 0}, "must be at least 1"),
])
def test_bad_options_are_clear_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec_from_options(options)
