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
``ragmon_series_folded_total{metric}``. The state the recorders bind (one entry per
(service, variant), (service, variant, source), (service, model), generation series) has the
same budget, past which new keys share one folded entry per kept-label combination. Folded
observations count in full in the ``other`` series: totals across series stay exact.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragmon import __version__
from ragmon import catalogue as cat
from ragmon.catalogue import LATENCY_BUCKETS, SCORE_BUCKETS
from ragmon.compiled import pipeline
from ragmon.config import MetricsConfig, TracesConfig
from ragmon.export.calls import CallRecorder
from ragmon.export.feedback import FeedbackRecorder
from ragmon.export.judgements import GENERATION_SCORES, JudgementRecorder
from ragmon.export.labels import DEFAULT_MAX_CHARS, LabelLimiter
from ragmon.export.recording import FOLDED_LABELS, MAX_BUFFERED, MEAN_GAUGES, Recording
from ragmon.export.requests import RequestRecorder
from ragmon.export.retrieval import RetrievalRecorder
from ragmon.export.series import DeferredFamily, SeriesCollector
from ragmon.export.windows import WindowReading, WindowSnapshot, WindowStore, window_label
from ragmon.model import STAGES, RagRecord
from ragmon.otlp.decode import DECODER
from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

__all__ = [
    "FOLDED_LABELS",
    "GENERATION_SCORES",
    "LATENCY_BUCKETS",
    "MAX_BUFFERED",
    "SCORE_BUCKETS",
    "RagMetrics",
    "StatsCollector",
]

LIMITED_LABELS = FOLDED_LABELS | {"name"}
"""Every label the ``LabelLimiter`` caps: the folded ones and a user score's ``name`` (already
capped in number, it is kept in a fold series)."""
LATENCY_GAUGE = cat.LATENCY.name
USER_FEEDBACK_GAUGE = cat.USER_FEEDBACK_MEAN.name


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
            family = MEAN_GAUGES[gauge]
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
            family.add_metric([service, variant, *(values[e] for e in extra), window_label(reading.window)], reading.mean)


def _fill_latency(readings: _Readings, family: GaugeMetricFamily) -> None:
    """One sample per latency series, quantile and window with observations."""
    for reading in readings():
        if reading.samples:
            service, variant, stage = reading.key
            window = window_label(reading.window)
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
                    family.add_metric([service, variant, "", f"latency_{stage}", window_label(reading.window)], reading.samples)
            continue
        metric = gauge.removeprefix("ragmon_")
        counted: set[tuple[str, ...]] = set()
        for reading in readings():
            if reading.mean is not None:
                _, service, variant, source, detail = reading.key
                if gauge == USER_FEEDBACK_GAUGE:  # one sample count per name
                    source, metric = "feedback", f"user_feedback_mean:{detail}"
                window = window_label(reading.window)
                if (service, variant, source, window) not in counted:
                    counted.add((service, variant, source, window))
                    family.add_metric([service, variant, source, metric, window], reading.samples)


class StatsCollector(Collector):
    """Exports counters kept elsewhere (receivers, assembly) through a callback at scrape time."""

    def __init__(self, build: Callable[[], Iterable[Metric]]) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        return self._build()


@mypyc_attr(allow_interpreted_subclasses=True)
class RagMetrics:
    """The sidecar's metric state for one registry: a recorder per thing recorded.

    ``requests`` (counts, errors, latency, cost per request), ``calls`` (tokens and cost per
    model), ``retrieval`` (every source's retrieval quality), ``judgements`` (generation scores,
    toxicity) and ``feedback`` (user scores) share one ``Recording``: the label limiter, the
    series budget, the rolling stores and the buffer ``flush`` folds in (the scrape-time
    collectors flush first). Not thread-safe: observe, flush and scrapes run on one thread
    (the event loop). ``max_series`` is the series budget of every family and of each map of
    bound state (module docstring).
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
        self.recording = rec = Recording(windows=windows, max_series=max_series, limit=self.limit, wall=wall)
        self.gauges = rec.gauges
        """One store per rolling mean gauge family (its series budget is the store's)."""
        self.latency = rec.latency
        self.requests = RequestRecorder(rec, max_duration)
        self.calls = CallRecorder(rec)
        self.retrieval = RetrievalRecorder(rec, self.ks)
        self.judgements = JudgementRecorder(rec)
        self.feedback = FeedbackRecorder(rec)
        r, c, q, j = self.requests, self.calls, self.retrieval, self.judgements
        self.counters = (
            r.traces, r.trace_errors, c.tokens, c.cost, c.unpriced, c.without_usage,
            q.queries, r.unlabelled, q.hits, j.toxic,
        )
        self.histograms = (r.duration, q.rr, q.recall, q.precision, q.ndcg, *j.generation.values(), self.feedback.user_feedback)
        registry.register(SeriesCollector(
            [
                r.traces, r.trace_errors, r.duration, c.tokens, c.cost, c.unpriced, c.without_usage,
                q.queries, r.unlabelled, q.hits, q.rr, q.recall, q.precision, q.ndcg,
                *j.generation.values(), j.toxic, self.feedback.user_feedback,
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
        invalid = self.requests.invalid_durations
        for stage in ("total", *STAGES):
            durations.add_metric([stage], invalid.get(stage, 0))
        return [folded, truncated, replaced, budget, series, dropped, durations]

    def observe(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """Count one scored request and buffer its values (see ``flush``)."""
        self.recording.make_room(now)
        limit = self.limit
        service = limit("service", record.service or "unknown")
        variant = limit("variant", record.variant or "default")
        trace_id = record.trace_id.hex()
        self.requests.observe(record, scores, service, variant, trace_id)
        self.calls.count(service, scores.calls)
        retrieval = self.retrieval
        for score in scores.retrieval:
            retrieval.observe(service, variant, score, trace_id)

    def observe_calls(self, service: str, calls: Iterable[PricedCall]) -> None:
        """Count the model calls of a trace that is not a RAG request (``ModelCalls``) in the
        token, cost and unpriced counters only: no request series."""
        self.calls.count(self.limit("service", service or "unknown"), calls)

    def observe_judged(
        self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float],
        retrieval: RetrievalScore | None, now: float, toxic: Mapping[str, bool] | None = None,
    ) -> None:
        """Fold one judgement in: generation scores by name (``GENERATION_SCORES``) under
        (``source``, ``judge``), the judge's retrieval score (source ``judge``) if any, and
        ``toxic`` (toxicity category -> whether the answer is toxic in it): one count in
        ``ragmon_toxic_answers_total`` per toxic category, every category's series made at 0."""
        self.recording.make_room(now)
        service = self.limit("service", record.service or "unknown")
        variant = self.limit("variant", record.variant or "default")
        trace_id = record.trace_id.hex()
        self.judgements.observe(service, variant, trace_id, source, judge, scores, toxic)
        if retrieval is not None:
            self.retrieval.observe(service, variant, retrieval, trace_id)

    def observe_feedback(
        self, service: str, variant: str, trace_id: str, retrieval: RetrievalScore | None,
        scores: Mapping[str, float], now: float,
    ) -> None:
        """Fold one joined feedback in: its retrieval score (source ``feedback``) and named user
        scores (``ragmon_user_feedback``, ``name`` through the label limiter)."""
        self.recording.make_room(now)
        service = self.limit("service", service or "unknown")
        variant = self.limit("variant", variant or "default")
        if retrieval is not None:
            self.retrieval.observe(service, variant, retrieval, trace_id)
        self.feedback.observe(service, variant, trace_id, scores)

    def flush(self) -> None:
        """Fold the buffered values into the rolling windows (at the ``now`` they were observed
        at) and the histograms; empty the buffers."""
        self.recording.flush()
