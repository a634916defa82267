"""What the recorders share: label limits, the series budget, the rolling stores and the buffer.

Each recorder (``requests``, ``calls``, ``retrieval``, ``judgements``, ``feedback``) owns the
families of what it records and binds its series on first use; the values it observes wait in
``Stream`` buffers listed in one ``Recording``, which folds them into the rolling windows and
histograms in bulk (``flush``). Past ``max_series`` bound entries, a recorder's new keys share
one fold entry (service, variant and model ``other``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from ragmon import catalogue as cat
from ragmon.catalogue import Family
from ragmon.export.labels import OTHER, LabelLimiter
from ragmon.export.series import CounterFamily, FoldedSeries, HistogramFamily, HistogramSeries
from ragmon.export.windows import DEFAULT_QUANTILES, WindowStore

__all__ = [
    "FOLDED_LABELS",
    "MAX_BUFFERED",
    "MEAN_GAUGES",
    "LatencyKey",
    "MeanKey",
    "Recording",
    "Stream",
]

FOLDED_LABELS = frozenset({"service", "variant", "model"})
"""Labels whose values come from traffic: they pass through the ``LabelLimiter``
(``ragmon_label_values_folded_total``, ``ragmon_label_values_truncated_total``) and are the
ones set to ``other`` in a family's fold series."""
MAX_BUFFERED = 512
"""Records (and judgements) buffered before a flush by itself: bounds the buffers while the
clock stays in the same window buckets."""
MEAN_GAUGES: dict[str, Family] = {family.name: family for family in cat.MEAN_GAUGES}

MeanKey = tuple[str, str, str, str, str]
"""(gauge, service, variant, source, detail) of a mean series: ``detail`` is ``k`` for retrieval
gauges and ``judge`` for generation gauges; "" where a label does not apply."""
LatencyKey = tuple[str, str, str]
"""(service, variant, stage)."""
K = TypeVar("K", bound=Hashable)


def fold_mean(key: MeanKey) -> MeanKey:
    """A mean series' fold series: service and variant ``other``, the rest kept."""
    return (key[0], OTHER, OTHER, key[3], key[4])


def fold_latency(key: LatencyKey) -> LatencyKey:
    """A latency series' fold series: service and variant ``other``, the stage kept."""
    return (OTHER, OTHER, key[2])


class Stream(Generic[K]):
    """Values of one window series (and of its histogram series) awaiting ``flush``.

    ``trace_ids`` holds one id per value for a histogram with exemplars, else stays empty.
    ``folded``: ``key`` is a fold series standing for keys past the budget (counted as folded).
    A plain class: mypyc cannot compile a generic dataclass.
    """

    __slots__ = ("key", "store", "histogram", "folded", "values", "trace_ids")

    def __init__(
        self,
        key: K,
        store: WindowStore[K],
        histogram: tuple[HistogramFamily, HistogramSeries | FoldedSeries] | None = None,
        folded: bool = False,
    ) -> None:
        self.key = key
        self.store = store
        self.histogram = histogram
        self.folded = folded
        self.values: list[float] = []
        self.trace_ids: list[str] = []


def _fold(streams: Iterable[Stream[Any]], now: float, wall: float) -> None:
    """Add each stream's values to its window series and histogram series, then empty it."""
    for stream in streams:
        values = stream.values
        try:
            if values:
                stream.store.observe_many(stream.key, values, now, folded=stream.folded)
                if stream.histogram is not None:
                    family, series = stream.histogram
                    family.add(series, values, stream.trace_ids or None, wall)
        finally:
            values.clear()
            stream.trace_ids.clear()


class Recording:
    """The state every recorder shares, for one registry. Not thread-safe (one event loop)."""

    def __init__(
        self, *, windows: Iterable[float], max_series: int, limit: LabelLimiter, wall: Callable[[], float],
    ) -> None:
        windows = tuple(windows)
        self.limit = limit
        self.max_series = max_series
        self.wall = wall
        self.gauges: dict[str, WindowStore[MeanKey]] = {
            name: WindowStore(windows, max_series=max_series, fold=fold_mean) for name in MEAN_GAUGES
        }
        """One store per rolling mean gauge family (its series budget is the store's)."""
        self.latency: WindowStore[LatencyKey] = WindowStore(
            windows, quantiles=DEFAULT_QUANTILES, max_series=max_series, fold=fold_latency
        )
        self.means: list[Stream[MeanKey]] = []
        """Mean streams holding values, each listed once (on its first pending value)."""
        self.latencies: list[Stream[LatencyKey]] = []
        """Latency streams holding values, each listed once."""
        self._now = -math.inf
        """``now`` of the buffered values (``make_room`` flushes when a new ``now`` falls in other window buckets)."""
        self._buffered = 0
        """Records and judgements buffered since the last flush (at most ``MAX_BUFFERED``)."""

    def counter(self, family: Family) -> CounterFamily:
        """A counter family under the series budget."""
        return CounterFamily(family.name, family.help, family.labels, self.wall, max_series=self.max_series, fold_labels=FOLDED_LABELS)

    def histogram(self, family: Family) -> HistogramFamily:
        """A histogram family under the series budget."""
        return HistogramFamily(
            family.name, family.help, family.labels, family.buckets, self.wall,
            max_series=self.max_series, fold_labels=FOLDED_LABELS,
        )

    def stream(self, gauge: str, service: str, variant: str, source: str, detail: str, *, folded: bool) -> Stream[MeanKey]:
        """The buffer of one mean series of rolling gauge ``gauge``."""
        return Stream((gauge, service, variant, source, detail), self.gauges[gauge], folded=folded)

    def make_room(self, now: float) -> None:
        """Make room for one more record observed at ``now``: flush first when the clock left
        the window buckets of the buffered values (folding them later would then misplace
        them) or when ``MAX_BUFFERED`` records wait. Every store has the same windows and
        buckets, so the latency store answers for all."""
        if now != self._now and not self.latency.same_buckets(self._now, now):
            self.flush()
            self._now = now
        if self._buffered >= MAX_BUFFERED:
            self.flush()
        self._buffered += 1

    def flush(self) -> None:
        """Fold the buffered values into the rolling windows (at the ``now`` they were observed
        at) and the histograms; empty the buffers."""
        self._buffered = 0
        if not (self.means or self.latencies):
            return
        wall = self.wall()
        means, self.means = self.means, []
        latencies, self.latencies = self.latencies, []
        _fold(means, self._now, wall)
        _fold(latencies, self._now, wall)
