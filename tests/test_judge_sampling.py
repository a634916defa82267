"""Judge admission (sampling, per-minute cap, USD budget) and the circuit breaker: pure, clock injected."""

from __future__ import annotations

import math
import random

import pytest

from ragmon.config import JudgeConfig
from ragmon.judge.breaker import BreakerState, CircuitBreaker, backoff_delays
from ragmon.judge.sampling import BucketedWindow, Decision, JudgeAdmission, sampled


def _ids(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(n)]


def _sampled_id(rate: float) -> bytes:
    return next(t for t in _ids(1000, seed=3) if sampled(t, rate))


# -- sampling -------------------------------------------------------------------------------


def test_sampled_follows_trace_id_ratio_rule() -> None:
    low = bytes(8) + (0).to_bytes(8, "big")
    high = bytes.fromhex("ff" * 8) + (2**64 - 1).to_bytes(8, "big")
    assert sampled(low, 1e-9)
    assert not sampled(high, 0.999999)
    half = 2**63
    assert sampled(bytes(8) + (half - 1).to_bytes(8, "big"), 0.5)
    assert not sampled(bytes(8) + half.to_bytes(8, "big"), 0.5)
    # only the lower 8 bytes count
    assert sampled(b"\xff" * 8 + bytes(8), 0.01)


def test_sampled_edges() -> None:
    ids = _ids(2000)
    assert not any(sampled(t, 0.0) for t in ids)
    assert all(sampled(t, 1.0) for t in ids)
    assert sampled(b"\xff" * 16, 1.0)
    assert not sampled(bytes(16), 0.0)
    for bad in (-0.1, 1.1, math.nan):
        with pytest.raises(ValueError, match="sample_rate"):
            sampled(bytes(16), bad)


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.5, 0.9])
def test_observed_rate_within_tolerance(rate: float) -> None:
    ids = _ids(20_000)
    observed = sum(sampled(t, rate) for t in ids) / len(ids)
    sigma = math.sqrt(rate * (1 - rate) / len(ids))
    assert abs(observed - rate) < 5 * sigma


def test_sampling_is_monotone_in_rate() -> None:
    for t in _ids(2000):
        if sampled(t, 0.1):
            assert sampled(t, 0.2)


def test_independent_admissions_agree() -> None:
    a = JudgeAdmission(0.3, max_per_minute=10**9, max_usd_per_hour=math.inf)
    b = JudgeAdmission.from_config(JudgeConfig(sample_rate=0.3, max_per_minute=10**9,
                                               max_usd_per_hour=math.inf))
    ids = _ids(5000)
    da = [a.decide(t, now=i * 0.001) for i, t in enumerate(ids)]
    db = [b.decide(t, now=1e6 + i * 0.002) for i, t in enumerate(ids)]
    assert da == db
    assert da == [Decision.ADMIT if sampled(t, 0.3) else Decision.SKIPPED_RATE for t in ids]
    assert 0.25 < da.count(Decision.ADMIT) / len(ids) < 0.35


def test_admission_samples_by_the_same_rule_for_any_id_length() -> None:
    """``decide`` reads the lower 8 bytes exactly as ``sampled`` does, short ids included."""
    adm = JudgeAdmission(0.5, max_per_minute=10**9, max_usd_per_hour=math.inf)
    ids = [b"\xff" * 8, b"\x01" + b"\xff" * 8, b"\xff" * 4, bytes(12) + b"\xff" * 8, b"\xff" * 8 + bytes(12)]
    expected = [Decision.SKIPPED_RATE, Decision.SKIPPED_RATE, Decision.ADMIT, Decision.SKIPPED_RATE, Decision.ADMIT]
    assert [Decision.ADMIT if sampled(t, 0.5) else Decision.SKIPPED_RATE for t in ids] == expected
    assert [adm.decide(t, 0.0) for t in ids] == expected


# -- per-minute cap ---------------------------------------------------------------------------


def test_per_minute_cap_and_sliding_release() -> None:
    adm = JudgeAdmission(1.0, max_per_minute=3, max_usd_per_hour=math.inf)
    t = _sampled_id(1.0)
    assert [adm.decide(t, now) for now in (0.0, 20.0, 40.0)] == [Decision.ADMIT] * 3
    assert adm.decide(t, 50.0) == Decision.SKIPPED_BUDGET
    assert adm.decide(t, 59.9) == Decision.SKIPPED_BUDGET
    # the call at 0.0 is released between 60 and 61 s later, never earlier
    assert adm.decide(t, 60.5) == Decision.SKIPPED_BUDGET
    assert adm.decide(t, 61.0) == Decision.ADMIT
    assert adm.decide(t, 62.0) == Decision.SKIPPED_BUDGET
    assert adm.decide(t, 81.0) == Decision.ADMIT  # the call at 20.0 released
    assert adm.admitted_last_minute(81.0) == 3
    assert adm.admitted_last_minute(1000.0) == 0


def test_cap_never_exceeded_in_any_true_window() -> None:
    adm = JudgeAdmission(1.0, max_per_minute=5, max_usd_per_hour=math.inf)
    t = _sampled_id(1.0)
    rng = random.Random(1)
    now, admitted = 0.0, []
    for _ in range(5000):
        now += rng.expovariate(1.0)
        if adm.decide(t, now) == Decision.ADMIT:
            admitted.append(now)
    j = 0
    for i, start in enumerate(admitted):
        while admitted[j] <= start - 60.0:
            j += 1
        assert i - j + 1 <= 5
    assert len(admitted) > 5 * (now / 61.0) * 0.9  # and the cap is actually used


def test_rate_skip_comes_before_budget() -> None:
    adm = JudgeAdmission(0.0, max_per_minute=0, max_usd_per_hour=0.0)
    assert adm.decide(bytes(16), 0.0) == Decision.SKIPPED_RATE


# -- USD budget ---------------------------------------------------------------------------------


def test_usd_budget_and_release_after_an_hour() -> None:
    adm = JudgeAdmission(1.0, max_per_minute=10**6, max_usd_per_hour=1.0)
    t = _sampled_id(1.0)
    assert adm.decide(t, 0.0) == Decision.ADMIT
    adm.record_cost(0.6, 10.0)
    assert adm.decide(t, 20.0) == Decision.ADMIT
    adm.record_cost(0.5, 1800.0)
    assert adm.spent_last_hour(1800.0) == pytest.approx(1.1)
    assert adm.decide(t, 1900.0) == Decision.SKIPPED_BUDGET
    assert adm.decide(t, 3605.0) == Decision.SKIPPED_BUDGET  # 0.6 not released before 3610
    assert adm.spent_last_hour(3660.0) == pytest.approx(0.5)
    assert adm.decide(t, 3660.0) == Decision.ADMIT
    assert adm.spent_last_hour(5460.0) == pytest.approx(0.0)


def test_record_cost_rejects_bad_amounts() -> None:
    adm = JudgeAdmission(0.5, 10, 1.0)
    for bad in (-0.01, math.nan, math.inf):
        with pytest.raises(ValueError, match="usd"):
            adm.record_cost(bad, 0.0)


def test_constructor_validates() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        JudgeAdmission(1.5, 10, 1.0)
    with pytest.raises(ValueError, match="max_per_minute"):
        JudgeAdmission(0.5, -1, 1.0)
    with pytest.raises(ValueError, match="max_usd_per_hour"):
        JudgeAdmission(0.5, 1, math.nan)


# -- probes ---------------------------------------------------------------------------------------


def test_probes_bypass_rate_and_minute_cap_but_not_usd_budget() -> None:
    adm = JudgeAdmission(0.0, max_per_minute=2, max_usd_per_hour=1.0)
    ids = _ids(10)
    assert all(adm.decide(t, 1.0, is_probe=True) == Decision.ADMIT for t in ids)
    assert adm.admitted_last_minute(1.0) == 10  # probes count against the cap
    adm.record_cost(1.0, 2.0)
    assert adm.decide(ids[0], 3.0, is_probe=True) == Decision.SKIPPED_BUDGET
    assert adm.decide(ids[0], 3.0 + 3660.0, is_probe=True) == Decision.ADMIT


def test_probes_use_up_the_minute_for_sampled_traffic() -> None:
    adm = JudgeAdmission(1.0, max_per_minute=2, max_usd_per_hour=math.inf)
    t = _sampled_id(1.0)
    adm.decide(t, 0.0, is_probe=True)
    adm.decide(t, 0.0, is_probe=True)
    assert adm.decide(t, 1.0) == Decision.SKIPPED_BUDGET


# -- bounded memory -----------------------------------------------------------------------------


def test_memory_is_bounded_under_a_long_stream() -> None:
    adm = JudgeAdmission(0.5, max_per_minute=100, max_usd_per_hour=5.0)
    ids = _ids(50_000)
    now = 0.0
    for i, t in enumerate(ids):
        now += 0.37  # ~2 days
        if adm.decide(t, now, is_probe=i % 97 == 0) == Decision.ADMIT:
            adm.record_cost(0.001, now)
    assert adm._calls.slots == 61
    assert adm._spend.slots == 61
    assert adm.admitted_last_minute(now) <= 100 + 5  # a few probes may go over the cap
    assert adm.spent_last_hour(now) <= 5.0 + 0.001 * 10


def test_bucketed_window_handles_gaps_and_backwards_clock() -> None:
    w = BucketedWindow(10.0, 10)
    w.add(1.0, 0.0)
    w.add(2.0, 5.0)
    assert w.total(4.0) == 3.0  # earlier now: clamped to latest seen
    assert w.total(10.5) == 3.0
    assert w.total(11.0) == 2.0
    assert w.total(1e9) == 0.0
    w.add(4.0, 1e9)
    assert w.total(1e9 + 10.9) == 4.0
    assert w.slots == 11
    with pytest.raises(ValueError):
        BucketedWindow(0.0, 10)
    with pytest.raises(ValueError):
        BucketedWindow(10.0, 0)


def test_bucketed_window_takes_a_sub_second_span_and_a_single_bucket() -> None:
    """Any positive span and any bucket count >= 1: a value counts for ``span`` seconds at
    least and ``span + span / buckets`` at most."""
    w = BucketedWindow(0.5, 1)
    w.add(1.0, 0.0)
    assert w.total(0.99) == 1.0
    assert w.total(1.0) == 0.0
    assert w.slots == 2


# -- circuit breaker ------------------------------------------------------------------------------


def _state(breaker: CircuitBreaker) -> BreakerState:
    """Read the state through a call, so mypy does not narrow it across transitions."""
    return breaker.state


def test_breaker_opens_after_consecutive_failures() -> None:
    b = CircuitBreaker(failure_threshold=3, min_calls=100, cooldown=5.0)
    assert _state(b) is BreakerState.CLOSED and b.allow(0.0)
    b.failure(0.0)
    b.failure(1.0)
    b.success(2.0)  # resets the streak
    b.failure(3.0)
    b.failure(4.0)
    assert _state(b) is BreakerState.CLOSED
    b.failure(5.0)
    assert _state(b) is BreakerState.OPEN
    assert not b.allow(5.0) and not b.allow(9.99)
    assert b.open_until == 10.0


def test_breaker_opens_on_failure_ratio_over_window() -> None:
    b = CircuitBreaker(failure_threshold=100, failure_ratio=0.5, min_calls=10, window=60.0)
    for i in range(9):  # alternate: ratio ~0.5 but only 9 calls
        (b.failure if i % 2 == 0 else b.success)(float(i))
    assert _state(b) is BreakerState.CLOSED
    b.success(9.0)  # 10 calls, 5 failures
    assert _state(b) is BreakerState.CLOSED
    b.failure(10.0)  # 11 calls, 6 failures
    assert _state(b) is BreakerState.OPEN


def test_breaker_ratio_window_slides() -> None:
    b = CircuitBreaker(failure_threshold=100, failure_ratio=0.5, min_calls=4, window=60.0)
    b.failure(0.0)
    b.failure(1.0)
    b.failure(2.0)  # 3 calls: below min_calls
    for now in (100.0, 101.0, 102.0):
        b.success(now)
    b.failure(103.0)  # old failures gone: 1 of 4
    assert _state(b) is BreakerState.CLOSED


def test_half_open_lets_exactly_one_trial_through() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0)
    b.failure(0.0)
    assert _state(b) is BreakerState.OPEN
    assert b.allow(5.0)
    assert _state(b) is BreakerState.HALF_OPEN
    assert not b.allow(5.0) and not b.allow(6.0)
    b.success(7.0)
    assert _state(b) is BreakerState.CLOSED
    assert all(b.allow(7.0) for _ in range(5))


def test_half_open_failure_doubles_cooldown_up_to_max_and_success_resets() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0, max_cooldown=18.0)
    b.failure(0.0)
    now, seen = 0.0, []
    for _ in range(4):
        now = b.open_until
        assert not b.allow(now - 0.01)
        assert b.allow(now)
        b.failure(now)
        assert _state(b) is BreakerState.OPEN
        seen.append(b.open_until - now)
    assert seen == [10.0, 18.0, 18.0, 18.0]
    now = b.open_until
    assert b.allow(now)
    b.success(now)
    assert _state(b) is BreakerState.CLOSED and b.cooldown == 5.0
    b.failure(now + 1)
    assert b.open_until == now + 1 + 5.0


def test_outcomes_while_open_are_ignored() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0)
    b.failure(0.0)
    b.success(1.0)
    assert _state(b) is BreakerState.OPEN
    b.failure(4.0)
    assert b.open_until == 5.0


def test_lost_trial_is_given_up_after_trial_timeout() -> None:
    b = CircuitBreaker(failure_threshold=1, cooldown=5.0, trial_timeout=30.0)
    b.failure(0.0)
    assert b.allow(5.0)
    assert not b.allow(34.9)
    assert b.allow(35.0)
    assert not b.allow(36.0)


def test_breaker_validates() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=0)
    with pytest.raises(ValueError, match="failure_ratio"):
        CircuitBreaker(failure_ratio=0.0)
    with pytest.raises(ValueError, match="max_cooldown"):
        CircuitBreaker(cooldown=10.0, max_cooldown=5.0)


# -- backoff --------------------------------------------------------------------------------------


def test_backoff_delays_full_jitter_bounds() -> None:
    rng = random.Random(42)
    for _ in range(200):
        delays = backoff_delays(8, base=0.5, cap=10.0, rng=rng)
        assert len(delays) == 8
        for i, d in enumerate(delays):
            assert 0.0 <= d <= min(10.0, 0.5 * 2**i)
    assert backoff_delays(0, 1.0, 1.0, rng) == []
    assert backoff_delays(3, 0.0, 5.0, rng) == [0.0, 0.0, 0.0]
    assert all(d <= 2.0 for d in backoff_delays(2000, 1.0, 2.0, rng))


def test_backoff_delays_deterministic_and_jittered() -> None:
    a = backoff_delays(6, 1.0, 60.0, random.Random(5))
    assert a == backoff_delays(6, 1.0, 60.0, random.Random(5))
    late = [backoff_delays(6, 1.0, 60.0, random.Random(s))[5] for s in range(200)]
    assert len(set(late)) == 200 and max(late) > 16.0 and min(late) < 16.0


def test_backoff_delays_validates() -> None:
    rng = random.Random(0)
    for args in ((-1, 1.0, 1.0), (1, -1.0, 1.0), (1, 1.0, math.nan)):
        with pytest.raises(ValueError):
            backoff_delays(*args, rng=rng)
