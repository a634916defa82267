"""A circuit breaker and jittered backoff for judge calls (SPEC §7).

Pure and synchronous: the caller passes ``now`` (seconds, any monotonic clock) to every method;
nothing here reads a clock or sleeps.

States:

- ``closed``: calls go through. It opens after ``failure_threshold`` consecutive failures, or
  when at least ``min_calls`` outcomes over the last ``window`` seconds include a share of
  failures ``>= failure_ratio``.
- ``open``: calls are refused for the current cool-down (``cooldown`` at first).
- ``half_open``: once the cool-down has passed, ``allow`` lets one trial call through and
  refuses the rest. A success closes the breaker (cool-down back to ``cooldown``); a failure
  re-opens it with the cool-down doubled, up to ``max_cooldown``. A trial that reports nothing
  for ``trial_timeout`` seconds (a cancelled task) is given up and another trial is allowed.

Outcomes reported while open come from calls started before it opened and are ignored. The
breaker cannot tell the trial's outcome from a straggler's in ``half_open``: the first one
reported decides.
"""

from __future__ import annotations

import math
import random
from enum import StrEnum

from ragmon.judge.sampling import BucketedWindow

__all__ = ["BreakerState", "CircuitBreaker", "backoff_delays"]


class BreakerState(StrEnum):
    """Circuit breaker state."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


class CircuitBreaker:
    """Stops judge calls while the endpoint is failing; see the module docstring."""

    __slots__ = (
        "_calls",
        "_consecutive",
        "_cooldown",
        "_failures",
        "_open_until",
        "_state",
        "_trial_started",
        "base_cooldown",
        "failure_ratio",
        "failure_threshold",
        "max_cooldown",
        "min_calls",
        "trial_timeout",
    )

    def __init__(
        self,
        failure_threshold: int = 5,
        failure_ratio: float = 0.5,
        min_calls: int = 10,
        window: float = 60.0,
        cooldown: float = 5.0,
        max_cooldown: float = 300.0,
        trial_timeout: float = 120.0,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold!r}")
        if not 0.0 < failure_ratio <= 1.0:
            raise ValueError(f"failure_ratio must be in (0, 1], got {failure_ratio!r}")
        if min_calls < 1:
            raise ValueError(f"min_calls must be >= 1, got {min_calls!r}")
        for name, value in (("window", window), ("cooldown", cooldown),
                            ("max_cooldown", max_cooldown), ("trial_timeout", trial_timeout)):
            _positive(name, value)
        if max_cooldown < cooldown:
            raise ValueError(f"max_cooldown ({max_cooldown!r}) must be >= cooldown ({cooldown!r})")
        self.failure_threshold = failure_threshold
        self.failure_ratio = failure_ratio
        self.min_calls = min_calls
        self.base_cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.trial_timeout = trial_timeout
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._calls = BucketedWindow(window, 60)
        self._failures = BucketedWindow(window, 60)
        self._cooldown = cooldown
        self._open_until = -math.inf
        self._trial_started: float | None = None

    @property
    def state(self) -> BreakerState:
        """State as of the last call; ``open`` turns ``half_open`` in ``allow`` once due."""
        return self._state

    @property
    def cooldown(self) -> float:
        """The cool-down the next (or current) opening uses, in seconds."""
        return self._cooldown

    @property
    def open_until(self) -> float:
        """When the current opening ends (``-inf`` if never opened)."""
        return self._open_until

    def refusing(self, now: float) -> bool:
        """Whether ``allow(now)`` would refuse, without changing state or taking the trial.

        Cheap enough to ask for every sampled record before any work is done for it.
        """
        if self._state is BreakerState.CLOSED:
            return False
        if self._state is BreakerState.OPEN:
            return now < self._open_until
        return self._trial_started is not None and now - self._trial_started < self.trial_timeout

    def allow(self, now: float) -> bool:
        """Whether a call may start now; in ``half_open`` only the single trial is allowed."""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN:
            if now < self._open_until:
                return False
            self._state = BreakerState.HALF_OPEN
            self._trial_started = None
        if self._trial_started is not None and now - self._trial_started < self.trial_timeout:
            return False
        self._trial_started = now
        return True

    def success(self, now: float) -> None:
        """Report a call that succeeded."""
        if self._state is BreakerState.OPEN:
            return
        if self._state is BreakerState.HALF_OPEN:
            self._close()
            return
        self._consecutive = 0
        self._calls.add(1.0, now)

    def failure(self, now: float) -> None:
        """Report a call that failed (timeout, error status, unusable reply)."""
        if self._state is BreakerState.OPEN:
            return
        if self._state is BreakerState.HALF_OPEN:
            self._cooldown = min(self._cooldown * 2.0, self.max_cooldown)
            self._open(now)
            return
        self._consecutive += 1
        self._calls.add(1.0, now)
        self._failures.add(1.0, now)
        calls = self._calls.total(now)
        if self._consecutive >= self.failure_threshold or (
            calls >= self.min_calls and self._failures.total(now) >= self.failure_ratio * calls
        ):
            self._open(now)

    def _open(self, now: float) -> None:
        self._state = BreakerState.OPEN
        self._open_until = now + self._cooldown
        self._trial_started = None

    def _close(self) -> None:
        self._state = BreakerState.CLOSED
        self._cooldown = self.base_cooldown
        self._consecutive = 0
        self._trial_started = None
        self._calls.clear()
        self._failures.clear()


def backoff_delays(attempts: int, base: float, cap: float, rng: random.Random) -> list[float]:
    """Full-jitter exponential backoff: the waits before retries 1..``attempts``.

    Retry ``i`` (from 0) waits ``rng.uniform(0, min(cap, base * 2**i))`` seconds (AWS
    "Exponential Backoff and Jitter", full jitter). ``ValueError`` on negative arguments.
    """
    if attempts < 0:
        raise ValueError(f"attempts must be >= 0, got {attempts!r}")
    if not (math.isfinite(base) and base >= 0):
        raise ValueError(f"base must be a finite number >= 0, got {base!r}")
    if not (math.isfinite(cap) and cap >= 0):
        raise ValueError(f"cap must be a finite number >= 0, got {cap!r}")
    delays: list[float] = []
    for i in range(attempts):
        ceiling = cap if i >= 1024 else min(cap, base * 2.0**i)
        delays.append(rng.uniform(0.0, ceiling))
    return delays
