"""Counters and histograms as plain state, exported by a collector: no per-update locks.

A traces-to-metrics connector folds batches into this state on a tick and the registry builds
the families at scrape time. The samples equal those of prometheus_client's ``Counter`` and
``Histogram`` fed the same values in the same order: children in order of first use,
``_total``/``_bucket``/``_count``/``_sum`` sums added in order (so the same float rounding),
``_created`` (unless prometheus_client's created series are disabled), and per bucket the
latest exemplar. Exemplar and ``_created`` timestamps are the wall clock when the batch was
folded in (resp. the series made), not of each observation.

Series budget. A family made with ``max_series`` keeps at most that many label sets of its own;
past it a new label set goes to its fold series: the same labels with those named in
``fold_labels`` (e.g. service, variant, model) set to ``other``, the others (source, k, stage, …)
kept. Fold series are made on demand outside the budget, so a family holds at most
``max_series`` plus one series per combination of the kept labels' values. A folded label set
is handed out as a ``FoldedCell`` / ``FoldedSeries``: what is added through it lands in the
fold series (totals stay exact) and is counted in the family's ``folded``.

Not thread-safe: update and collect on one thread (ragmon's event loop). A collected family
holds copies of the values (``DeferredFamily``), so reading it elsewhere (a worker thread) is
safe while the state goes on changing.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Generic, TypeAlias, TypeVar

import numpy as np
from prometheus_client import Counter
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

from ragmon.export.labels import OTHER

__all__ = [
    "BULK_MIN",
    "Buckets",
    "Cell",
    "CounterCell",
    "CounterFamily",
    "DeferredFamily",
    "FoldedCell",
    "FoldedSeries",
    "HistogramFamily",
    "HistogramSeries",
    "SeriesCollector",
    "running_sum",
]

Labels: TypeAlias = tuple[str, ...]
Family: TypeAlias = "CounterFamily | HistogramFamily"

BULK_MIN = 16
"""Batches at least this long are bucketed with numpy; shorter ones in Python."""


def _fold_positions(labelnames: Sequence[str], fold_labels: Collection[str]) -> tuple[int, ...]:
    """Indexes in ``labelnames`` of the labels that fold into ``other``."""
    return tuple(i for i, name in enumerate(labelnames) if name in fold_labels)


def _folded_labels(labels: Labels, positions: Sequence[int]) -> Labels:
    """``labels`` with the values at ``positions`` replaced by ``other`` (a fold series' labels)."""
    out = list(labels)
    for i in positions:
        out[i] = OTHER
    return tuple(out)


def _check_budget(max_series: object) -> int:
    """``max_series`` checked (any value: compiled, a typed parameter would be checked first)."""
    if max_series is None:
        return sys.maxsize
    if isinstance(max_series, bool) or not isinstance(max_series, int) or max_series < 0:
        raise ValueError(f"max_series must be an integer >= 0, got {max_series!r}")
    return max_series


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
    """Whether prometheus_client writes ``_created`` samples (env PROMETHEUS_DISABLE_CREATED_SERIES,
    ``disable_created_metrics()``): asked of a throwaway counter of its own, in no registry."""
    probe = Counter("ragmon_probe", "", registry=None)
    return any(sample.name.endswith("_created") for family in probe.collect() for sample in family.samples)


M = TypeVar("M", bound=Metric)


class DeferredFamily(Metric, Generic[M]):
    """A family whose samples are made on their first read: ``fill`` adds them to ``template``
    (an empty family of the right name and type) from data copied when the family was
    collected. Collecting is then a cheap copy on the event loop; the samples are built by
    whoever reads them first, e.g. the worker thread that encodes a scrape. Read twice, it
    gives the same samples; a first read from two threads at once is not safe (in-process
    scrapes build them under a lock)."""

    def __init__(self, template: M, fill: Callable[[M], None]) -> None:
        super().__init__(template.name, template.documentation, template.type, template.unit)
        self._template: M | None = template
        self._fill = fill

    @property
    def samples(self) -> list[Sample]:
        template = self._template
        if template is not None:
            self._template = None
            self._fill(template)
            self._samples = template.samples
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value


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


class FoldedCell:
    """A label set past its family's budget: increments go to the fold series ``target`` and
    each is counted in the family's ``folded``."""

    __slots__ = ("_family", "target")

    def __init__(self, target: CounterCell, family: CounterFamily) -> None:
        self.target = target
        self._family = family

    def inc(self, amount: float = 1.0) -> None:
        """``target.inc(amount)``, counted as one folded observation."""
        self.target.inc(amount)
        self._family.folded += 1


Cell: TypeAlias = "CounterCell | FoldedCell"

S = TypeVar("S")
F = TypeVar("F")


class _BudgetedFamily(Generic[S, F]):
    """A family's series by label values, made on first use, at most ``max_series`` of its own
    (module docstring: series budget): the budget and folding both families share. ``S`` is a
    series, ``F`` a folded label set's handle on its fold series; a family says how to make each
    (``_new``, ``_fold_into``)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        wall: Callable[[], float],
        *,
        max_series: int | None | object = None,
        fold_labels: Collection[str] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.max_series = _check_budget(max_series)
        self.folded = 0
        """What went to a fold series because the budget was full (increments, values)."""
        self._wall = wall
        self._made: dict[Labels, S] = {}
        self._own = 0
        self._positions = _fold_positions(self.labelnames, fold_labels)
        self._folders: dict[Labels, F] = {}

    def __len__(self) -> int:
        return len(self._made)

    def _new(self) -> S:
        raise NotImplementedError

    def _fold_into(self, target: S) -> F:
        raise NotImplementedError

    def _one(self, labels: Labels) -> S | F:
        """The series of ``labels``, made now if new (folded past the budget)."""
        made = self._made.get(labels)
        if made is not None:
            return made
        return self._group((labels,))[0]

    def _group(self, group: Sequence[Labels]) -> list[S | F]:
        """The series of each label set of ``group``: the new ones are made together if the
        budget has room for all of them, else all of them fold."""
        new = [labels for labels in dict.fromkeys(group) if labels not in self._made]
        if self._own + len(new) <= self.max_series:
            for labels in new:
                self._made[labels] = self._new()
            self._own += len(new)
            return [self._made[labels] for labels in group]
        return [self._made[labels] if labels not in new else self._folded(labels) for labels in group]

    def _folded(self, labels: Labels) -> F:
        """``labels`` as a folded label set: what is added through it lands in its fold series."""
        target_labels = _folded_labels(labels, self._positions)
        folder = self._folders.get(target_labels)
        if folder is None:
            target = self._made.get(target_labels)
            if target is None:
                target = self._made[target_labels] = self._new()
            folder = self._folders[target_labels] = self._fold_into(target)
        return folder


class CounterFamily(_BudgetedFamily[CounterCell, FoldedCell]):
    """A counter's series by label values, made on first use, at most ``max_series`` of its own
    (module docstring: series budget)."""

    def _new(self) -> CounterCell:
        return CounterCell(self._wall())

    def _fold_into(self, target: CounterCell) -> FoldedCell:
        return FoldedCell(target, self)

    def cell(self, labels: Labels) -> Cell:
        """The series of ``labels``, made now if new (folded past the budget)."""
        return self._one(labels)

    def cells(self, group: Sequence[Labels]) -> list[Cell]:
        """The series of each label set of ``group``, made together or folded together."""
        return self._group(group)

    def folded_cell(self, labels: Labels) -> FoldedCell:
        """``labels`` as a folded label set: increments counted in its fold series."""
        return self._folded(labels)

    def describe(self) -> Metric:
        """The family without samples."""
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Metric:
        """The family with a ``_total`` (and ``_created``) sample per series: the values are
        copied now, the samples made on first read (``DeferredFamily``)."""
        created = _created_enabled()
        rows = [(labels, cell.value, cell.created if created else None) for labels, cell in self._made.items()]

        def fill(family: CounterMetricFamily) -> None:
            for labels, value, created_at in rows:
                family.add_metric(labels, value, created_at)

        return DeferredFamily(CounterMetricFamily(self.name, self.documentation, labels=self.labelnames), fill)


class HistogramSeries:
    """One histogram series: per-bucket counts (not cumulative), sum, and per bucket the
    latest ``(trace_id, value, wall time)`` for its exemplar."""

    __slots__ = ("counts", "created", "exemplars", "sum")

    def __init__(self, buckets: int, created: float) -> None:
        self.counts = [0] * buckets
        self.sum = 0.0
        self.exemplars: list[tuple[str, float, float] | None] = [None] * buckets
        self.created = created


class FoldedSeries:
    """A label set past its family's budget: values go to the fold series ``target`` (see
    ``HistogramFamily.add``) and are counted in the family's ``folded``."""

    __slots__ = ("target",)

    def __init__(self, target: HistogramSeries) -> None:
        self.target = target


class HistogramFamily(_BudgetedFamily[HistogramSeries, FoldedSeries]):
    """A histogram's series by label values, made on first use, at most ``max_series`` of its
    own (module docstring: series budget); values are added in batches."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        wall: Callable[[], float],
        *,
        max_series: int | None | object = None,
        fold_labels: Collection[str] = (),
    ) -> None:
        super().__init__(name, documentation, labelnames, wall, max_series=max_series, fold_labels=fold_labels)
        self.buckets = Buckets(buckets)

    def _new(self) -> HistogramSeries:
        return HistogramSeries(len(self.buckets), self._wall())

    def _fold_into(self, target: HistogramSeries) -> FoldedSeries:
        return FoldedSeries(target)

    def series(self, labels: Labels) -> HistogramSeries | FoldedSeries:
        """The series of ``labels``, made now if new (folded past the budget)."""
        return self._one(labels)

    def series_group(self, group: Sequence[Labels]) -> list[HistogramSeries | FoldedSeries]:
        """The series of each label set of ``group``, made together or folded together."""
        return self._group(group)

    def folded_series(self, labels: Labels) -> FoldedSeries:
        """``labels`` as a folded label set: values counted in its fold series."""
        return self._folded(labels)

    def add(
        self,
        series: HistogramSeries | FoldedSeries,
        values: Sequence[float],
        trace_ids: Sequence[str] | None,
        wall: float,
    ) -> None:
        """Observe ``values`` in order; with ``trace_ids`` (one per value), each bucket's exemplar
        becomes its latest value's, stamped ``wall``. Values of a ``FoldedSeries`` go to its
        fold series and are counted in ``folded``."""
        if isinstance(series, FoldedSeries):
            self.folded += len(values)
            series = series.target
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
        """The family: cumulative ``_bucket`` samples with exemplars, ``_count``, ``_sum``,
        ``_created``; the series are copied now, the samples made on first read
        (``DeferredFamily``)."""
        created = _created_enabled()
        rows = [
            (labels, tuple(series.counts), series.sum, tuple(series.exemplars), series.created)
            for labels, series in self._made.items()
        ]
        name, labelnames, les = self.name, self.labelnames, self.buckets.labels

        def fill(family: HistogramMetricFamily) -> None:
            for labels, counts, sum_value, exemplars, created_at in rows:
                buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
                total = 0.0
                for le, n, exemplar in zip(les, counts, exemplars):
                    total += n
                    if exemplar is None:
                        buckets.append((le, total))
                    else:
                        trace_id, value, wall = exemplar
                        buckets.append((le, total, Exemplar({"trace_id": trace_id}, value, wall)))
                family.add_metric(labels, buckets, sum_value)
                if created:
                    family.samples.append(Sample(name + "_created", dict(zip(labelnames, labels)), created_at))

        return DeferredFamily(HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames), fill)


class SeriesCollector(Collector):
    """Exports ``families`` in order, calling ``before`` first (e.g. to fold in pending data).

    ``collect`` builds one family per step of its iterator, so a caller may do other work
    between families."""

    def __init__(self, families: Sequence[Family], before: Callable[[], None]) -> None:
        self._families = tuple(families)
        self._before = before

    def describe(self) -> Iterable[Metric]:
        return [f.describe() for f in self._families]

    def collect(self) -> Iterator[Metric]:
        self._before()
        for family in self._families:
            yield family.collect()
