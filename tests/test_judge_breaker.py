"""The circuit breaker's documented defaults, boundaries and argument checks, and backoff's (pure, clock injected)."""

from __future__ import annotations

import math
import random
import re

import pytest

from ragmon.judge.breaker import BreakerState, CircuitBreaker, backoff_delays


def _state(breaker: CircuitBreaker) -> BreakerState:
    """Read the state through a call, so mypy does not narrow it across transitions."""
    return breaker.state


# -- documented defaults (docs/explanation/judge.md): 5 in a row, half of >= 10 in a minute, 5 s cool-down doubling up to 5 min ---


def test_default_cooldown_is_5_s_and_doubles_up_to_5_min() -> None:
    b = CircuitBreaker()
    for _ in range(5):
        b.failure(0.0)
    assert _state(b) is BreakerState.OPEN and b.open_until == 5.0
    seen = []
    for _ in range(8):
        now = b.open_until
        assert b.allow(now)
        b.failure(now)
        seen.append(b.open_until - now)
    assert seen == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]


def test_default_failure_ratio_window_is_one_minute() -> None:
    """Four failures of five calls at t=0 still count at 59.5 s, so five more like them open
    the breaker (8 of 10); at 61 s (a minute plus the 1 s bucket) they are forgotten."""
    for now, opens in ((59.5, True), (61.0, False)):
        b = CircuitBreaker()
        for at in (0.0, now):
            b.success(at)  # keeps the streak below 5
            for _ in range(4):
                b.failure(at)
        assert (_state(b) is BreakerState.OPEN) is opens


def test_a_breaker_never_opened_has_open_until_minus_infinity() -> None:
    b = CircuitBreaker()
    assert b.open_until == -math.inf
    assert not b.refusing(0.0) and b.allow(0.0)


@pytest.mark.parametrize(("failure_ratio", "opens"), [(0.5, True), (0.9, False)])
def test_the_failure_share_counts_the_same_calls_as_the_call_count(failure_ratio: float, opens: bool) -> None:
    """A failure leaves the failure count when its call leaves the call count, so the share is
    over one set of outcomes: the t=0 failure, in or out at 60.99 s, gives 2 of 3 or 1 of 2."""
    b = CircuitBreaker(failure_threshold=100, failure_ratio=failure_ratio, min_calls=2)
    b.failure(0.0)
    b.success(30.0)
    b.failure(60.99)
    assert (_state(b) is BreakerState.OPEN) is opens


def test_exactly_half_of_the_calls_failing_opens() -> None:
    """docs/explanation/judge.md: "at least half of 10 or more calls in a minute"."""
    b = CircuitBreaker(failure_threshold=100)
    for i in range(10):  # success, failure, ...: the 10th call is the 5th failure
        (b.success if i % 2 == 0 else b.failure)(float(i))
    assert _state(b) is BreakerState.OPEN


def test_a_trial_success_resets_the_failure_streak() -> None:
    b = CircuitBreaker(failure_threshold=3, cooldown=5.0)
    for _ in range(3):
        b.failure(0.0)
    assert b.allow(5.0)
    b.success(5.0)
    b.failure(6.0)
    b.failure(7.0)
    assert _state(b) is BreakerState.CLOSED
    b.failure(8.0)
    assert _state(b) is BreakerState.OPEN


# -- refusing agrees with allow at the boundaries -------------------------------------------------


def test_refusing_ends_exactly_when_the_cooldown_does() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0)
    b.failure(0.0)
    assert b.refusing(4.99)
    assert not b.refusing(5.0)
    assert b.allow(5.0)


def test_a_lost_trial_is_given_up_after_2_min_by_default() -> None:
    """The documented default: a trial that never reports back blocks other trials for 2 min."""
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0)
    b.failure(0.0)
    assert b.allow(5.0)  # the trial, never reported
    assert not b.allow(124.99)
    assert b.allow(125.0)


def test_refusing_ends_exactly_when_a_lost_trial_times_out() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0, trial_timeout=30.0)
    b.failure(0.0)
    assert b.allow(5.0)
    assert b.refusing(34.99)
    assert not b.refusing(35.0)
    assert b.allow(35.0)


# -- arguments -------------------------------------------------------------------------------------


def test_edge_arguments_are_accepted() -> None:
    """Sub-second times, a ratio of 1 (open only when every call failed), ``min_calls`` 1 and
    a fixed cool-down (``max_cooldown == cooldown``) are all valid."""
    b = CircuitBreaker(failure_threshold=100, failure_ratio=1.0, min_calls=1, window=0.5,
                       cooldown=0.5, max_cooldown=0.5, trial_timeout=0.5)
    b.success(0.0)
    b.failure(0.1)  # 1 of 2
    assert _state(b) is BreakerState.CLOSED
    b.failure(0.6)  # the success is out of the window: 1 of 1
    assert _state(b) is BreakerState.OPEN and b.open_until == 1.1
    assert b.allow(1.1)
    b.failure(1.1)
    assert b.open_until == 1.6  # the cool-down stays at max_cooldown


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failure_ratio": 1.5}, "failure_ratio must be in (0, 1], got 1.5"),
        ({"min_calls": 0}, "min_calls must be >= 1, got 0"),
        ({"window": 0.0}, "window must be a positive finite number, got 0.0"),
        ({"cooldown": 0.0}, "cooldown must be a positive finite number, got 0.0"),
        ({"cooldown": math.inf, "max_cooldown": math.inf}, "cooldown must be a positive finite number, got inf"),
        ({"max_cooldown": math.nan}, "max_cooldown must be a positive finite number, got nan"),
        ({"trial_timeout": 0.0}, "trial_timeout must be a positive finite number, got 0.0"),
        ({"trial_timeout": math.inf}, "trial_timeout must be a positive finite number, got inf"),
    ],
)
def test_a_bad_argument_is_refused_by_name(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


# -- backoff ---------------------------------------------------------------------------------------


def test_backoff_cap_zero_means_no_wait() -> None:
    assert backoff_delays(3, 1.0, 0.0, random.Random(0)) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 1.0, 1.0), "attempts must be >= 0, got -1"),
        ((1, -1.0, 1.0), "base must be a finite number >= 0, got -1.0"),
        ((1, 1.0, math.inf), "cap must be a finite number >= 0, got inf"),
        ((1, 1.0, -0.5), "cap must be a finite number >= 0, got -0.5"),
    ],
)
def test_backoff_refuses_a_bad_argument_by_name(args: tuple[int, float, float], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        backoff_delays(*args, rng=random.Random(0))
