"""Counters and histograms as plain state, exported by a collector: no per-update locks.

A traces-to-metrics connector folds batches into this state on a tick and the registry builds
the families at scrape time. The samples equal those of prometheus_client's ``Counter`` and
``Histogram`` fed the same values in the same order: children in order of first use,
``_total``/``_bucket``/``_count``/``_sum`` sums added in order (so the same float rounding),
``_created`` (unless prometheus_client's created series are disabled), and per bucket the
latest exemplar. Exemplar and ``_created`` timestamps are the wall clock when the batch was
folded in (resp. the series made), not of each observation.

Not thread-safe: update and collect on one thread (ragmon's event loop).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

import numpy as np
from prometheus_client import metrics as _client_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

__all__ = [
    "BULK_MIN",
    "Buckets",
    "CounterCell",
    "CounterFamily",
    "HistogramFamily",
    "HistogramSeries",
    "SeriesCollector",
    "running_sum",
]

Labels: TypeAlias = tuple[str, ...]
Family: TypeAlias = "CounterFamily | HistogramFamily"

BULK_MIN = 16
"""Batches at least this long are bucketed with numpy; shorter ones in Python."""


def running_sum(start: float, values: Iterable[float]) -> float:
    """``start + v₀ + v₁ + …`` added left to right (the rounding of adding one at a time)."""
    for v in values:
        start += v
    return start


class Buckets:
    """A histogram's ``le`` bounds (ascending; +Inf appended if missing) and bulk bucketing."""

    __slots__ = ("_array", "bounds", "labels")

    def __init__(self, bounds: Sequence[float]) -> None:
        floats = [float(b) for b in bounds]
        if not floats or floats != sorted(floats):
            raise ValueError(f"buckets must be ascending and non-empty, got {list(bounds)}")
        if floats[-1] != math.inf:
            floats.append(math.inf)
        self.bounds = tuple(floats)
        self.labels = tuple(floatToGoString(b) for b in floats)  # type: ignore[no-untyped-call]
        """The ``le`` label values, as prometheus_client writes them."""
        self._array = np.array(floats)

    def __len__(self) -> int:
        return len(self.bounds)

    def count(self, values: Sequence[float], *, last: bool = False) -> tuple[list[int], list[int]]:
        """Per bucket i: how many ``values`` fall in it and, with ``last``, the index of the
        last one (-1 if none; without ``last``, an empty list).

        A value v falls in the first bucket with ``v <= bounds[i]``; NaN falls in none.
        """
        n = len(self.bounds)
        if len(values) < BULK_MIN:
            bounds = self.bounds
            counts = [0] * n
            latest = [-1] * n
            for i, v in enumerate(values):
                if not math.isnan(v):
                    b = bisect_left(bounds, v)
                    counts[b] += 1
                    latest[b] = i
            return counts, latest if last else []
        # NaN sorts past +Inf, into an extra bucket n that is cut off.
        index = np.searchsorted(self._array, np.asarray(values, dtype=np.float64))
        counts_out: list[int] = np.bincount(index, minlength=n + 1)[:n].tolist()
        if not last:
            return counts_out, []
        latest_array = np.full(n + 1, -1, dtype=np.int64)
        np.maximum.at(latest_array, index, np.arange(len(values)))
        return counts_out, latest_array[:n].tolist()


def _created_enabled() -> bool:
    """prometheus_client's switch for ``_created`` samples (env PROMETHEUS_DISABLE_CREATED_SERIES)."""
    return bool(getattr(_client_metrics, "_use_created", True))


class CounterCell:
    """One counter series: its value and when it was made."""

    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0, else ``ValueError``, as ``Counter.inc``)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class CounterFamily:
    """A counter's series by label values, made on first use."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], wall: Callable[[], float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._wall = wall
        self._cells: dict[Labels, CounterCell] = {}

    def cell(self, labels: Labels) -> CounterCell:
        """The series of ``labels``, made now if new."""
        cell = self._cells.get(labels)
        if cell is None:
            cell = self._cells[labels] = CounterCell(self._wall())
        return cell

    def describe(self) -> Metric:
        """The family without samples."""
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Metric:
        """The family with a ``_total`` (and ``_created``) sample per series."""
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _created_enabled()
        for labels, cell in self._cells.items():
            family.add_metric(labels, cell.value, cell.created if created else None)
        return family


class HistogramSeries:
    """One histogram series: per-bucket counts (not cumulative), sum, and per bucket the
    latest ``(trace_id, value, wall time)`` for its exemplar."""

    __slots__ = ("counts", "created", "exemplars", "sum")

    def __init__(self, buckets: int, created: float) -> None:
        self.counts = [0] * buckets
        self.sum = 0.0
        self.exemplars: list[tuple[str, float, float] | None] = [None] * buckets
        self.created = created


class HistogramFamily:
    """A histogram's series by label values, made on first use; values are added in batches."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        wall: Callable[[], float],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.buckets = Buckets(buckets)
        self._wall = wall
        self._series: dict[Labels, HistogramSeries] = {}

    def series(self, labels: Labels) -> HistogramSeries:
        """The series of ``labels``, made now if new."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = HistogramSeries(len(self.buckets), self._wall())
        return series

    def add(
        self,
        series: HistogramSeries,
        values: Sequence[float],
        trace_ids: Sequence[str] | None,
        wall: float,
    ) -> None:
        """Observe ``values`` in order; with ``trace_ids`` (one per value), each bucket's exemplar
        becomes its latest value's, stamped ``wall``."""
        counts, last = self.buckets.count(values, last=trace_ids is not None)
        totals = series.counts
        for b, n in enumerate(counts):
            if n:
                totals[b] += n
                if trace_ids is not None:
                    i = last[b]
                    series.exemplars[b] = (trace_ids[i], values[i], wall)
        series.sum = running_sum(series.sum, values)

    def describe(self) -> Metric:
        """The family without samples."""
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Metric:
        """The family: cumulative ``_bucket`` samples with exemplars, ``_count``, ``_sum``, ``_created``."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _created_enabled()
        for labels, series in self._series.items():
            buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
            total = 0.0
            for le, n, exemplar in zip(self.buckets.labels, series.counts, series.exemplars):
                total += n
                if exemplar is None:
                    buckets.append((le, total))
                else:
                    trace_id, value, wall = exemplar
                    buckets.append((le, total, Exemplar({"trace_id": trace_id}, value, wall)))
            family.add_metric(labels, buckets, series.sum)
            if created:
                family.samples.append(
                    Sample(self.name + "_created", dict(zip(self.labelnames, labels)), series.created)
                )
        return family


class SeriesCollector(Collector):
    """Exports ``families`` in order, calling ``before`` first (e.g. to fold in pending data)."""

    def __init__(self, families: Sequence[Family], before: Callable[[], None]) -> None:
        self._families = tuple(families)
        self._before = before

    def describe(self) -> Iterable[Metric]:
        return [f.describe() for f in self._families]

    def collect(self) -> Iterable[Metric]:
        self._before()
        return [f.collect() for f in self._families]
