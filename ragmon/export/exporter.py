"""Scores to Prometheus: aggregatable counters and histograms, and rolling-window gauges.

A traces-to-metrics connector: fold into state, build on a tick. ``RagMetrics.observe`` counts
one scored request and buffers its values; ``RagMetrics.flush`` folds the buffers into the
histograms (``ragmon.export.series``) and rolling windows in bulk, when the clock leaves the window
buckets the values belong to, every ``MAX_BUFFERED`` records, and before a scrape. Every family is built at scrape time
by custom collectors in ragmon's own registry (never the global one), which flush first and
build one family per step (a caller may yield to the event loop between families).
Every model call counts once in ``ragmon_tokens_total`` and ``ragmon_cost_usd_total``: a
request's calls through ``observe``, the calls of a trace that is not a RAG request (a bare
client's call, an indexing job's embeddings) through ``observe_calls``, which touches no
request series.

Bounds (SPEC §6, §10). Label values from traffic (service, variant, model) pass through a
``LabelLimiter``: cut to ``max_label_chars`` (``ragmon_label_values_truncated_total``), at most
``max_label_values`` distinct values per label (``ragmon_label_values_folded_total``). Each
family, counter, histogram or rolling gauge, keeps at most ``max_series`` label sets of its own;
past it a new one folds into the family's ``other`` series (service, variant and model set to
``other``; source, k, stage, token_type, judge kept), counted per family in
``ragmon_series_folded_total{metric}``. The per-request state bound here (one entry per
(service, variant), (service, variant, source), (service, model), generation series) has the
same budget, past which new keys share one folded entry per kept-label combination. Folded
observations count in full in the ``other`` series: totals across series stay exact.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import (
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ragmon import __version__
from ragmon.config import MetricsConfig, TracesConfig
from ragmon import catalogue as cat
from ragmon.compiled import pipeline
from ragmon.catalogue import LATENCY_BUCKETS, SCORE_BUCKETS, Family
from ragmon.export.labels import DEFAULT_MAX_CHARS, OTHER, LabelLimiter
from ragmon.export.series import (
    Cell,
    CounterFamily,
    DeferredFamily,
    FoldedSeries,
    HistogramFamily,
    HistogramSeries,
    SeriesCollector,
)
from ragmon.export.windows import (
    DEFAULT_QUANTILES,
    WindowReading,
    WindowSnapshot,
    WindowStore,
)
from ragmon.model import STAGES, RagRecord
from ragmon.numbers import span_seconds
from ragmon.otlp.decode import DECODER

from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

__all__ = [
    "GENERATION_SCORES",
    "LATENCY_BUCKETS",
    "SCORE_BUCKETS",
    "RagMetrics",
    "StatsCollector",
]

FOLDED_LABELS = frozenset({"service", "variant", "model"})
"""Labels whose values come from traffic: they pass through the ``LabelLimiter``
(``ragmon_label_values_folded_total``, ``ragmon_label_values_truncated_total``) and are the
ones set to ``other`` in a family's fold series."""
LIMITED_LABELS = FOLDED_LABELS | {"name"}
"""Every label the ``LabelLimiter`` caps: the folded ones and a user score's ``name`` (already
capped in number, it is kept in a fold series)."""
MAX_BUFFERED = 512
"""Records (and judgements) buffered before ``observe`` flushes by itself: bounds the buffers
while the clock stays in the same window buckets."""
LATENCY_GAUGE = cat.LATENCY.name
USER_FEEDBACK_GAUGE = cat.USER_FEEDBACK_MEAN.name

MeanKey = tuple[str, str, str, str, str]
"""(gauge, service, variant, source, detail) of a mean series: ``detail`` is ``k`` for retrieval
gauges and ``judge`` for generation gauges; "" where a label does not apply."""
LatencyKey = tuple[str, str, str]
"""(service, variant, stage)."""
K = TypeVar("K", bound=Hashable)

_MEAN_GAUGES: dict[str, Family] = {family.name: family for family in cat.MEAN_GAUGES}
GENERATION_SCORES: dict[str, str] = {name: family.help for name, family in cat.SCORE_HISTOGRAMS.items()}
"""Generation-quality scores (histogram ``ragmon_<name>``, gauge ``ragmon_<name>_mean``)."""


def _window_label(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _fold_mean(key: MeanKey) -> MeanKey:
    """A mean series' fold series: service and variant ``other``, the rest kept."""
    return (key[0], OTHER, OTHER, key[3], key[4])


def _fold_latency(key: LatencyKey) -> LatencyKey:
    """A latency series' fold series: service and variant ``other``, the stage kept."""
    return (OTHER, OTHER, key[2])


class _WindowCollector(Collector):
    """Builds the rolling gauges at scrape time, one family per step: each step copies one
    store (``WindowStore.snapshot``); readings and samples are computed from the copies on
    the family's first read (``DeferredFamily``)."""

    def __init__(self, metrics: RagMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        m.flush()
        snapshots: dict[str, _Readings] = {}
        for gauge, store in m.gauges.items():
            family = _MEAN_GAUGES[gauge]
            readings = snapshots[gauge] = _Readings(store.snapshot(m.clock()))
            template = GaugeMetricFamily(gauge, family.help, labels=family.labels)
            extra = family.labels[2:-1]  # between service, variant and window: source, k or judge
            yield DeferredFamily(template, functools.partial(_fill_mean, readings, extra))
        readings = snapshots[LATENCY_GAUGE] = _Readings(m.latency.snapshot(m.clock()))
        latency = GaugeMetricFamily(LATENCY_GAUGE, cat.LATENCY.help, labels=cat.LATENCY.labels)
        yield DeferredFamily(latency, functools.partial(_fill_latency, readings))
        samples = GaugeMetricFamily(cat.WINDOW_SAMPLES.name, cat.WINDOW_SAMPLES.help, labels=cat.WINDOW_SAMPLES.labels)
        yield DeferredFamily(samples, functools.partial(_fill_samples, snapshots))


class _Readings:
    """A store's snapshot and its readings, computed once on first use."""

    def __init__(self, snapshot: WindowSnapshot[Any]) -> None:
        self._snapshot: WindowSnapshot[Any] | None = snapshot
        self._readings: list[WindowReading[Any]] = []

    def __call__(self) -> list[WindowReading[Any]]:
        if self._snapshot is not None:
            self._readings = self._snapshot.read()
            self._snapshot = None
        return self._readings


def _fill_mean(readings: _Readings, extra: tuple[str, ...], family: GaugeMetricFamily) -> None:
    """One sample per mean series and window with observations."""
    for reading in readings():
        if reading.mean is not None:
            _, service, variant, source, detail = reading.key
            values = {"source": source, "k": detail, "judge": detail, "name": detail}
            family.add_metric([service, variant, *(values[e] for e in extra), _window_label(reading.window)], reading.mean)


def _fill_latency(readings: _Readings, family: GaugeMetricFamily) -> None:
    """One sample per latency series, quantile and window with observations."""
    for reading in readings():
        if reading.samples:
            service, variant, stage = reading.key
            window = _window_label(reading.window)
            for q, value in reading.quantiles.items():
                if value is not None:
                    family.add_metric([service, variant, stage, f"{q:g}", window], value)


def _fill_samples(snapshots: Mapping[str, _Readings], family: GaugeMetricFamily) -> None:
    """Observations behind each gauge series: per (service, variant, source, window) for a
    mean gauge (its k or judge series share it), per stage for latency."""
    for gauge, readings in snapshots.items():
        if gauge == LATENCY_GAUGE:
            for reading in readings():
                if reading.samples:
                    service, variant, stage = reading.key
                    family.add_metric([service, variant, "", f"latency_{stage}", _window_label(reading.window)], reading.samples)
            continue
        metric = gauge.removeprefix("ragmon_")
        counted: set[tuple[str, ...]] = set()
        for reading in readings():
            if reading.mean is not None:
                _, service, variant, source, detail = reading.key
                if gauge == USER_FEEDBACK_GAUGE:  # one sample count per name
                    source, metric = "feedback", f"user_feedback_mean:{detail}"
                window = _window_label(reading.window)
                if (service, variant, source, window) not in counted:
                    counted.add((service, variant, source, window))
                    family.add_metric([service, variant, source, metric, window], reading.samples)


class StatsCollector(Collector):
    """Exports counters kept elsewhere (receivers, assembly) through a callback at scrape time."""

    def __init__(self, build: Callable[[], Iterable[Metric]]) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        return self._build()


_PER_K_GAUGES = tuple(
    f.name for f in (cat.RETRIEVAL_HIT_RATE, cat.RETRIEVAL_RECALL_MEAN, cat.RETRIEVAL_PRECISION_MEAN, cat.RETRIEVAL_NDCG_MEAN)
)


class _Stream(Generic[K]):
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


@dataclass(slots=True)
class _ServiceSeries:
    """State of one (service, variant) bound once: no label lookups per request."""

    service: str
    variant: str
    folded: bool
    traces: Cell
    errors: Cell
    unlabelled: Cell
    error: _Stream[MeanKey]
    total: _Stream[LatencyKey]
    stages: dict[str, _Stream[LatencyKey]] = field(default_factory=dict)
    cost: _Stream[MeanKey] | None = None
    """Made on the first request with a cost (as its window series was)."""


class _ModelSeries:
    """Counters of one (service, model), each made on its first use (as its series was)."""

    __slots__ = ("_cells", "_folded", "_labels")

    def __init__(self, labels: dict[str, tuple[CounterFamily, tuple[str, ...]]], folded: bool) -> None:
        self._labels = labels
        self._folded = folded
        self._cells: dict[str, Cell] = {}

    def counter(self, name: str) -> Cell:
        """The cell of counter ``name`` ("input", "output", "cost", "without_usage")."""
        cell = self._cells.get(name)
        if cell is None:
            family, labels = self._labels[name]
            cell = self._cells[name] = family.folded_cell(labels) if self._folded else family.cell(labels)
        return cell


_PerK: TypeAlias = tuple[int, Cell, list[float], list[float], list[float], list[float]]
"""(k, hits counter, and the pending hit, recall, precision, NDCG values)."""


@dataclass(frozen=True, slots=True)
class _RetrievalSeries:
    """State of one (service, variant, source) bound once: no label lookups per request."""

    queries: Cell
    rr: _Stream[MeanKey]
    streams: tuple[_Stream[MeanKey], ...]
    """rr, then per k hit, recall, precision, NDCG: always fed together, pending together."""
    per_k: tuple[_PerK, ...]


def _fold(streams: list[_Stream[Any]], now: float, wall: float) -> None:
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


@mypyc_attr(allow_interpreted_subclasses=True)
class RagMetrics:
    """The sidecar's metric state for one registry.

    ``observe`` updates the counters and buffers the values of histograms and rolling windows;
    ``flush`` folds the buffers in (the scrape-time collectors flush first). Not thread-safe:
    observe, flush and scrapes run on one thread (the event loop). ``max_series`` is the series
    budget of every family and of each map of bound state (module docstring).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        ks: Sequence[int],
        windows: Sequence[float],
        max_label_values: int,
        clock: Callable[[], float],
        max_series: int | object = MetricsConfig().max_series,  # any value: checked below
        max_label_chars: int = DEFAULT_MAX_CHARS,
        wall: Callable[[], float] = time.time,
        max_duration: float = TracesConfig().max_duration,
    ) -> None:
        if isinstance(max_series, bool) or not isinstance(max_series, int) or max_series < 1:
            raise ValueError(f"max_series must be an integer >= 1, got {max_series!r}")
        self.ks = tuple(ks)
        self.clock = clock
        self.max_series = max_series
        self.limit = LabelLimiter(max_label_values, max_label_chars)
        self._wall = wall
        self.max_duration = max_duration
        """Seconds: a request lasting longer (or ending before it starts) records no latency."""
        self.invalid_durations: dict[str, int] = {}
        """Spans whose duration was out of range, by stage (``ragmon_durations_invalid_total``)."""
        self._services: dict[tuple[str, str], _ServiceSeries] = {}
        self._retrieval: dict[tuple[str, str, str], _RetrievalSeries] = {}
        self._models: dict[tuple[str, str], _ModelSeries] = {}
        self._generation: dict[str, dict[tuple[str, str, str, str], _Stream[MeanKey]]] = {
            name: {} for name in GENERATION_SCORES
        }
        self._folded_service: _ServiceSeries | None = None
        self._folded_retrieval: dict[str, _RetrievalSeries] = {}
        self._folded_model: _ModelSeries | None = None
        self._folded_generation: dict[tuple[str, str, str], _Stream[MeanKey]] = {}
        self._now = -math.inf
        """``now`` of the buffered observations (``observe`` flushes when a new ``now`` falls in other window buckets)."""
        self._buffered = 0
        """Records and judgements buffered since the last flush (at most ``MAX_BUFFERED``)."""
        self._pending_means: list[_Stream[MeanKey]] = []
        self._pending_latency: list[_Stream[LatencyKey]] = []
        self.gauges: dict[str, WindowStore[MeanKey]] = {
            name: WindowStore(windows, max_series=max_series, fold=_fold_mean) for name in _MEAN_GAUGES
        }
        """One store per rolling mean gauge family (its series budget is the store's)."""
        self.latency: WindowStore[LatencyKey] = WindowStore(
            windows, quantiles=DEFAULT_QUANTILES, max_series=max_series, fold=_fold_latency
        )
        budget: dict[str, Any] = {"max_series": max_series, "fold_labels": FOLDED_LABELS}

        def counter(family: Family) -> CounterFamily:
            return CounterFamily(family.name, family.help, family.labels, wall, **budget)

        def histogram(family: Family) -> HistogramFamily:
            return HistogramFamily(family.name, family.help, family.labels, family.buckets, wall, **budget)

        self.traces = counter(cat.TRACES)
        self.trace_errors = counter(cat.TRACE_ERRORS)
        self.duration = histogram(cat.REQUEST_DURATION)
        self.tokens = counter(cat.TOKENS)
        self.cost = counter(cat.COST_USD)
        self.unpriced = counter(cat.UNPRICED_TOKENS)
        self.without_usage = counter(cat.LLM_CALLS_WITHOUT_USAGE)
        self.queries = counter(cat.RETRIEVAL_QUERIES)
        self.unlabelled = counter(cat.RETRIEVAL_UNLABELLED)
        self.hits = counter(cat.RETRIEVAL_HITS)
        self.rr = histogram(cat.RETRIEVAL_RECIPROCAL_RANK)
        self.recall = histogram(cat.RETRIEVAL_RECALL)
        self.precision = histogram(cat.RETRIEVAL_PRECISION)
        self.ndcg = histogram(cat.RETRIEVAL_NDCG)
        self.generation = {name: histogram(family) for name, family in cat.SCORE_HISTOGRAMS.items()}
        self.toxic = counter(cat.TOXIC_ANSWERS)
        self.user_feedback = histogram(cat.USER_FEEDBACK)
        self._user_feedback: dict[tuple[str, str, str], _Stream[MeanKey]] = {}
        self._folded_user_feedback: dict[str, _Stream[MeanKey]] = {}
        self.counters = (
            self.traces, self.trace_errors, self.tokens, self.cost, self.unpriced, self.without_usage,
            self.queries, self.unlabelled, self.hits, self.toxic,
        )
        self.histograms = (
            self.duration, self.rr, self.recall, self.precision, self.ndcg, *self.generation.values(), self.user_feedback,
        )
        registry.register(SeriesCollector(
            [
                self.traces, self.trace_errors, self.duration, self.tokens, self.cost, self.unpriced,
                self.without_usage, self.queries, self.unlabelled, self.hits, self.rr, self.recall,
                self.precision, self.ndcg, *self.generation.values(), self.toxic, self.user_feedback,
            ],
            before=self.flush,
        ))
        info = Gauge(cat.BUILD_INFO.name, cat.BUILD_INFO.help, cat.BUILD_INFO.labels, registry=registry)
        info.labels(DECODER, pipeline(), __version__).set(1)
        registry.register(_WindowCollector(self))
        registry.register(StatsCollector(self._own_stats))

    def series_folded(self) -> dict[str, int]:
        """Per exported metric name: observations that went to its ``other`` series because its
        series budget was full."""
        out = {f"{f.name}_total": f.folded for f in self.counters}
        out.update((f.name, f.folded) for f in self.histograms)
        stores: list[tuple[str, WindowStore[Any]]] = [*self.gauges.items(), (LATENCY_GAUGE, self.latency)]
        for name, store in stores:
            out[name] = store.discards()["folded"]
        return out

    def _own_stats(self) -> Iterable[Metric]:
        limit = self.limit
        folded = cat.LABEL_VALUES_FOLDED.empty()
        for label in sorted({*LIMITED_LABELS, *limit.folded}):
            folded.add_metric([label], limit.folded[label])
        truncated = cat.LABEL_VALUES_TRUNCATED.empty()
        for label in sorted({*LIMITED_LABELS, *limit.truncated}):
            truncated.add_metric([label], limit.truncated[label])
        replaced = cat.LABEL_VALUES_REPLACED.empty()
        for label in sorted({*LIMITED_LABELS, *limit.replaced}):
            replaced.add_metric([label], limit.replaced[label])
        budget = cat.SERIES_FOLDED.empty()
        for metric, n in sorted(self.series_folded().items()):
            budget.add_metric([metric], n)
        series = cat.WINDOW_SERIES.empty()
        dropped = cat.WINDOW_DROPPED.empty()
        for name, stores in (("means", list(self.gauges.values())), ("latency", [self.latency])):
            series.add_metric([name], sum(len(store) for store in stores))
            discards = [store.discards() for store in stores]
            for reason in ("folded", "dropped", "invalid", "late"):
                dropped.add_metric([name, reason], sum(d[reason] for d in discards))
        durations = cat.DURATIONS_INVALID.empty()
        for stage in ("total", *STAGES):
            durations.add_metric([stage], self.invalid_durations.get(stage, 0))
        return [folded, truncated, replaced, budget, series, dropped, durations]

    def observe(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """Count one scored request and buffer its values (see ``flush``)."""
        self._buffer_one(now)
        limit = self.limit
        service = limit("service", record.service or "unknown")
        variant = limit("variant", record.variant or "default")
        trace_id = record.trace_id.hex()
        means = self._pending_means
        latency = self._pending_latency
        sv = self._services.get((service, variant)) or self._service_series(service, variant)
        sv.traces.inc()
        if record.error:
            sv.errors.inc()
        stream: _Stream[Any] = sv.error
        if not stream.values:
            means.append(stream)
        stream.values.append(1.0 if record.error else 0.0)
        total = span_seconds(record.start_ns, record.end_ns, self.max_duration)
        if total is None:
            self._invalid_duration("total")
        else:
            stream = sv.total
            if not stream.values:
                latency.append(stream)
            stream.values.append(total)
            stream.trace_ids.append(trace_id)
        for stage in record.invalid_durations:
            self._invalid_duration(stage)
        for stage, seconds in record.stage_seconds.items():
            stream = sv.stages.get(stage) or self._stage_stream(sv, stage)
            if not stream.values:
                latency.append(stream)
            stream.values.append(seconds)
            stream.trace_ids.append(trace_id)
        self._count_calls(service, scores.calls)
        cost = scores.cost_usd
        if cost is not None:
            if sv.cost is None:
                sv.cost = self._stream(cat.COST_USD_PER_REQUEST.name, sv.service, sv.variant, "", "", folded=sv.folded)
            stream = sv.cost
            if not stream.values:
                means.append(stream)
            stream.values.append(cost)
        if scores.unlabelled:
            sv.unlabelled.inc()
        for score in scores.retrieval:
            self._observe_retrieval(service, variant, score, trace_id)

    def _invalid_duration(self, stage: str) -> None:
        self.invalid_durations[stage] = self.invalid_durations.get(stage, 0) + 1

    def observe_calls(self, service: str, calls: Iterable[PricedCall]) -> None:
        """Count the model calls of a trace that is not a RAG request (``ModelCalls``) in the
        token, cost and unpriced counters only: no request series."""
        self._count_calls(self.limit("service", service or "unknown"), calls)

    def _count_calls(self, service: str, calls: Iterable[PricedCall]) -> None:
        """Tokens by type, cost, unpriced tokens and calls without usage of ``service``."""
        limit = self.limit
        for call in calls:
            model = limit("model", call.model or "unknown")
            ms = self._models.get((service, model)) or self._model_series(service, model)
            if call.price_source == "no_usage":
                ms.counter("without_usage").inc()
                continue
            if call.input_tokens:
                ms.counter("input").inc(call.input_tokens)
            if call.output_tokens:
                ms.counter("output").inc(call.output_tokens)
            if call.usd is None:
                self.unpriced.cell((model,)).inc(call.input_tokens + call.output_tokens)
            else:
                ms.counter("cost").inc(call.usd)

    def _observe_retrieval(self, service: str, variant: str, score: RetrievalScore, trace_id: str) -> None:
        series = self._retrieval.get((service, variant, score.source)) or self._retrieval_series(
            service, variant, score.source
        )
        series.queries.inc()
        stream = series.rr
        if not stream.values:
            self._pending_means.extend(series.streams)
        stream.values.append(score.reciprocal_rank)
        stream.trace_ids.append(trace_id)
        hit_at, recall_at, precision_at, ndcg_at = score.hit, score.recall, score.precision, score.ndcg
        full = bool(recall_at)  # the judge source has no recall or NDCG (SPEC §5)
        for k, hits, hit_values, recall_values, precision_values, ndcg_values in series.per_k:
            hit = hit_at[k]
            hits.inc(hit)
            hit_values.append(hit)
            precision_values.append(precision_at[k])
            if full:
                recall_values.append(recall_at[k])
                ndcg_values.append(ndcg_at[k])

    def observe_judged(
        self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float],
        retrieval: RetrievalScore | None, now: float, toxic: Mapping[str, bool] | None = None,
    ) -> None:
        """Fold one judgement in: generation scores by name (``GENERATION_SCORES``) under
        (``source``, ``judge``), the judge's retrieval score (source ``judge``) if any, and
        ``toxic`` (toxicity category -> whether the answer is toxic in it): one count in
        ``ragmon_toxic_answers_total`` per toxic category, every category's series made at 0."""
        self._buffer_one(now)
        service = self.limit("service", record.service or "unknown")
        variant = self.limit("variant", record.variant or "default")
        trace_id = record.trace_id.hex()
        for name, value in scores.items():
            key = (service, variant, source, judge)
            stream = self._generation[name].get(key) or self._generation_stream(name, key)
            if not stream.values:
                self._pending_means.append(stream)
            stream.values.append(value)
            stream.trace_ids.append(trace_id)
        if retrieval is not None:
            self._observe_retrieval(service, variant, retrieval, trace_id)
        if toxic:
            for cell, is_toxic in zip(self.toxic.cells([(service, variant, c) for c in toxic]), toxic.values()):
                if is_toxic:
                    cell.inc()

    def observe_feedback(
        self, service: str, variant: str, trace_id: str, retrieval: RetrievalScore | None,
        scores: Mapping[str, float], now: float,
    ) -> None:
        """Fold one joined feedback in: its retrieval score (source ``feedback``) and named user
        scores (``ragmon_user_feedback``, ``name`` through the label limiter)."""
        self._buffer_one(now)
        service = self.limit("service", service or "unknown")
        variant = self.limit("variant", variant or "default")
        if retrieval is not None:
            self._observe_retrieval(service, variant, retrieval, trace_id)
        for name, value in scores.items():
            key = (service, variant, self.limit("name", name))
            stream = self._user_feedback.get(key) or self._user_feedback_stream(key)
            if not stream.values:
                self._pending_means.append(stream)
            stream.values.append(value)
            stream.trace_ids.append(trace_id)

    def _user_feedback_stream(self, key: tuple[str, str, str]) -> _Stream[MeanKey]:
        """The stream of one (service, variant, name); past the budget, the folded one of ``name``."""
        service, variant, name = key
        family = self.user_feedback
        if len(self._user_feedback) < self.max_series:
            stream = self._user_feedback[key] = self._stream(USER_FEEDBACK_GAUGE, service, variant, "feedback", name, folded=False)
            stream.histogram = (family, family.series(key))
            return stream
        folded = self._folded_user_feedback.get(name)
        if folded is None:
            folded = self._stream(USER_FEEDBACK_GAUGE, OTHER, OTHER, "feedback", name, folded=True)
            folded.histogram = (family, family.folded_series((OTHER, OTHER, name)))
            self._folded_user_feedback[name] = folded
        return folded

    def _buffer_one(self, now: float) -> None:
        """Make room for one more record observed at ``now``: flush first when the clock left
        the window buckets of the buffered values (folding them later would then misplace
        them) or when ``MAX_BUFFERED`` records wait. Every store has the same windows and
        buckets, so the latency store answers for all."""
        if now != self._now and not self.latency.same_buckets(self._now, now):
            self.flush()
            self._now = now
        self._buffered += 1
        if self._buffered > MAX_BUFFERED:
            self.flush()

    def flush(self) -> None:
        """Fold the buffered values into the rolling windows (at the ``now`` they were observed
        at) and the histograms; empty the buffers."""
        self._buffered = 0
        if not (self._pending_means or self._pending_latency):
            return
        wall = self._wall()
        means, self._pending_means = self._pending_means, []
        latency, self._pending_latency = self._pending_latency, []
        _fold(means, self._now, wall)
        _fold(latency, self._now, wall)

    # -- bound state, made on first use; past ``max_series`` entries, one folded entry ---------

    def _stream(self, gauge: str, service: str, variant: str, source: str, detail: str, *, folded: bool) -> _Stream[MeanKey]:
        return _Stream((gauge, service, variant, source, detail), self.gauges[gauge], folded=folded)

    def _service_series(self, service: str, variant: str) -> _ServiceSeries:
        """The bound state of one (service, variant), made on its first request; past the
        budget, the folded entry."""
        if len(self._services) < self.max_series:
            series = self._services[(service, variant)] = self._new_service_series(service, variant, folded=False)
            return series
        if self._folded_service is None:
            self._folded_service = self._new_service_series(OTHER, OTHER, folded=True)
        return self._folded_service

    def _new_service_series(self, service: str, variant: str, *, folded: bool) -> _ServiceSeries:
        labels = (service, variant)
        traces, errors, unlabelled = (
            family.folded_cell(labels) if folded else family.cell(labels)  # errors, unlabelled exported at 0 until the first
            for family in (self.traces, self.trace_errors, self.unlabelled)
        )
        return _ServiceSeries(
            service, variant, folded, traces, errors, unlabelled,
            self._stream(cat.ERROR_RATIO.name, service, variant, "", "", folded=folded),
            self._latency_stream(service, variant, "total", folded=folded),
        )

    def _model_series(self, service: str, model: str) -> _ModelSeries:
        """The counters of one (service, model), bound on its first call; past the budget, the
        folded entry."""
        folded = len(self._models) >= self.max_series
        if folded:
            if self._folded_model is not None:
                return self._folded_model
            service = model = OTHER
        series = _ModelSeries({
            "input": (self.tokens, (service, model, "input")),
            "output": (self.tokens, (service, model, "output")),
            "cost": (self.cost, (service, model)),
            "without_usage": (self.without_usage, (service, model)),
        }, folded)
        if folded:
            self._folded_model = series
        else:
            self._models[(service, model)] = series
        return series

    def _latency_stream(self, service: str, variant: str, stage: str, *, folded: bool) -> _Stream[LatencyKey]:
        labels = (service, variant, stage)
        series = self.duration.folded_series(labels) if folded else self.duration.series(labels)
        return _Stream(labels, self.latency, (self.duration, series), folded)

    def _stage_stream(self, sv: _ServiceSeries, stage: str) -> _Stream[LatencyKey]:
        stream = sv.stages[stage] = self._latency_stream(sv.service, sv.variant, stage, folded=sv.folded)
        return stream

    def _retrieval_series(self, service: str, variant: str, source: str) -> _RetrievalSeries:
        """The bound state of one (service, variant, source), made on its first retrieval;
        past the budget, the folded entry of ``source``."""
        if len(self._retrieval) < self.max_series:
            series = self._retrieval[(service, variant, source)] = self._new_retrieval_series(
                service, variant, source, folded=False
            )
            return series
        folded = self._folded_retrieval.get(source)
        if folded is None:
            folded = self._folded_retrieval[source] = self._new_retrieval_series(OTHER, OTHER, source, folded=True)
        return folded

    def _new_retrieval_series(self, service: str, variant: str, source: str, *, folded: bool) -> _RetrievalSeries:
        labels = (service, variant, source)
        per_k_labels = [(*labels, str(k)) for k in self.ks]

        def histograms(family: HistogramFamily, group: Sequence[tuple[str, ...]]) -> list[HistogramSeries | FoldedSeries]:
            if folded:
                return [family.folded_series(one) for one in group]
            return family.series_group(group)

        rr = self._stream(cat.RETRIEVAL_MRR.name, service, variant, source, "", folded=folded)
        rr.histogram = (self.rr, histograms(self.rr, [labels])[0])
        hit_cells = [self.hits.folded_cell(one) for one in per_k_labels] if folded else self.hits.cells(per_k_labels)
        per_family = {
            family: histograms(family, per_k_labels)
            for family in (self.recall, self.precision, self.ndcg)
            if source != "judge" or family is self.precision  # no recall or NDCG from the judge
        }
        streams: list[_Stream[MeanKey]] = [rr]
        per_k: list[_PerK] = []
        for i, k in enumerate(self.ks):
            ks = str(k)
            hit, recall, precision, ndcg = (
                self._stream(gauge, service, variant, source, ks, folded=folded) for gauge in _PER_K_GAUGES
            )
            for stream, family in ((recall, self.recall), (precision, self.precision), (ndcg, self.ndcg)):
                if family in per_family:
                    stream.histogram = (family, per_family[family][i])
            streams.extend((hit, recall, precision, ndcg))
            per_k.append((k, hit_cells[i], hit.values, recall.values, precision.values, ndcg.values))
        queries = self.queries.folded_cell(labels) if folded else self.queries.cell(labels)
        return _RetrievalSeries(queries, rr, tuple(streams), tuple(per_k))

    def _generation_stream(self, name: str, key: tuple[str, str, str, str]) -> _Stream[MeanKey]:
        """The stream of generation score ``name`` for (service, variant, source, judge), made on
        its first value; past the budget, the folded stream of (source, judge)."""
        streams = self._generation[name]
        family = self.generation[name]
        service, variant, source, judge = key
        if len(streams) < self.max_series:
            stream = streams[key] = self._stream(cat.SCORE_MEANS[name].name, service, variant, source, judge, folded=False)
            stream.histogram = (family, family.series(key))
            return stream
        folded_key = (name, source, judge)
        folded = self._folded_generation.get(folded_key)
        if folded is None:
            folded = self._folded_generation[folded_key] = self._stream(cat.SCORE_MEANS[name].name, OTHER, OTHER, source, judge, folded=True)
            folded.histogram = (family, family.folded_series((OTHER, OTHER, source, judge)))
        return folded
