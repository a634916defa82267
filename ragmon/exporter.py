"""Scores to Prometheus: aggregatable counters and histograms, and rolling-window gauges.

``RagMetrics.observe`` folds one scored request into the state; the rolling gauges are built
at scrape time by a custom collector in ragmon's own registry (never the global one). Label
values pass through a ``LabelLimiter`` so cardinality stays capped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collections import defaultdict

from ragmon import __version__
from ragmon.assembly import AssemblyStats
from ragmon.labels import OTHER, LabelLimiter
from ragmon.metrics.windows import DEFAULT_QUANTILES, WindowStore
from ragmon.model import RagRecord
from ragmon.receivers.ingest import IngestStats

if TYPE_CHECKING:
    from ragmon.pipeline import PipelineStats
from ragmon.scoring import RecordScores

__all__ = ["LATENCY_BUCKETS", "SCORE_BUCKETS", "RagMetrics", "StatsCollector", "self_metrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

MeanKey = tuple[str, str, str, str, str]
"""(gauge, service, variant, source, k) of a mean series; "" where a label does not apply."""
LatencyKey = tuple[str, str, str]
"""(service, variant, stage)."""

_MEAN_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ragmon_retrieval_hit_rate": ("Share of queries with a relevant document in the top k, over the window.", ("source", "k")),
    "ragmon_retrieval_mrr": ("Mean reciprocal rank over the window.", ("source",)),
    "ragmon_retrieval_recall_mean": ("Mean recall@k over the window.", ("source", "k")),
    "ragmon_retrieval_precision_mean": ("Mean precision@k over the window.", ("source", "k")),
    "ragmon_retrieval_ndcg_mean": ("Mean NDCG@k over the window.", ("source", "k")),
    "ragmon_cost_usd_per_request": ("Mean cost of a request in USD over the window (requests whose every model call was priced).", ()),
    "ragmon_error_ratio": ("Share of requests whose trace had an error over the window.", ()),
}


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
            values = {"source": source, "k": k}
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


@dataclass(frozen=True, slots=True)
class _RetrievalSeries:
    """Bound metric children of one (service, variant, source): no label lookups per request."""

    queries: Any
    rr: Any
    mrr_key: MeanKey
    per_k: tuple[tuple[int, Any, Any, Any, Any, tuple[MeanKey, ...]], ...]


class RagMetrics:
    """The sidecar's metric state for one registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        ks: Sequence[int],
        windows: Sequence[float],
        max_label_values: int,
        clock: Callable[[], float],
        max_series: int = 10_000,
    ) -> None:
        self.ks = tuple(ks)
        self.clock = clock
        self.limit = LabelLimiter(max_label_values)
        self._retrieval: dict[tuple[str, str, str], _RetrievalSeries] = {}
        fold_mean: Callable[[MeanKey], MeanKey] = lambda key: (key[0], OTHER, OTHER, key[3], key[4])  # noqa: E731
        fold_latency: Callable[[LatencyKey], LatencyKey] = lambda key: (OTHER, OTHER, key[2])  # noqa: E731
        self.means: WindowStore[MeanKey] = WindowStore(windows, max_series=max_series, fold=fold_mean)
        self.latency: WindowStore[LatencyKey] = WindowStore(
            windows, quantiles=DEFAULT_QUANTILES, max_series=max_series, fold=fold_latency
        )
        sv = ["service", "variant"]
        r = registry
        self.traces = Counter("ragmon_traces", "Finished requests (RAG traces) scored.", sv, registry=r)
        self.trace_errors = Counter("ragmon_trace_errors", "Finished requests whose trace had an error.", sv, registry=r)
        self.duration = Histogram(
            "ragmon_request_duration_seconds", "Request latency per stage (total: the local root span).",
            [*sv, "stage"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.tokens = Counter("ragmon_tokens", "Model tokens.", ["service", "model", "token_type"], registry=r)
        self.cost = Counter("ragmon_cost_usd", "Priced model cost in USD.", ["service", "model"], registry=r)
        self.unpriced = Counter("ragmon_unpriced_tokens", "Tokens of models with no known price.", ["model"], registry=r)
        self.without_usage = Counter(
            "ragmon_llm_calls_without_usage", "Model calls whose span reported no tokens and no cost (not priced).",
            ["service", "model"], registry=r,
        )
        src = [*sv, "source"]
        self.queries = Counter("ragmon_retrieval_queries", "Retrievals scored against relevance.", src, registry=r)
        self.unlabelled = Counter("ragmon_retrieval_unlabelled", "Retrievals with no relevance information (not scored).", sv, registry=r)
        self.hits = Counter("ragmon_retrieval_hits", "Retrievals with a relevant document in the top k.", [*src, "k"], registry=r)
        self.rr = Histogram("ragmon_retrieval_reciprocal_rank", "Reciprocal rank per retrieval.", src, buckets=SCORE_BUCKETS, registry=r)
        self.recall = Histogram("ragmon_retrieval_recall", "Recall@k per retrieval.", [*src, "k"], buckets=SCORE_BUCKETS, registry=r)
        self.precision = Histogram("ragmon_retrieval_precision", "Precision@k per retrieval.", [*src, "k"], buckets=SCORE_BUCKETS, registry=r)
        self.ndcg = Histogram("ragmon_retrieval_ndcg", "NDCG@k per retrieval.", [*src, "k"], buckets=SCORE_BUCKETS, registry=r)
        info = Gauge("ragmon_build_info", "ragmon's version.", ["version"], registry=r)
        info.labels(__version__).set(1)
        registry.register(_WindowCollector(self))
        registry.register(StatsCollector(self._own_stats))

    def _own_stats(self) -> Iterable[Metric]:
        folded = CounterMetricFamily("ragmon_label_values_folded", "Observations whose label value was folded into 'other'.", labels=["label"])
        for label, n in sorted(self.limit.folded.items()):
            folded.add_metric([label], n)
        series = GaugeMetricFamily("ragmon_window_series", "Series held by the rolling windows.", labels=["store"])
        dropped = CounterMetricFamily("ragmon_window_dropped", "Observations the rolling windows discarded.", labels=["store", "reason"])
        for name, store in (("means", self.means), ("latency", self.latency)):
            stats = store.stats()
            series.add_metric([name], stats.series)
            for reason in ("folded", "dropped", "invalid", "late"):
                dropped.add_metric([name, reason], getattr(stats, reason))
        return [folded, series, dropped]

    def observe(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """Fold one scored request into every series."""
        limit = self.limit
        service = limit("service", record.service or "unknown")
        variant = limit("variant", record.variant or "default")
        exemplar = {"trace_id": record.trace_id.hex()}
        self.traces.labels(service, variant).inc()
        if record.error:
            self.trace_errors.labels(service, variant).inc()
        self.means.observe(("ragmon_error_ratio", service, variant, "", ""), 1.0 if record.error else 0.0, now)
        total = record.duration_seconds
        self.duration.labels(service, variant, "total").observe(total, exemplar)
        self.latency.observe((service, variant, "total"), total, now)
        for stage, seconds in record.stage_seconds.items():
            self.duration.labels(service, variant, stage).observe(seconds, exemplar)
            self.latency.observe((service, variant, stage), seconds, now)
        for call in scores.calls:
            model = limit("model", call.model or "unknown")
            if call.price_source == "no_usage":
                self.without_usage.labels(service, model).inc()
                continue
            if call.input_tokens:
                self.tokens.labels(service, model, "input").inc(call.input_tokens)
            if call.output_tokens:
                self.tokens.labels(service, model, "output").inc(call.output_tokens)
            if call.usd is None:
                self.unpriced.labels(model).inc(call.input_tokens + call.output_tokens)
            else:
                self.cost.labels(service, model).inc(call.usd)
        cost = scores.cost_usd
        if cost is not None:
            self.means.observe(("ragmon_cost_usd_per_request", service, variant, "", ""), cost, now)
        if scores.unlabelled:
            self.unlabelled.labels(service, variant).inc()
        for score in scores.retrieval:
            series = self._retrieval_series(service, variant, score.source)
            series.queries.inc()
            series.rr.observe(score.reciprocal_rank, exemplar)
            observe = self.means.observe
            observe(series.mrr_key, score.reciprocal_rank, now)
            for k, hits, recall, precision, ndcg, keys in series.per_k:
                hit = score.hit[k]
                hits.inc(hit)
                recall.observe(score.recall[k])
                precision.observe(score.precision[k])
                ndcg.observe(score.ndcg[k])
                observe(keys[0], hit, now)
                observe(keys[1], score.recall[k], now)
                observe(keys[2], score.precision[k], now)
                observe(keys[3], score.ndcg[k], now)

    def _retrieval_series(self, service: str, variant: str, source: str) -> _RetrievalSeries:
        """The bound children and window keys of one (service, variant, source), made once."""
        key = (service, variant, source)
        series = self._retrieval.get(key)
        if series is None:
            labels = (service, variant, source)
            per_k = []
            for k in self.ks:
                ks = str(k)
                per_k.append((
                    k,
                    self.hits.labels(*labels, ks),
                    self.recall.labels(*labels, ks),
                    self.precision.labels(*labels, ks),
                    self.ndcg.labels(*labels, ks),
                    tuple((gauge, service, variant, source, ks) for gauge in _PER_K_GAUGES),
                ))
            series = self._retrieval[key] = _RetrievalSeries(
                self.queries.labels(*labels),
                self.rr.labels(*labels),
                ("ragmon_retrieval_mrr", service, variant, source, ""),
                tuple(per_k),
            )
        return series


def self_metrics(ingest: IngestStats, assembly: AssemblyStats, stats: PipelineStats) -> Iterable[Metric]:
    """ragmon's own health: receivers, assembly, queue, ignored and dropped traces."""
    received = CounterMetricFamily("ragmon_spans_received", "Spans received, by protocol.", labels=["protocol"])
    rejected = CounterMetricFamily("ragmon_spans_rejected", "Spans rejected: partial success (bad ids) or refused with 503 (retried by the exporter), by reason.", labels=["protocol", "reason"])
    requests = CounterMetricFamily("ragmon_requests_rejected", "Export requests rejected whole, by reason.", labels=["protocol", "reason"])
    for protocol in ("http", "grpc"):
        received.add_metric([protocol], ingest.spans_received[protocol])
    for (protocol, reason), n in sorted(ingest.spans_rejected.items()):
        rejected.add_metric([protocol, reason], n)
    for (protocol, reason), n in sorted(ingest.requests_rejected.items()):
        requests.add_metric([protocol, reason], n)
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
