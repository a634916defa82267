"""Rolling windows behind ragmon's gauges: means and quantiles over the last W seconds.

Pure and clock-injected: every method takes ``now`` (seconds, from a clock that does not go
back); nothing here reads a clock, locks or exports.

Bucket rule (exact; the tests recompute it). A window of W seconds kept in R buckets has bucket
width w = W / R, and an event observed at time t lies in bucket b(t) = ⌊t / w⌋. A read at
``now`` covers the R newest buckets, the current partial one included:

    counted(t)  ⇔  b(now) − R < b(t) ≤ b(now)

i.e. (up to float rounding at bucket edges) the events with t in [(b(now) − R + 1)·w, now].
That span lies inside [now − W, now] and is at least W − w long: the window never counts an
event older than W, and misses at most its oldest w seconds. Over the counted events
x₁…xₙ: ``mean = Σxᵢ / n``, ``samples = n``, and quantiles follow ``QuantileSketch`` (within α
of ``np.sort(x)[⌊q·(n − 1)⌋]``).

Memory is bounded by configuration, never by traffic: each window of each series is a ring of R
slots, slot b mod R holding bucket b. An observation for a bucket older than the ring's newest
R is discarded (``Outcome.LATE``). Buckets that left the window are freed when a new bucket
opens and on every read. Per window, a ``RollingMean`` slot is 3 numbers; a
``RollingQuantiles`` slot is one sketch of at most ``QuantileSketch.max_bins`` bins, compacted
to numpy arrays (12 bytes a bin) once the next bucket opens. The default R = 60 gives 5 s
buckets for 5m and 60 s for 1h: a 1h window costs 60 sketches per series, not 720, at the
price of one add per window per observation.

Ingest rate: ``observe`` costs ~0.35 µs (means) to ~0.55 µs (quantiles) per window per value.
For tens of thousands of traces a second, collect values per key and flush them with
``observe_many`` (one numpy pass, ~0.04 µs a value) on a tick well under a bucket width.

``WindowStore`` keys series by label values and caps them; see its docstring.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from ragmon.export.sketch import DEFAULT_RELATIVE_ACCURACY, QuantileSketch

__all__ = [
    "window_label",
    "DEFAULT_BUCKETS",
    "DEFAULT_QUANTILES",
    "Outcome",
    "RollingMean",
    "RollingQuantiles",
    "WindowReading",
    "WindowSnapshot",
    "WindowStats",
    "WindowStore",
    "bucket_index",
]

K = TypeVar("K", bound=Hashable)
Values: TypeAlias = "Sequence[float] | npt.NDArray[np.float64]"

DEFAULT_BUCKETS = 60
"""Buckets per window (R): 5 s buckets for 5m, 60 s for 1h."""
DEFAULT_QUANTILES = (0.5, 0.95, 0.99)
"""Quantiles of ``ragmon_latency_seconds``."""

_NEVER = -(1 << 62)
"""Bucket index of a slot that holds nothing."""
_EMPTY = 1 << 62
"""``_Ring._low`` of a ring that holds nothing."""
_LARGEST = 1.7976931348623157e308
_BULK_MIN = (8, 32)
"""``WindowStore.observe_many`` takes lists shorter than this one value at a time (mean store,
quantile store): below it, numpy's fixed cost exceeds the per-value one."""


def bucket_index(t: float, width: float) -> int:
    """b(t) = ⌊t / w⌋: the bucket of an event at time ``t`` for bucket width ``width``."""
    return math.floor(t / width)


def _added(start: float, values: npt.NDArray[np.float64]) -> float:
    """``start + x₀ + x₁ + …`` left to right: the rounding of adding one value at a time."""
    x = np.empty(values.size + 1)
    x[0] = start
    x[1:] = values
    return float(np.add.accumulate(x)[-1])  # sequential, where np.sum is pairwise


def _check_finite(values: npt.NDArray[np.float64]) -> None:
    if not bool(np.all(np.abs(values) <= _LARGEST)):
        raise ValueError("window values must be finite")


class _Ring:
    """R slots, slot b mod R holding bucket b; the shared bookkeeping of both windows."""

    __slots__ = ("_index", "_low", "_top", "buckets", "width", "window")

    def __init__(self, window: float, buckets: int) -> None:
        if not 0.0 < window < math.inf:
            raise ValueError(f"window must be a positive number of seconds, got {window!r}")
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
            raise ValueError(f"buckets must be an integer >= 1, got {buckets!r}")
        self.window = float(window)
        self.buckets = buckets
        self.width = self.window / buckets
        self._index = [_NEVER] * buckets
        self._low = _EMPTY
        """Lowest bucket held (``_EMPTY`` when none): ``_expire`` has nothing to do below it."""
        self._top = _NEVER
        """Newest bucket ever opened: the open one; older buckets are closed."""

    def _clear(self, slot: int) -> None:
        """Free the data of ``slot``."""
        raise NotImplementedError

    def _open(self, now: float) -> int:
        """Slot of bucket b(now), opened if new; -1 when b(now) is older than the ring."""
        b = math.floor(now / self.width)  # bucket_index, inlined: this is the ingest path
        slot = b % self.buckets
        current = self._index[slot]
        if current == b:
            return slot
        if current > b or b <= self._top - self.buckets:
            return -1  # older than what the ring holds, even if its slot was freed
        self._expire(b)
        self._index[slot] = b
        if b < self._low:
            self._low = b
        if b > self._top:
            self._top = b
        return slot

    def _expire(self, b: int) -> None:
        """Free every slot whose bucket is out of the window that ends in bucket ``b``."""
        oldest = b - self.buckets
        if self._low > oldest:
            return
        low = _EMPTY
        for slot, index in enumerate(self._index):
            if _NEVER < index <= oldest:
                self._index[slot] = _NEVER
                self._clear(slot)
            elif _NEVER < index < low:
                low = index
        self._low = low

    def _live(self, now: float) -> list[int]:
        """Slots counted at ``now``: b(now) − R < b ≤ b(now). Frees expired slots."""
        b = bucket_index(now, self.width)
        self._expire(b)
        return _live_slots(self._index, b, self.buckets)

    def covers(self, t: float, now: float) -> bool:
        """Whether an event at ``t`` still counts at ``now`` (or lies after it)."""
        return bucket_index(t, self.width) > bucket_index(now, self.width) - self.buckets

    def buckets_in_use(self) -> int:
        """Slots holding a bucket (at most ``buckets``)."""
        return sum(1 for index in self._index if index != _NEVER)


def _live_slots(index: Sequence[int], b: int, buckets: int) -> list[int]:
    """Slots whose bucket counts in the window ending in bucket ``b``: b − R < index ≤ b."""
    return [s for s, i in enumerate(index) if b - buckets < i <= b]


@dataclass(frozen=True, slots=True)
class _MeanState:
    """A ``RollingMean``'s buckets copied at a read: what ``summary`` needs, detached."""

    window: float
    width: float
    buckets: int
    index: tuple[int, ...]
    count: tuple[int, ...]
    sum: tuple[float, ...]

    def summary(self, now: float) -> tuple[int, float]:
        """``(n, Σx)`` over the window at ``now``."""
        live = _live_slots(self.index, bucket_index(now, self.width), self.buckets)
        return sum(self.count[s] for s in live), math.fsum(self.sum[s] for s in live)


@dataclass(frozen=True, slots=True)
class _QuantileState:
    """A ``RollingQuantiles``' buckets at a read: sketches no one changes afterwards."""

    window: float
    width: float
    buckets: int
    relative_accuracy: float
    index: tuple[int, ...]
    sketches: tuple[QuantileSketch | None, ...]

    def sketch(self, now: float) -> QuantileSketch:
        """A new sketch: the merge of the buckets in the window at ``now``."""
        live = [self.sketches[s] for s in _live_slots(self.index, bucket_index(now, self.width), self.buckets)]
        return QuantileSketch.merged((s for s in live if s is not None), self.relative_accuracy)


class RollingMean(_Ring):
    """Sum and count per bucket: mean = Σx / n over the window (module docstring's rule).

    Used for hit rate (mean of 0/1), MRR, recall, NDCG, judge scores, cost per request and
    error ratio (mean of 0/1).
    """

    __slots__ = ("_count", "_sum")

    def __init__(self, window: float, buckets: int = DEFAULT_BUCKETS) -> None:
        super().__init__(window, buckets)
        self._count = [0] * buckets
        self._sum = [0.0] * buckets

    def _clear(self, slot: int) -> None:
        self._count[slot] = 0
        self._sum[slot] = 0.0

    def add(self, value: float, now: float) -> bool:
        """Observe a finite ``value`` at ``now``; ``False`` if its bucket already expired."""
        if not -_LARGEST <= value <= _LARGEST:
            raise ValueError(f"window values must be finite, got {value!r}")
        slot = self._open(now)
        if slot < 0:
            return False
        self._count[slot] += 1
        self._sum[slot] += value
        return True

    def add_many(self, values: Values, now: float) -> bool:
        """Observe several values at the same ``now``; ``False`` if their bucket expired.

        Same count and sum as ``add`` on each value in turn.
        """
        x = np.asarray(values, dtype=np.float64).ravel()
        _check_finite(x)
        return self._add_checked(x, now)

    def _add_checked(self, x: npt.NDArray[np.float64], now: float) -> bool:
        """``add_many`` of values known to be finite."""
        slot = self._open(now)
        if slot < 0:
            return False
        self._count[slot] += int(x.size)
        self._sum[slot] = _added(self._sum[slot], x)
        return True

    def summary(self, now: float) -> tuple[int, float]:
        """``(n, Σx)`` over the window at ``now``."""
        live = self._live(now)
        return sum(self._count[s] for s in live), math.fsum(self._sum[s] for s in live)

    def state(self, now: float) -> _MeanState:
        """Free the buckets that left the window at ``now``; a detached copy of the rest."""
        self._expire(bucket_index(now, self.width))
        return _MeanState(
            self.window, self.width, self.buckets, tuple(self._index), tuple(self._count), tuple(self._sum)
        )

    def samples(self, now: float) -> int:
        """n: observations in the window at ``now``."""
        return self.summary(now)[0]

    def mean(self, now: float) -> float | None:
        """Σx / n over the window at ``now``; ``None`` when n = 0."""
        n, total = self.summary(now)
        return total / n if n else None


class RollingQuantiles(_Ring):
    """A ``QuantileSketch`` per bucket; a read merges the buckets in the window."""

    __slots__ = ("_sketches", "relative_accuracy")

    def __init__(
        self,
        window: float,
        buckets: int = DEFAULT_BUCKETS,
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
    ) -> None:
        super().__init__(window, buckets)
        QuantileSketch(relative_accuracy)  # validates the parameter now, not on first add
        self.relative_accuracy = relative_accuracy
        self._sketches: list[QuantileSketch | None] = [None] * buckets

    def _clear(self, slot: int) -> None:
        self._sketches[slot] = None

    def _sketch_at(self, now: float) -> QuantileSketch | None:
        slot = self._open(now)
        if slot < 0:
            return None
        sketch = self._sketches[slot]
        if sketch is None:  # a new bucket: the others are closed, compact them
            for other in self._sketches:
                if other is not None:
                    other.compact()
            sketch = self._sketches[slot] = QuantileSketch(self.relative_accuracy)
        elif self._index[slot] != self._top and sketch.compacted:
            # a closed bucket a ``state`` may share: change a copy, never the shared sketch
            sketch = self._sketches[slot] = sketch.copy()
        return sketch

    def add(self, value: float, now: float) -> bool:
        """Observe ``value`` (finite, >= 0) at ``now``; ``False`` if its bucket expired."""
        sketch = self._sketch_at(now)
        if sketch is None:
            return False
        sketch.add(value)  # validates
        return True

    def add_many(self, values: Values, now: float) -> bool:
        """Observe several values at the same ``now``; ``False`` if their bucket expired."""
        sketch = self._sketch_at(now)
        if sketch is None:
            return False
        sketch.add_many(values)  # validates
        return True

    def _add_checked(self, x: npt.NDArray[np.float64], now: float) -> bool:
        """``add_many`` of values known to be finite and >= 0."""
        return self.add_many(x, now)

    def sketch(self, now: float) -> QuantileSketch:
        """A new sketch: the merge of the buckets in the window at ``now``."""
        live = [self._sketches[slot] for slot in self._live(now)]
        return QuantileSketch.merged((s for s in live if s is not None), self.relative_accuracy)

    def state(self, now: float) -> _QuantileState:
        """Free the buckets that left the window at ``now``; the rest, detached: closed compact
        sketches are shared (``_sketch_at`` copies before changing one), the open bucket's and
        any with pending bins are copied."""
        self._expire(bucket_index(now, self.width))
        top = self._top
        sketches = tuple(
            None if sk is None else sk if index != top and sk.compacted else sk.copy()
            for index, sk in zip(self._index, self._sketches)
        )
        return _QuantileState(self.window, self.width, self.buckets, self.relative_accuracy, tuple(self._index), sketches)

    def samples(self, now: float) -> int:
        """n: observations in the window at ``now``."""
        return self.sketch(now).count

    def quantiles(self, qs: Sequence[float], now: float) -> list[float | None]:
        """``QuantileSketch.quantiles`` over the window at ``now``."""
        return self.sketch(now).quantiles(qs)


_Rolling: TypeAlias = RollingMean | RollingQuantiles


class Outcome(enum.Enum):
    """What ``WindowStore.observe`` did with an observation."""

    ACCEPTED = "accepted"
    """Added to the key's own series."""
    FOLDED = "folded"
    """Series cap reached: added to the series ``fold(key)``."""
    DROPPED = "dropped"
    """Series cap reached and no fold series available: discarded."""
    INVALID = "invalid"
    """Not finite (or negative, for quantiles): discarded."""
    LATE = "late"
    """Older than every window's newest R buckets: discarded."""


@dataclass(frozen=True, slots=True)
class WindowReading(Generic[K]):
    """One series over one window at a read.

    ``mean`` is Σx / n (``None`` when ``samples`` is 0). ``quantiles`` maps each configured q
    to its value; empty for a mean store or when ``samples`` is 0.
    """

    key: K
    window: float
    samples: int
    mean: float | None
    quantiles: Mapping[float, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Counters of a ``WindowStore``: gauges (series, folded_series, buckets in use) and
    running totals of discarded observations and evicted series (the rest)."""

    series: int
    folded_series: int
    buckets: int
    folded: int
    dropped: int
    invalid: int
    late: int
    evicted: int


class _Series:
    __slots__ = ("folded", "last", "rings")

    def __init__(self, rings: tuple[_Rolling, ...], folded: bool) -> None:
        self.rings = rings
        self.last = -math.inf
        self.folded = folded


class WindowStore(Generic[K]):
    """Rolling state per series key (a tuple of label values) for each configured window.

    A mean store (``quantiles`` empty) keeps a ``RollingMean`` per window; a quantile store
    keeps a ``RollingQuantiles`` and reads give the configured quantiles plus the exact mean.

    Caps. At most ``max_series`` series of their own. Past that, an observation for a new key
    goes to the series ``fold(key)`` (e.g. the same labels with ``service="other"``), which may
    be created while fewer than ``max_folded`` fold series exist; otherwise, or without
    ``fold``, it is dropped. So a store never holds more than ``max_series + max_folded``
    series, each of ``len(windows) × buckets`` buckets. Every discard and fold is counted in
    ``stats()`` (with the observations a caller marks ``folded``: those it sent to a fold
    series itself). A folded key gets its own series once eviction makes room. ragmon keeps
    one store per gauge family, so ``max_series`` is that family's series budget.

    Eviction. A series with no observation left in any window (its newest one is out of every
    window: ``not ring.covers(last, now)``) is removed on each ``read`` and, when a new key
    meets a full store, at most once per bucket of the finest window.
    """

    def __init__(
        self,
        windows: Sequence[float],
        *,
        buckets: int = DEFAULT_BUCKETS,
        quantiles: Sequence[float] = (),
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
        max_series: int = 10_000,
        fold: Callable[[K], K] | None = None,
        max_folded: int = 64,
    ) -> None:
        self.windows = _check_windows(windows)
        self.quantiles = tuple(float(q) for q in quantiles)
        for q in self.quantiles:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantiles must be in [0, 1], got {q!r}")
        for name, cap in (("max_series", max_series), ("max_folded", max_folded)):
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {cap!r}")
        RollingQuantiles(self.windows[0], buckets, relative_accuracy)  # validates both
        self.buckets = buckets
        self.relative_accuracy = relative_accuracy
        self.max_series = max_series
        self.max_folded = max_folded
        self._fold = fold
        self._lower = 0.0 if self.quantiles else -_LARGEST
        self._bulk_min = _BULK_MIN[1] if self.quantiles else _BULK_MIN[0]
        self._series: dict[K, _Series] = {}
        self._n_folded = 0
        self._sweep_width = min(self.windows) / buckets
        self._widths = tuple(w / buckets for w in self.windows)
        self._swept = _NEVER
        self._counts = {"folded": 0, "dropped": 0, "invalid": 0, "late": 0, "evicted": 0}

    def __len__(self) -> int:
        return len(self._series)

    def _new_rings(self) -> tuple[_Rolling, ...]:
        if self.quantiles:
            return tuple(
                RollingQuantiles(w, self.buckets, self.relative_accuracy) for w in self.windows
            )
        return tuple(RollingMean(w, self.buckets) for w in self.windows)

    def same_buckets(self, t0: float, t1: float) -> bool:
        """True when ``t0`` and ``t1`` lie in the same bucket of every window: an observation
        made at either lands in the same place (callers may buffer across such times)."""
        if not (math.isfinite(t0) and math.isfinite(t1)):
            return False
        return all(math.floor(t0 / w) == math.floor(t1 / w) for w in self._widths)

    def observe(self, key: K, value: float, now: float, *, folded: bool = False) -> Outcome:
        """Add one observation of series ``key`` at ``now``.

        ``folded``: ``key`` is already a fold series chosen by the caller (whose own budget was
        full); the observation is counted as folded (``Outcome.FOLDED``).
        """
        if not self._lower <= value <= _LARGEST:
            self._counts["invalid"] += 1
            return Outcome.INVALID
        series, outcome = self._series_for(key, now)
        if series is None:
            self._counts["dropped"] += 1
            return outcome
        stored = False
        for ring in series.rings:
            stored = ring.add(value, now) or stored
        return self._settle(series, Outcome.FOLDED if folded else outcome, now, stored, 1)

    def observe_many(self, key: K, values: Values, now: float, *, folded: bool = False) -> Outcome:
        """Add several observations of series ``key`` at the same ``now`` (the fast path).

        Same series, counts, sums and sketch bins as ``observe`` on each value in turn (only a
        sketch's own sum, unused by reads' quantiles, may round differently). Invalid values
        are counted and skipped; the outcome is that of the valid ones. A short list goes
        through ``observe`` (cheaper than numpy below ``_BULK_MIN`` values). ``folded`` as for
        ``observe``.
        """
        if isinstance(values, list) and len(values) < self._bulk_min:
            outcome = Outcome.INVALID if values else Outcome.ACCEPTED
            for value in values:
                one = self.observe(key, value, now, folded=folded)
                if one is not Outcome.INVALID:
                    outcome = one
            return outcome
        x = np.asarray(values, dtype=np.float64).ravel()
        bad = 0
        if x.size and not (self._lower <= x.min() and x.max() <= _LARGEST):  # NaN fails too
            valid = (x >= self._lower) & (x <= _LARGEST)
            bad = int(x.size - np.count_nonzero(valid))
            self._counts["invalid"] += bad
            x = x[valid]
        if x.size == 0:
            return Outcome.INVALID if bad else Outcome.ACCEPTED
        series, outcome = self._series_for(key, now)
        if series is None:
            self._counts["dropped"] += int(x.size)
            return outcome
        stored = False
        for ring in series.rings:
            stored = ring._add_checked(x, now) or stored
        return self._settle(series, Outcome.FOLDED if folded else outcome, now, stored, int(x.size))

    def _settle(
        self, series: _Series, outcome: Outcome, now: float, stored: bool, n: int
    ) -> Outcome:
        if now > series.last:
            series.last = now
        if not stored:
            self._counts["late"] += n
            return Outcome.LATE
        if outcome is Outcome.FOLDED:
            self._counts["folded"] += n
        return outcome

    def _series_for(self, key: K, now: float) -> tuple[_Series | None, Outcome]:
        """The series to add to: the key's own, a fold series, or none (dropped)."""
        series = self._series.get(key)
        if series is not None:
            return series, Outcome.ACCEPTED
        if len(self._series) - self._n_folded >= self.max_series:
            self._sweep(now)
        if len(self._series) - self._n_folded < self.max_series:
            series = self._series[key] = _Series(self._new_rings(), folded=False)
            return series, Outcome.ACCEPTED
        if self._fold is None:
            return None, Outcome.DROPPED
        other = self._fold(key)
        series = self._series.get(other)
        if series is not None:
            return series, Outcome.FOLDED
        if self._n_folded >= self.max_folded:
            return None, Outcome.DROPPED
        self._n_folded += 1
        series = self._series[other] = _Series(self._new_rings(), folded=True)
        return series, Outcome.FOLDED

    def _sweep(self, now: float) -> None:
        """``evict`` at most once per bucket of the finest window (series expire no faster)."""
        b = bucket_index(now, self._sweep_width)
        if b > self._swept:
            self._swept = b
            self.evict(now)

    def evict(self, now: float) -> int:
        """Remove the series with no observation left in any window at ``now``; return how many."""
        dead = [
            key
            for key, series in self._series.items()
            if not any(ring.covers(series.last, now) for ring in series.rings)
        ]
        for key in dead:
            if self._series.pop(key).folded:
                self._n_folded -= 1
        self._counts["evicted"] += len(dead)
        return len(dead)

    def read(self, now: float) -> list[WindowReading[K]]:
        """Evict, then one reading per live series and window (windows in configured order)."""
        return self.snapshot(now).read()

    def snapshot(self, now: float) -> WindowSnapshot[K]:
        """Evict, then a detached copy of every live series' buckets at ``now`` (a few list
        copies per series): ``read()`` it later or elsewhere, e.g. in a worker thread, while
        this store goes on taking observations."""
        self.evict(now)
        return WindowSnapshot(
            now, self.quantiles, [(key, [ring.state(now) for ring in series.rings]) for key, series in self._series.items()]
        )

    def discards(self) -> dict[str, int]:
        """Running totals of ``stats()`` (folded, dropped, invalid, late, evicted), without its
        walk over every bucket."""
        return dict(self._counts)

    def stats(self) -> WindowStats:
        """Series and buckets held now; totals of discarded observations and evicted series."""
        c = self._counts
        return WindowStats(
            series=len(self._series),
            folded_series=self._n_folded,
            buckets=sum(r.buckets_in_use() for s in self._series.values() for r in s.rings),
            folded=c["folded"],
            dropped=c["dropped"],
            invalid=c["invalid"],
            late=c["late"],
            evicted=c["evicted"],
        )


class WindowSnapshot(Generic[K]):
    """A ``WindowStore``'s series as they were at ``now``; nothing in it changes afterwards."""

    def __init__(
        self, now: float, quantiles: tuple[float, ...], series: list[tuple[K, list[_MeanState | _QuantileState]]]
    ) -> None:
        self.now = now
        self._quantiles = quantiles
        self._series = series

    def read(self) -> list[WindowReading[K]]:
        """One reading per series and window (windows in configured order), as ``WindowStore.read``."""
        return [self._reading(key, state) for key, states in self._series for state in states]

    def _reading(self, key: K, state: _MeanState | _QuantileState) -> WindowReading[K]:
        now = self.now
        if isinstance(state, _MeanState):
            n, total = state.summary(now)
            return WindowReading(key, state.window, n, total / n if n else None)
        sketch = state.sketch(now)
        n = sketch.count
        if n == 0:
            return WindowReading(key, state.window, 0, None)
        values = sketch.quantiles(self._quantiles)
        return WindowReading(key, state.window, n, sketch.sum / n, dict(zip(self._quantiles, values)))


def _check_windows(windows: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(w) for w in windows)
    if not out:
        raise ValueError("windows must list at least one window")
    for w in out:
        if not 0.0 < w < math.inf:
            raise ValueError(f"windows must be positive numbers of seconds, got {w!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"windows must be distinct, got {list(out)}")
    return out


def window_label(seconds: float) -> str:
    """A window's ``window`` label: ``300.0`` -> ``5m``, ``3600.0`` -> ``1h``, ``7.5`` -> ``7.5s``."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
