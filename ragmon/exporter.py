"""Scores to Prometheus: aggregatable counters and histograms, and rolling-window gauges.

A traces-to-metrics connector: fold into state, build on a tick. ``RagMetrics.observe`` counts
one scored request and buffers its values; ``RagMetrics.flush`` folds the buffers into the
histograms (``ragmon.series``) and rolling windows in bulk, when the clock leaves the window
buckets the values belong to, every ``MAX_BUFFERED`` records, and before a scrape. Every family is built at scrape time
by custom collectors in ragmon's own registry (never the global one), which flush first. Label
values pass through a ``LabelLimiter`` so cardinality stays capped.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragmon import __version__
from ragmon.assembly import AssemblyStats
from ragmon.labels import OTHER, LabelLimiter
from ragmon.metrics.windows import DEFAULT_QUANTILES, WindowStore
from ragmon.model import RagRecord
from ragmon.receivers.ingest import REQUEST_REJECT_REASONS, SPAN_REJECT_REASONS, IngestStats
from ragmon.series import (
    CounterCell,
    CounterFamily,
    HistogramFamily,
    HistogramSeries,
    SeriesCollector,
)

if TYPE_CHECKING:
    from ragmon.pipeline import PipelineStats
from ragmon.scoring import RecordScores, RetrievalScore

__all__ = ["GENERATION_SCORES", "LATENCY_BUCKETS", "SCORE_BUCKETS", "RagMetrics", "StatsCollector", "self_metrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
FOLDED_LABELS = frozenset({"service", "variant", "model"})
"""Labels whose values pass through the ``LabelLimiter`` (``ragmon_label_values_folded_total``)."""
MAX_BUFFERED = 512
"""Records (and judgements) buffered before ``observe`` flushes by itself: bounds the buffers
while the clock stays in the same window buckets."""

MeanKey = tuple[str, str, str, str, str]
"""(gauge, service, variant, source, detail) of a mean series: ``detail`` is ``k`` for retrieval
gauges and ``judge`` for generation gauges; "" where a label does not apply."""
LatencyKey = tuple[str, str, str]
"""(service, variant, stage)."""
K = TypeVar("K", bound=Hashable)

_MEAN_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ragmon_retrieval_hit_rate": ("Share of queries with a relevant document in the top k, over the window.", ("source", "k")),
    "ragmon_retrieval_mrr": ("Mean reciprocal rank over the window.", ("source",)),
    "ragmon_retrieval_recall_mean": ("Mean recall@k over the window.", ("source", "k")),
    "ragmon_retrieval_precision_mean": ("Mean precision@k over the window.", ("source", "k")),
    "ragmon_retrieval_ndcg_mean": ("Mean NDCG@k over the window.", ("source", "k")),
    "ragmon_cost_usd_per_request": ("Mean cost of a request in USD over the window (requests whose every model call was priced).", ()),
    "ragmon_error_ratio": ("Share of requests whose trace had an error over the window.", ()),
    "ragmon_faithfulness_mean": ("Mean faithfulness (supported claims / claims) over the window.", ("source", "judge")),
    "ragmon_answer_relevance_mean": ("Mean answer relevance over the window.", ("source", "judge")),
    "ragmon_context_relevance_mean": ("Mean context relevance (relevant documents / documents) over the window.", ("source", "judge")),
    "ragmon_answer_correctness_mean": ("Mean answer correctness (covered reference claims / claims) over the window.", ("source", "judge")),
}
GENERATION_SCORES: dict[str, str] = {
    "faithfulness": "Faithfulness per judged answer: supported claims / claims.",
    "answer_relevance": "Answer relevance per judged answer: 1 yes, 0.5 partial, 0 no.",
    "context_relevance": "Context relevance per judged retrieval: relevant documents / documents.",
    "answer_correctness": "Answer correctness per judged answer: covered reference claims / claims.",
}
"""Generation-quality scores (histogram ``ragmon_<name>``, gauge ``ragmon_<name>_mean``)."""


def _window_label(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class _WindowCollector(Collector):
    """Builds the rolling gauges from the window stores at scrape time."""

    def __init__(self, metrics: RagMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        m.flush()
        now = m.clock()
        families = {
            name: GaugeMetricFamily(name, doc, labels=["service", "variant", *extra, "window"])
            for name, (doc, extra) in _MEAN_GAUGES.items()
        }
        samples = GaugeMetricFamily(
            "ragmon_window_samples", "Observations behind each rolling gauge (for alert guards).",
            labels=["service", "variant", "source", "metric", "window"],
        )
        counted: set[tuple[str, ...]] = set()
        for reading in m.means.read(now):
            if reading.mean is None:
                continue
            gauge, service, variant, source, k = reading.key
            window = _window_label(reading.window)
            extra = _MEAN_GAUGES[gauge][1]
            values = {"source": source, "k": k, "judge": k}
            families[gauge].add_metric([service, variant, *(values[e] for e in extra), window], reading.mean)
            sample_key = (service, variant, source, gauge, window)
            if sample_key not in counted:
                counted.add(sample_key)
                samples.add_metric([service, variant, source, gauge.removeprefix("ragmon_"), window], reading.samples)
        latency = GaugeMetricFamily(
            "ragmon_latency_seconds", "Latency quantiles per stage over the window.",
            labels=["service", "variant", "stage", "quantile", "window"], unit="",
        )
        for quantiles in m.latency.read(now):
            if not quantiles.samples:
                continue
            service, variant, stage = quantiles.key
            window = _window_label(quantiles.window)
            for q, value in quantiles.quantiles.items():
                if value is not None:
                    latency.add_metric([service, variant, stage, f"{q:g}", window], value)
            samples.add_metric([service, variant, "", f"latency_{stage}", window], quantiles.samples)
        yield from families.values()
        yield latency
        yield samples


class StatsCollector(Collector):
    """Exports counters kept elsewhere (receivers, assembly) through a callback at scrape time."""

    def __init__(self, build: Callable[[], Iterable[Metric]]) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        return self._build()


_PER_K_GAUGES = (
    "ragmon_retrieval_hit_rate",
    "ragmon_retrieval_recall_mean",
    "ragmon_retrieval_precision_mean",
    "ragmon_retrieval_ndcg_mean",
)


@dataclass(slots=True)
class _Stream(Generic[K]):
    """Values of one window series (and of its histogram series) awaiting ``flush``.

    ``trace_ids`` holds one id per value for a histogram with exemplars, else stays empty.
    """

    key: K
    histogram: tuple[HistogramFamily, HistogramSeries] | None = None
    values: list[float] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _ServiceSeries:
    """State of one (service, variant) bound once: no label lookups per request."""

    traces: CounterCell
    error: _Stream[MeanKey]
    total: _Stream[LatencyKey]
    stages: dict[str, _Stream[LatencyKey]] = field(default_factory=dict)
    cost: _Stream[MeanKey] | None = None
    """Made on the first request with a cost (as its window series was)."""


class _ModelSeries:
    """Counters of one (service, model), each made on its first use (as its series was)."""

    __slots__ = ("_cells", "_labels")

    def __init__(self, labels: dict[str, tuple[CounterFamily, tuple[str, ...]]]) -> None:
        self._labels = labels
        self._cells: dict[str, CounterCell] = {}

    def counter(self, name: str) -> CounterCell:
        """The cell of counter ``name`` ("input", "output", "cost", "unpriced", "without_usage")."""
        cell = self._cells.get(name)
        if cell is None:
            family, labels = self._labels[name]
            cell = self._cells[name] = family.cell(labels)
        return cell


_PerK: TypeAlias = tuple[int, CounterCell, list[float], list[float], list[float], list[float]]
"""(k, hits counter, and the pending hit, recall, precision, NDCG values)."""


@dataclass(frozen=True, slots=True)
class _RetrievalSeries:
    """State of one (service, variant, source) bound once: no label lookups per request."""

    queries: CounterCell
    rr: _Stream[MeanKey]
    streams: tuple[_Stream[MeanKey], ...]
    """rr, then per k hit, recall, precision, NDCG: always fed together, pending together."""
    per_k: tuple[_PerK, ...]


def _fold(store: WindowStore[K], streams: list[_Stream[K]], now: float, wall: float) -> None:
    """Add each stream's values to its window series and histogram series, then empty it."""
    for stream in streams:
        values = stream.values
        try:
            if values:
                store.observe_many(stream.key, values, now)
                if stream.histogram is not None:
                    family, series = stream.histogram
                    family.add(series, values, stream.trace_ids or None, wall)
        finally:
            values.clear()
            stream.trace_ids.clear()


class RagMetrics:
    """The sidecar's metric state for one registry.

    ``observe`` updates the counters and buffers the values of histograms and rolling windows;
    ``flush`` folds the buffers in (the scrape-time collectors flush first). Not thread-safe:
    observe, flush and scrapes run on one thread (the event loop).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        ks: Sequence[int],
        windows: Sequence[float],
        max_label_values: int,
        clock: Callable[[], float],
        max_series: int = 10_000,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ks = tuple(ks)
        self.clock = clock
        self.limit = LabelLimiter(max_label_values)
        self._wall = wall
        self._services: dict[tuple[str, str], _ServiceSeries] = {}
        self._retrieval: dict[tuple[str, str, str], _RetrievalSeries] = {}
        self._models: dict[tuple[str, str], _ModelSeries] = {}
        self._now = -math.inf
        """``now`` of the buffered observations (``observe`` flushes when a new ``now`` falls in other window buckets)."""
        self._buffered = 0
        """Records and judgements buffered since the last flush (at most ``MAX_BUFFERED``)."""
        self._pending_means: list[_Stream[MeanKey]] = []
        self._pending_latency: list[_Stream[LatencyKey]] = []
        fold_mean: Callable[[MeanKey], MeanKey] = lambda key: (key[0], OTHER, OTHER, key[3], key[4])  # noqa: E731
        fold_latency: Callable[[LatencyKey], LatencyKey] = lambda key: (OTHER, OTHER, key[2])  # noqa: E731
        self.means: WindowStore[MeanKey] = WindowStore(windows, max_series=max_series, fold=fold_mean)
        self.latency: WindowStore[LatencyKey] = WindowStore(
            windows, quantiles=DEFAULT_QUANTILES, max_series=max_series, fold=fold_latency
        )
        sv = ["service", "variant"]
        src = [*sv, "source"]
        self.traces = CounterFamily("ragmon_traces", "Finished requests (RAG traces) scored.", sv, wall)
        self.trace_errors = CounterFamily("ragmon_trace_errors", "Finished requests whose trace had an error.", sv, wall)
        self.duration = HistogramFamily(
            "ragmon_request_duration_seconds", "Request latency per stage (total: the local root span).",
            [*sv, "stage"], LATENCY_BUCKETS, wall,
        )
        self.tokens = CounterFamily("ragmon_tokens", "Model tokens.", ["service", "model", "token_type"], wall)
        self.cost = CounterFamily("ragmon_cost_usd", "Priced model cost in USD.", ["service", "model"], wall)
        self.unpriced = CounterFamily("ragmon_unpriced_tokens", "Tokens of models with no known price.", ["model"], wall)
        self.without_usage = CounterFamily(
            "ragmon_llm_calls_without_usage", "Model calls whose span reported no tokens and no cost (not priced).",
            ["service", "model"], wall,
        )
        self.queries = CounterFamily("ragmon_retrieval_queries", "Retrievals scored against relevance.", src, wall)
        self.unlabelled = CounterFamily("ragmon_retrieval_unlabelled", "Retrievals with no relevance information (not scored).", sv, wall)
        self.hits = CounterFamily("ragmon_retrieval_hits", "Retrievals with a relevant document in the top k.", [*src, "k"], wall)
        self.rr = HistogramFamily("ragmon_retrieval_reciprocal_rank", "Reciprocal rank per retrieval.", src, SCORE_BUCKETS, wall)
        self.recall = HistogramFamily("ragmon_retrieval_recall", "Recall@k per retrieval.", [*src, "k"], SCORE_BUCKETS, wall)
        self.precision = HistogramFamily("ragmon_retrieval_precision", "Precision@k per retrieval.", [*src, "k"], SCORE_BUCKETS, wall)
        self.ndcg = HistogramFamily("ragmon_retrieval_ndcg", "NDCG@k per retrieval.", [*src, "k"], SCORE_BUCKETS, wall)
        gen = [*src, "judge"]
        self.generation = {
            name: HistogramFamily(f"ragmon_{name}", doc, gen, SCORE_BUCKETS, wall)
            for name, doc in GENERATION_SCORES.items()
        }
        self._generation: dict[tuple[str, str, str, str, str], _Stream[MeanKey]] = {}
        registry.register(SeriesCollector(
            [
                self.traces, self.trace_errors, self.duration, self.tokens, self.cost, self.unpriced,
                self.without_usage, self.queries, self.unlabelled, self.hits, self.rr, self.recall,
                self.precision, self.ndcg, *self.generation.values(),
            ],
            before=self.flush,
        ))
        info = Gauge("ragmon_build_info", "ragmon's version.", ["version"], registry=registry)
        info.labels(__version__).set(1)
        registry.register(_WindowCollector(self))
        registry.register(StatsCollector(self._own_stats))

    def _own_stats(self) -> Iterable[Metric]:
        folded = CounterMetricFamily("ragmon_label_values_folded", "Observations whose label value was folded into 'other'.", labels=["label"])
        for label in sorted(FOLDED_LABELS | self.limit.folded.keys()):
            folded.add_metric([label], self.limit.folded[label])
        series = GaugeMetricFamily("ragmon_window_series", "Series held by the rolling windows.", labels=["store"])
        dropped = CounterMetricFamily("ragmon_window_dropped", "Observations the rolling windows discarded.", labels=["store", "reason"])
        for name, store in (("means", self.means), ("latency", self.latency)):
            stats = store.stats()
            series.add_metric([name], stats.series)
            for reason in ("folded", "dropped", "invalid", "late"):
                dropped.add_metric([name, reason], getattr(stats, reason))
        return [folded, series, dropped]

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
            self.trace_errors.cell((service, variant)).inc()
        stream: _Stream[Any] = sv.error
        if not stream.values:
            means.append(stream)
        stream.values.append(1.0 if record.error else 0.0)
        stream = sv.total
        if not stream.values:
            latency.append(stream)
        stream.values.append(record.duration_seconds)
        stream.trace_ids.append(trace_id)
        for stage, seconds in record.stage_seconds.items():
            stream = sv.stages.get(stage) or self._stage_stream(sv, service, variant, stage)
            if not stream.values:
                latency.append(stream)
            stream.values.append(seconds)
            stream.trace_ids.append(trace_id)
        for call in scores.calls:
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
                ms.counter("unpriced").inc(call.input_tokens + call.output_tokens)
            else:
                ms.counter("cost").inc(call.usd)
        cost = scores.cost_usd
        if cost is not None:
            if sv.cost is None:
                sv.cost = _Stream(("ragmon_cost_usd_per_request", service, variant, "", ""))
            stream = sv.cost
            if not stream.values:
                means.append(stream)
            stream.values.append(cost)
        if scores.unlabelled:
            self.unlabelled.cell((service, variant)).inc()
        for score in scores.retrieval:
            self._observe_retrieval(service, variant, score, trace_id)

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
        retrieval: RetrievalScore | None, now: float,
    ) -> None:
        """Fold one judgement in: generation scores by name (``GENERATION_SCORES``) under
        (``source``, ``judge``), and the judge's retrieval score (source ``judge``) if any."""
        self._buffer_one(now)
        service = self.limit("service", record.service or "unknown")
        variant = self.limit("variant", record.variant or "default")
        trace_id = record.trace_id.hex()
        for name, value in scores.items():
            key = (name, service, variant, source, judge)
            stream = self._generation.get(key)
            if stream is None:
                family = self.generation[name]
                stream = self._generation[key] = _Stream(
                    (f"ragmon_{name}_mean", service, variant, source, judge),
                    (family, family.series((service, variant, source, judge))),
                )
            if not stream.values:
                self._pending_means.append(stream)
            stream.values.append(value)
            stream.trace_ids.append(trace_id)
        if retrieval is not None:
            self._observe_retrieval(service, variant, retrieval, trace_id)

    def _buffer_one(self, now: float) -> None:
        """Make room for one more record observed at ``now``: flush first when the clock left
        the window buckets of the buffered values (folding them later would then misplace
        them) or when ``MAX_BUFFERED`` records wait."""
        if now != self._now and not (
            self.means.same_buckets(self._now, now) and self.latency.same_buckets(self._now, now)
        ):
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
        _fold(self.means, means, self._now, wall)
        _fold(self.latency, latency, self._now, wall)

    def _service_series(self, service: str, variant: str) -> _ServiceSeries:
        """The bound state of one (service, variant), made on its first request."""
        self.trace_errors.cell((service, variant))  # exported at 0 until the first
        self.unlabelled.cell((service, variant))
        series = self._services[(service, variant)] = _ServiceSeries(
            self.traces.cell((service, variant)),
            _Stream(("ragmon_error_ratio", service, variant, "", "")),
            self._latency_stream(service, variant, "total"),
        )
        return series

    def _model_series(self, service: str, model: str) -> _ModelSeries:
        """The counters of one (service, model), bound on its first call."""
        series = self._models[(service, model)] = _ModelSeries({
            "input": (self.tokens, (service, model, "input")),
            "output": (self.tokens, (service, model, "output")),
            "cost": (self.cost, (service, model)),
            "unpriced": (self.unpriced, (model,)),
            "without_usage": (self.without_usage, (service, model)),
        })
        return series

    def _latency_stream(self, service: str, variant: str, stage: str) -> _Stream[LatencyKey]:
        labels = (service, variant, stage)
        return _Stream(labels, (self.duration, self.duration.series(labels)))

    def _stage_stream(self, sv: _ServiceSeries, service: str, variant: str, stage: str) -> _Stream[LatencyKey]:
        stream = sv.stages[stage] = self._latency_stream(service, variant, stage)
        return stream

    def _retrieval_series(self, service: str, variant: str, source: str) -> _RetrievalSeries:
        """The bound state of one (service, variant, source), made on its first retrieval."""
        labels = (service, variant, source)
        rr = _Stream(("ragmon_retrieval_mrr", service, variant, source, ""), (self.rr, self.rr.series(labels)))
        streams: list[_Stream[MeanKey]] = [rr]
        per_k: list[_PerK] = []
        for k in self.ks:
            ks = str(k)
            hit, recall, precision, ndcg = (
                _Stream((gauge, service, variant, source, ks)) for gauge in _PER_K_GAUGES
            )
            for stream, family in ((recall, self.recall), (precision, self.precision), (ndcg, self.ndcg)):
                if source != "judge" or family is self.precision:  # no recall or NDCG from the judge
                    stream.histogram = (family, family.series((*labels, ks)))
            streams.extend((hit, recall, precision, ndcg))
            per_k.append((k, self.hits.cell((*labels, ks)), hit.values, recall.values, precision.values, ndcg.values))
        series = self._retrieval[labels] = _RetrievalSeries(
            self.queries.cell(labels), rr, tuple(streams), tuple(per_k)
        )
        return series


def self_metrics(ingest: IngestStats, assembly: AssemblyStats, stats: PipelineStats) -> Iterable[Metric]:
    """ragmon's own health: receivers, assembly, queue, ignored and dropped traces."""
    received = CounterMetricFamily("ragmon_spans_received", "Spans received, by protocol.", labels=["protocol"])
    rejected = CounterMetricFamily("ragmon_spans_rejected", "Spans rejected: partial success (bad ids) or refused with 503 (retried by the exporter), by reason.", labels=["protocol", "reason"])
    requests = CounterMetricFamily("ragmon_requests_rejected", "Export requests rejected whole, by reason.", labels=["protocol", "reason"])
    for protocol in ("http", "grpc"):
        received.add_metric([protocol], ingest.spans_received[protocol])
    known_spans = {(protocol, reason) for protocol in REQUEST_REJECT_REASONS for reason in SPAN_REJECT_REASONS}
    for protocol, reason in sorted(known_spans | ingest.spans_rejected.keys()):
        rejected.add_metric([protocol, reason], ingest.spans_rejected[(protocol, reason)])
    known_requests = {(protocol, reason) for protocol, reasons in REQUEST_REJECT_REASONS.items() for reason in reasons}
    for protocol, reason in sorted(known_requests | ingest.requests_rejected.keys()):
        requests.add_metric([protocol, reason], ingest.requests_rejected[(protocol, reason)])
    truncated = CounterMetricFamily("ragmon_attributes_truncated", "String attribute values cut to receiver.max_attribute_chars.", labels=["protocol"])
    for protocol in ("http", "grpc"):
        truncated.add_metric([protocol], ingest.attributes_truncated[protocol])
    yield from (received, rejected, requests, truncated)
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    label_names: dict[str, list[str]] = defaultdict(list)
    samples = assembly.samples()
    for s in samples:
        label_names[s.name] = [k for k, _ in s.labels]
    for s in samples:
        if s.name not in families:
            base = s.name.removesuffix("_total")
            families[s.name] = (
                CounterMetricFamily(base, f"Trace assembly: {base}.", labels=label_names[s.name])
                if s.kind == "counter"
                else GaugeMetricFamily(s.name, f"Trace assembly: {s.name}.", labels=label_names[s.name])
            )
        families[s.name].add_metric([v for _, v in s.labels], s.value)
    yield from families.values()
    queue = GaugeMetricFamily("ragmon_queue_spans", "Spans waiting in the ingest queue.")
    queue.add_metric([], stats.queued_spans)
    queue_bytes = GaugeMetricFamily("ragmon_queue_bytes", "Approximate bytes of span data waiting in the ingest queue.")
    queue_bytes.add_metric([], stats.queued_bytes)
    capacity = GaugeMetricFamily("ragmon_queue_capacity_spans", "Capacity of the ingest queue, in spans.")
    capacity.add_metric([], stats.max_queued_spans)
    ignored = CounterMetricFamily("ragmon_traces_ignored", "Finished traces with no retrieval or LLM span (not RAG requests).")
    ignored.add_metric([], stats.ignored)
    dropped = CounterMetricFamily("ragmon_dropped", "Finished traces that could not be scored, by reason.", labels=["reason"])
    dropped.add_metric(["trace_error"], stats.dropped.get("trace_error", 0))
    no_content = CounterMetricFamily("ragmon_traces_without_content", "Scored traces whose spans recorded no query or answer text.")
    no_content.add_metric([], stats.without_content)
    yield from (queue, queue_bytes, capacity, ignored, dropped, no_content)
