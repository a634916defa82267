"""Which traces the LLM judge sees (SPEC §7): trace-id sampling plus call and spend budgets.

Pure and synchronous: every method takes ``now`` (seconds, any monotonic clock); nothing here
reads a clock, sleeps, locks or awaits. The concurrency cap and timeout are the client's job.

- ``sampled`` is the W3C / OpenTelemetry ``TraceIdRatioBased`` rule, so every replica (and any
  OTel SDK sampling at the same rate) picks the same traces.
- ``JudgeAdmission.decide`` answers ``admit``, ``skipped_rate`` or ``skipped_budget`` and, on
  ``admit``, counts the call against the per-minute cap.
- ``JudgeAdmission.reserve`` holds a call's estimated cost right before the call, refused when
  the spend of the last hour, the reservations in flight and the estimate would pass the
  budget; ``JudgeAdmission.settle`` replaces the reservation by what the call cost.

Windows are bucketed, so memory is constant however long the stream: calls sit in 60 one-second
buckets, spend in 60 one-minute buckets. A value is forgotten between ``span`` and
``span + span / buckets`` seconds after it was added, never earlier, so a cap holds over every
true sliding window and is released at most one bucket late.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum

from ragmon.config import JudgeConfig

__all__ = ["BucketedWindow", "Decision", "JudgeAdmission", "sampled", "sampler"]

_ID_BITS = 64


def _ratio_bound(rate: float) -> int:
    """``round(rate * 2**64)``, as OTel's ``TraceIdRatioBased.get_bound_for_rate``."""
    if not 0.0 <= rate <= 1.0:  # also rejects NaN
        raise ValueError(f"sample_rate must be in [0, 1], got {rate!r}")
    return round(rate * (1 << _ID_BITS))


def sampled(trace_id: bytes, rate: float) -> bool:
    """Whether the trace is in the ``rate`` sample, decided from its id alone.

    W3C Trace Context / OpenTelemetry ``TraceIdRatioBased``: the lower 8 bytes of the trace id,
    read as an unsigned big-endian integer, are sampled when ``< round(rate * 2**64)``.
    ``rate`` 0 samples nothing, 1 everything; a trace sampled at some rate is sampled at every
    higher rate. Ids shorter than 8 bytes read as if zero-padded on the left. ``ValueError``
    when ``rate`` is outside [0, 1].
    """
    return sampler(rate)(trace_id)


def sampler(rate: float) -> Callable[[bytes], bool]:
    """``sampled`` at ``rate``, with the bound computed once (``ValueError`` as ``sampled``)."""
    bound = _ratio_bound(rate)

    def in_sample(trace_id: bytes) -> bool:
        return int.from_bytes(trace_id[-8:], "big") < bound

    return in_sample


class Decision(StrEnum):
    """What ``JudgeAdmission.decide`` says about one trace (usable as an outcome label)."""

    ADMIT = "admit"
    SKIPPED_RATE = "skipped_rate"
    """Not in the trace-id sample."""
    SKIPPED_BUDGET = "skipped_budget"
    """Sampled, but the per-minute cap or the USD-per-hour budget is used up."""


class BucketedWindow:
    """Sum of the values added over the last ``span`` seconds, kept in ``buckets + 1`` slots.

    A value added at ``t`` counts until ``t + span`` at least and ``t + span + span / buckets``
    at most. ``now`` going backwards is treated as the latest ``now`` seen.
    """

    __slots__ = ("_head", "_values", "_width")

    def __init__(self, span: float, buckets: int) -> None:
        if not (math.isfinite(span) and span > 0):
            raise ValueError(f"span must be a positive number of seconds, got {span!r}")
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets!r}")
        self._width = span / buckets
        self._values = [0.0] * (buckets + 1)
        self._head: int | None = None

    @property
    def slots(self) -> int:
        """Memory held, in buckets; constant."""
        return len(self._values)

    def _advance(self, now: float) -> int:
        index = math.floor(now / self._width)
        head = self._head
        if head is not None and index <= head:
            return head
        n = len(self._values)
        if head is None or index - head >= n:
            self._values = [0.0] * n
        else:
            for i in range(head + 1, index + 1):
                self._values[i % n] = 0.0
        self._head = index
        return index

    def clear(self) -> None:
        """Forget everything."""
        self._values = [0.0] * len(self._values)
        self._head = None

    def add(self, value: float, now: float) -> None:
        """Count ``value`` at ``now``."""
        index = self._advance(now)
        self._values[index % len(self._values)] += value

    def total(self, now: float) -> float:
        """Sum of what is still in the window at ``now``."""
        self._advance(now)
        return math.fsum(self._values)


class JudgeAdmission:
    """Admission control for judge calls: sample rate, per-minute cap, USD-per-hour budget.

    Non-probe traces are judged when sampled (``sampled(trace_id, sample_rate)``), fewer than
    ``max_per_minute`` calls were admitted over the last minute, and less than
    ``max_usd_per_hour`` was spent over the last hour.

    Probes ("probes are always judged", SPEC §7) bypass the sample rate and the per-minute cap
    but still respect the USD budget: a runaway prober must not be able to spend without bound.
    Admitted probes count against the per-minute cap for the traffic that follows them.

    ``decide`` is the cheap check when a trace arrives; the budget is checked again right
    before each call (``reserve``), against the call's estimated cost, so spend passes the
    budget by at most what the calls in flight cost beyond their estimates. A cap or budget of
    0 admits nothing it governs; ``math.inf`` as the budget means no budget.
    """

    __slots__ = (
        "_calls", "_reservations", "_reserved", "_spend", "in_sample", "max_per_minute", "max_usd_per_hour",
        "sample_rate",
    )

    def __init__(self, sample_rate: float, max_per_minute: int, max_usd_per_hour: float) -> None:
        self.in_sample = sampler(sample_rate)
        """``sampled`` at ``sample_rate``."""
        if max_per_minute < 0:
            raise ValueError(f"max_per_minute must be >= 0, got {max_per_minute!r}")
        if not max_usd_per_hour >= 0:  # also rejects NaN
            raise ValueError(f"max_usd_per_hour must be >= 0, got {max_usd_per_hour!r}")
        self.sample_rate = sample_rate
        self.max_per_minute = max_per_minute
        self.max_usd_per_hour = max_usd_per_hour
        self._calls = BucketedWindow(60.0, 60)
        self._spend = BucketedWindow(3600.0, 60)
        self._reserved = 0.0
        self._reservations = 0

    @classmethod
    def from_config(cls, config: JudgeConfig) -> JudgeAdmission:
        """From ``[judge]``: ``sample_rate``, ``max_per_minute``, ``max_usd_per_hour``."""
        return cls(config.sample_rate, config.max_per_minute, config.max_usd_per_hour)

    def decide(self, trace_id: bytes, now: float, is_probe: bool = False) -> Decision:
        """Admit or skip one trace; an ``ADMIT`` is counted against the per-minute cap."""
        if not is_probe and not self.in_sample(trace_id):
            return Decision.SKIPPED_RATE
        if self._spend.total(now) + self._reserved >= self.max_usd_per_hour:
            return Decision.SKIPPED_BUDGET
        if not is_probe and self._calls.total(now) >= self.max_per_minute:
            return Decision.SKIPPED_BUDGET
        self._calls.add(1.0, now)
        return Decision.ADMIT

    def record_cost(self, usd: float, now: float) -> None:
        """Add the judge's own spend (USD, finite, >= 0) at ``now``."""
        if not (math.isfinite(usd) and usd >= 0):
            raise ValueError(f"usd must be a finite amount >= 0, got {usd!r}")
        self._spend.add(usd, now)

    def reserve(self, usd: float, now: float) -> bool:
        """Hold ``usd`` (a call's estimated cost, finite, >= 0) for a call about to start; False,
        holding nothing, when spend over the last hour + reservations held + ``usd`` would pass
        the budget. Every True is ended by one ``settle``."""
        if not (math.isfinite(usd) and usd >= 0):
            raise ValueError(f"usd must be a finite amount >= 0, got {usd!r}")
        if self._spend.total(now) + self._reserved + usd > self.max_usd_per_hour:
            return False
        self._reserved += usd
        self._reservations += 1
        return True

    def settle(self, reserved: float, usd: float | None, now: float) -> None:
        """End one reservation of ``reserved`` and record what the call cost (``None``: nothing
        known spent, e.g. no reply)."""
        self._reservations = max(self._reservations - 1, 0)
        self._reserved = max(self._reserved - reserved, 0.0) if self._reservations else 0.0
        if usd is not None:
            self.record_cost(usd, now)

    @property
    def reserved(self) -> float:
        """USD held by the calls in flight (their estimates)."""
        return self._reserved

    def spent_last_hour(self, now: float) -> float:
        """USD recorded over the last hour (up to one minute more; see the module docstring)."""
        return self._spend.total(now)

    def admitted_last_minute(self, now: float) -> int:
        """Calls admitted over the last minute (up to one second more)."""
        return round(self._calls.total(now))
