"""Every metric family ragmon exports, in one place: name, type, help, labels, buckets.

The exporter, each stage (receivers, assembly, judge, prober), the alert rules, the dashboard
and the documentation's metric tables take their names from here or are checked against it
(tests/test_catalogue.py), so a renamed metric cannot drift. A ``Family`` is named as
prometheus_client names it: a counter without its ``_total`` suffix. Families are listed in
the order of the exposition; ``CATALOGUE`` holds them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

__all__ = [
    "CATALOGUE",
    "LATENCY_BUCKETS",
    "MEAN_GAUGES",
    "SCORE_BUCKETS",
    "SCORE_HISTOGRAMS",
    "SCORE_MEANS",
    "Family",
    "Kind",
    "by_sample",
]

LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: the buckets of every latency histogram (requests, stages, probes)."""
SCORE_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The buckets of every score histogram in [0, 1]."""


class Kind(StrEnum):
    """A family's Prometheus type."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family. ``unit`` is the unit its name ends in, for readers only: ragmon
    writes no ``# UNIT`` line."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    unit: str = ""

    @property
    def total(self) -> str:
        """A counter's sample name."""
        return self._series(Kind.COUNTER, "_total")

    @property
    def bucket(self) -> str:
        """A histogram's bucket series."""
        return self._series(Kind.HISTOGRAM, "_bucket")

    @property
    def sum(self) -> str:
        """A histogram's sum series."""
        return self._series(Kind.HISTOGRAM, "_sum")

    @property
    def count(self) -> str:
        """A histogram's count series."""
        return self._series(Kind.HISTOGRAM, "_count")

    def _series(self, kind: Kind, suffix: str) -> str:
        if self.kind is not kind:
            raise TypeError(f"{self.name} is a {self.kind}: it has no {suffix} series")
        return self.name + suffix

    def samples(self) -> dict[str, tuple[str, ...]]:
        """Sample name to label names, as prometheus_client writes them (``_created`` aside)."""
        if self.kind is Kind.COUNTER:
            return {self.total: self.labels}
        if self.kind is Kind.HISTOGRAM:
            return {self.bucket: (*self.labels, "le"), self.sum: self.labels, self.count: self.labels}
        return {self.name: self.labels}

    def empty(self) -> CounterMetricFamily | GaugeMetricFamily:
        """The family without samples, for a collector to fill (counters and gauges; a
        histogram is built by ``ragmon.export.series.HistogramFamily``)."""
        if self.kind is Kind.COUNTER:
            return CounterMetricFamily(self.name, self.help, labels=self.labels)
        if self.kind is Kind.GAUGE:
            return GaugeMetricFamily(self.name, self.help, labels=self.labels)
        raise TypeError(f"{self.name} is a histogram: build it with HistogramFamily")


def _counter(name: str, help: str, *labels: str, unit: str = "") -> Family:
    return Family(f"ragmon_{name}", Kind.COUNTER, help, labels, unit=unit)


def _gauge(name: str, help: str, *labels: str, unit: str = "") -> Family:
    return Family(f"ragmon_{name}", Kind.GAUGE, help, labels, unit=unit)


def _histogram(name: str, help: str, buckets: tuple[float, ...], *labels: str, unit: str = "") -> Family:
    return Family(f"ragmon_{name}", Kind.HISTOGRAM, help, labels, buckets, unit)


_SV = ("service", "variant")
_SVS = (*_SV, "source")

# -- RAG metrics: counters and histograms (ragmon.export.exporter.RagMetrics) ---------------------

TRACES = _counter("traces", "Finished requests (RAG traces) scored.", *_SV)
TRACE_ERRORS = _counter("trace_errors", "Finished requests whose trace had an error.", *_SV)
REQUEST_DURATION = _histogram(
    "request_duration_seconds", "Request latency per stage (total: the local root span).",
    LATENCY_BUCKETS, *_SV, "stage", unit="seconds",
)
TOKENS = _counter("tokens", "Model tokens.", "service", "model", "token_type")
COST_USD = _counter("cost_usd", "Priced model cost in USD.", "service", "model", unit="usd")
UNPRICED_TOKENS = _counter("unpriced_tokens", "Tokens of models with no known price.", "model")
LLM_CALLS_WITHOUT_USAGE = _counter(
    "llm_calls_without_usage", "Model calls whose span reported no tokens and no cost (not priced).", "service", "model"
)
RETRIEVAL_QUERIES = _counter("retrieval_queries", "Retrievals scored against relevance.", *_SVS)
RETRIEVAL_UNLABELLED = _counter("retrieval_unlabelled", "Retrievals with no relevance information (not scored).", *_SV)
RETRIEVAL_HITS = _counter("retrieval_hits", "Retrievals with a relevant document in the top k.", *_SVS, "k")
RETRIEVAL_RECIPROCAL_RANK = _histogram("retrieval_reciprocal_rank", "Reciprocal rank per retrieval.", SCORE_BUCKETS, *_SVS)
RETRIEVAL_RECALL = _histogram("retrieval_recall", "Recall@k per retrieval.", SCORE_BUCKETS, *_SVS, "k")
RETRIEVAL_PRECISION = _histogram("retrieval_precision", "Precision@k per retrieval.", SCORE_BUCKETS, *_SVS, "k")
RETRIEVAL_NDCG = _histogram("retrieval_ndcg", "NDCG@k per retrieval.", SCORE_BUCKETS, *_SVS, "k")
SCORE_HISTOGRAMS: Final[Mapping[str, Family]] = {
    name: _histogram(name, help, SCORE_BUCKETS, *_SVS, "judge")
    for name, help in (
        ("faithfulness", "Faithfulness per judged answer: supported claims / claims."),
        ("answer_relevance", "Answer relevance per judged answer: 1 yes, 0.5 partial, 0 no."),
        ("context_relevance", "Context relevance per judged retrieval: relevant documents / documents."),
        ("answer_correctness", "Answer correctness per judged answer: covered reference claims / claims."),
        ("coherence", "Coherence per judged answer: rubric checks passed / checks."),
        ("toxicity", "Toxicity per judged answer: worst category severity (0 none, 1/3 low, 2/3 medium, 1 high)."),
    )
}
"""Generation-quality scores by name: histogram ``ragmon_<name>``."""
COHERENCE = SCORE_HISTOGRAMS["coherence"]
TOXICITY = SCORE_HISTOGRAMS["toxicity"]
TOXIC_ANSWERS = _counter(
    "toxic_answers", "Judged answers with a toxicity category at severity medium or worse, per category.",
    *_SV, "category",
)
FAITHFULNESS = SCORE_HISTOGRAMS["faithfulness"]
USER_FEEDBACK = _histogram(
    "user_feedback", "Named user scores sent to POST /v1/feedback (thumbs 0/1, ratings scaled to [0, 1]).",
    SCORE_BUCKETS, *_SV, "name",
)
BUILD_INFO = _gauge("build_info", "ragmon's version, the OTLP protobuf decoder that runs (compiled or python), and whether the per-request pipeline runs compiled (compiled or python).", "decoder", "pipeline", "version")

# -- rolling-window gauges (one replica's view) -------------------------------------------------


def _mean(name: str, help: str, *labels: str, unit: str = "") -> Family:
    return _gauge(name, help, *_SV, *labels, "window", unit=unit)


RETRIEVAL_HIT_RATE = _mean("retrieval_hit_rate", "Share of queries with a relevant document in the top k, over the window.", "source", "k")
RETRIEVAL_MRR = _mean("retrieval_mrr", "Mean reciprocal rank over the window.", "source")
RETRIEVAL_RECALL_MEAN = _mean("retrieval_recall_mean", "Mean recall@k over the window.", "source", "k")
RETRIEVAL_PRECISION_MEAN = _mean("retrieval_precision_mean", "Mean precision@k over the window.", "source", "k")
RETRIEVAL_NDCG_MEAN = _mean("retrieval_ndcg_mean", "Mean NDCG@k over the window.", "source", "k")
COST_USD_PER_REQUEST = _mean(
    "cost_usd_per_request", "Mean cost of a request in USD over the window (requests whose every model call was priced).",
    unit="usd",
)
ERROR_RATIO = _mean("error_ratio", "Share of requests whose trace had an error over the window.")
SCORE_MEANS: Final[Mapping[str, Family]] = {
    name: _mean(f"{name}_mean", help, "source", "judge")
    for name, help in (
        ("faithfulness", "Mean faithfulness (supported claims / claims) over the window."),
        ("answer_relevance", "Mean answer relevance over the window."),
        ("context_relevance", "Mean context relevance (relevant documents / documents) over the window."),
        ("answer_correctness", "Mean answer correctness (covered reference claims / claims) over the window."),
        ("coherence", "Mean coherence (rubric checks passed / checks) over the window."),
        ("toxicity", "Mean toxicity (worst category severity, 0 clean) over the window."),
    )
}
"""Generation-quality scores by name: rolling mean gauge ``ragmon_<name>_mean``."""
USER_FEEDBACK_MEAN = _mean("user_feedback_mean", "Mean named user score over the window.", "name")
MEAN_GAUGES: Final = (
    RETRIEVAL_HIT_RATE, RETRIEVAL_MRR, RETRIEVAL_RECALL_MEAN, RETRIEVAL_PRECISION_MEAN, RETRIEVAL_NDCG_MEAN,
    COST_USD_PER_REQUEST, ERROR_RATIO, *SCORE_MEANS.values(), USER_FEEDBACK_MEAN,
)
"""Every rolling mean gauge, in the order of the exposition."""
LATENCY = _gauge(
    "latency_seconds", "Latency quantiles per stage over the window.", *_SV, "stage", "quantile", "window", unit="seconds"
)
WINDOW_SAMPLES = _gauge(
    "window_samples", "Observations behind each rolling gauge (for alert guards).", *_SV, "source", "metric", "window"
)

# -- the exporter's own bounds ---------------------------------------------------------------------

LABEL_VALUES_FOLDED = _counter("label_values_folded", "Observations whose label value was folded into 'other'.", "label")
LABEL_VALUES_TRUNCATED = _counter(
    "label_values_truncated", "Observations whose label value was cut to metrics.max_label_chars.", "label"
)
LABEL_VALUES_REPLACED = _counter(
    "label_values_replaced",
    "Observations whose label value had characters replaced by U+FFFD (lone surrogates, control and bidirectional-override characters).",
    "label",
)
SERIES_FOLDED = _counter(
    "series_folded",
    "Observations that went to a family's 'other' series because its series budget (metrics.max_series) was full.",
    "metric",
)
WINDOW_SERIES = _gauge("window_series", "Series held by the rolling windows.", "store")
WINDOW_DROPPED = _counter("window_dropped", "Observations the rolling windows discarded.", "store", "reason")
DURATIONS_INVALID = _counter(
    "durations_invalid",
    "Spans whose duration was out of range (ended before they started, or lasted longer than traces.max_duration): no latency recorded, by stage.",
    "stage",
)

# -- receivers (ragmon.receivers) ------------------------------------------------------------------

SPANS_RECEIVED = _counter("spans_received", "Spans received, by protocol.", "protocol")
SPANS_REJECTED = _counter(
    "spans_rejected",
    "Spans rejected: partial success (bad ids) or refused with 503 (retried by the exporter), by reason.",
    "protocol", "reason",
)
REQUESTS_REJECTED = _counter("requests_rejected", "Export requests rejected whole, by reason.", "protocol", "reason")
ATTRIBUTES_TRUNCATED = _counter(
    "attributes_truncated",
    "Values, names and event lists the decoder cut or dropped at its limits "
    "(receiver.max_attribute_chars, nesting depth, events per span).",
    "protocol",
)
SCRAPES_DROPPED = _counter(
    "scrapes_dropped",
    "/metrics answers not delivered: refused (503) past metrics.max_inflight_bytes, or cut off past metrics.write_timeout.",
    "reason",
)
SCRAPE_BYTES = _gauge("scrape_bytes", "Bytes of /metrics answers rendered and not yet written out.", unit="bytes")
CONNECTIONS_OPEN = _gauge("connections_open", "Open connections, by listener.", "listener")
CONNECTIONS_REFUSED = _counter(
    "connections_refused",
    "Connections answered 503 and closed at once: the listener was at max_connections, none idle.",
    "listener",
)
CONNECTIONS_CLOSED = _counter(
    "connections_closed",
    "Connections closed by ragmon: header_timeout (request head too slow), evicted (idle, "
    "for a new one at the cap), malformed (bad HTTP framing).",
    "listener", "reason",
)

HTTP_REQUESTS_UNROUTED = _counter(
    "http_requests_unrouted",
    "HTTP requests no handler serves, by listener: unknown_path (404: e.g. OTLP sent to / or to the "
    "metrics port) or wrong_method (405); each answered with the URL to use.",
    "listener", "reason",
)

# -- trace assembly (ragmon.pipeline.assembly) -----------------------------------------------------


def _assembly(name: str, kind: Kind, *labels: str, unit: str = "") -> Family:
    return Family(f"ragmon_{name}", kind, f"Trace assembly: ragmon_{name}.", labels, unit=unit)


TRACES_FINISHED = _assembly("traces_finished", Kind.COUNTER, "reason")
TRACES_EVICTED = _assembly("traces_evicted", Kind.COUNTER)
TRACES_PENDING = _assembly("traces_pending", Kind.GAUGE)
SPANS_PENDING = _assembly("spans_pending", Kind.GAUGE)
SPAN_BYTES_PENDING = _assembly("span_bytes_pending", Kind.GAUGE, unit="bytes")
SPANS_ASSEMBLED = _assembly("spans_assembled", Kind.COUNTER)
SPANS_LATE = _assembly("spans_late", Kind.COUNTER)
SPANS_DROPPED = _assembly("spans_dropped", Kind.COUNTER, "reason")

# -- the pipeline (ragmon.pipeline.queue) ----------------------------------------------------------

QUEUE_SPANS = _gauge("queue_spans", "Spans waiting in the ingest queue.")
QUEUE_BYTES = _gauge("queue_bytes", "Approximate bytes of span data waiting in the ingest queue.", unit="bytes")
QUEUE_CAPACITY_SPANS = _gauge("queue_capacity_spans", "Capacity of the ingest queue, in spans.")
TRACES_IGNORED = _counter("traces_ignored", "Finished traces that are not RAG requests (their model calls count in tokens and cost).")
DROPPED = _counter("dropped", "Finished traces that could not be scored, by reason.", "reason")
TRACES_WITHOUT_CONTENT = _counter("traces_without_content", "Scored traces whose spans recorded no query or answer text.")

# -- the judge (ragmon.judge.stage) ----------------------------------------------------------------

JUDGE_REQUESTS = _counter(
    "judge_requests", "Judge outcomes per evaluator (one request covers several evaluators of a trace).",
    "evaluator", "outcome",
)
JUDGE_COST_USD = _counter("judge_cost_usd", "USD spent on the judge's own tokens.", unit="usd")
JUDGE_UNPRICED_TOKENS = _counter("judge_unpriced_tokens", "Judge tokens of a model with no known price.")
JUDGE_CACHE_HITS = _counter("judge_cache_hits", "Judgements served from the cache (identical query, answer, contexts).")
JUDGE_USAGE_ESTIMATED = _counter(
    "judge_usage_estimated",
    "Judge replies without a token count: their tokens were estimated from the prompt and reply sizes, priced and charged.",
)
JUDGE_DOCUMENTS_LEFT_OUT = _counter(
    "judge_documents_left_out",
    "Documents past judge.max_documents of the traces sent to the judge: not sent, never judged.",
)
JUDGE_QUEUE = _gauge("judge_queue", "Sampled traces waiting for a judge slot.")
JUDGE_QUEUE_BYTES = _gauge(
    "judge_queue_bytes", "Bytes held by the traces waiting for a judge slot (bounded by judge.max_queue_bytes).",
    unit="bytes",
)
JUDGE_IN_FLIGHT = _gauge("judge_in_flight", "Judge calls in progress.")
JUDGE_BREAKER_OPEN = _gauge("judge_breaker_open", "1 while the circuit breaker stops judge calls.")
JUDGE_INFO = _gauge("judge_info", "Which judge runs: llm (an endpoint) or lexical.", "judge")
JUDGE_LEXICAL = _counter("judge_lexical", "Records given the lexical faithfulness estimate.")
JUDGE_LEXICAL_SKIPPED = _counter(
    "judge_lexical_skipped",
    "Sampled records not given the lexical estimate: judge.lexical_max_per_second were made over the last second.",
)
APP_EVALUATIONS = _counter("app_evaluations", "Records carrying gen_ai.evaluation.result events ragmon reads.")
EVALUATIONS_EXPORTED = _counter("evaluations_exported", "Evaluation results sent onward over OTLP, by outcome.", "outcome")

# -- probes (ragmon.groundtruth.prober) ------------------------------------------------------------

PROBE_REQUESTS = _counter(
    "probe_requests",
    "Probe requests by outcome (ok: 2xx; http_error: another status; timeout; error: connection and other).",
    "probe", "outcome",
)
PROBE_DURATION = _histogram(
    "probe_duration_seconds", "Round trip of a probe request that got an HTTP response.", LATENCY_BUCKETS, "probe",
    unit="seconds",
)
PROBE_TRACES = _counter(
    "probe_traces",
    "Probe traces: joined (scored as source probe), missing (not scored within the retention), dropped (registry full).",
    "probe", "result",
)
PROBE_TRACES_PENDING = _gauge("probe_traces_pending", "Probe trace ids awaiting their trace.")

# -- user feedback (ragmon.groundtruth.feedback) ---------------------------------------------------

FEEDBACK = _counter(
    "feedback",
    "POST /v1/feedback bodies by outcome: accepted, invalid (400), unknown_trace and expired (404), "
    "duplicate (409: relevance, or a score of that name, already given for the trace), limited (409: scores of 8 names already given).",
    "outcome",
)
FEEDBACK_TRACES = _gauge("feedback_traces", "Scored RAG traces kept joinable by feedback.")
FEEDBACK_TRACES_BYTES = _gauge(
    "feedback_traces_bytes", "Bytes of the traces kept for feedback: their strings, plus 200 per trace.", unit="bytes",
)
FEEDBACK_TRACES_DROPPED = _counter(
    "feedback_traces_dropped",
    "Traces no longer joinable: evicted (feedback.max_traces reached), expired (older than feedback.retention).",
    "reason",
)

CATALOGUE: Final[tuple[Family, ...]] = (
    TRACES, TRACE_ERRORS, REQUEST_DURATION, TOKENS, COST_USD, UNPRICED_TOKENS, LLM_CALLS_WITHOUT_USAGE,
    RETRIEVAL_QUERIES, RETRIEVAL_UNLABELLED, RETRIEVAL_HITS, RETRIEVAL_RECIPROCAL_RANK, RETRIEVAL_RECALL,
    RETRIEVAL_PRECISION, RETRIEVAL_NDCG, *SCORE_HISTOGRAMS.values(), TOXIC_ANSWERS, USER_FEEDBACK, BUILD_INFO,
    *MEAN_GAUGES, LATENCY, WINDOW_SAMPLES,
    LABEL_VALUES_FOLDED, LABEL_VALUES_TRUNCATED, LABEL_VALUES_REPLACED, SERIES_FOLDED, WINDOW_SERIES, WINDOW_DROPPED, DURATIONS_INVALID,
    SPANS_RECEIVED, SPANS_REJECTED, REQUESTS_REJECTED, ATTRIBUTES_TRUNCATED,
    CONNECTIONS_OPEN, CONNECTIONS_REFUSED, CONNECTIONS_CLOSED, HTTP_REQUESTS_UNROUTED, SCRAPES_DROPPED, SCRAPE_BYTES,
    TRACES_FINISHED, TRACES_EVICTED, TRACES_PENDING, SPANS_PENDING, SPAN_BYTES_PENDING, SPANS_ASSEMBLED,
    SPANS_LATE, SPANS_DROPPED,
    QUEUE_SPANS, QUEUE_BYTES, QUEUE_CAPACITY_SPANS, TRACES_IGNORED, DROPPED, TRACES_WITHOUT_CONTENT,
    JUDGE_REQUESTS, JUDGE_COST_USD, JUDGE_UNPRICED_TOKENS, JUDGE_USAGE_ESTIMATED, JUDGE_CACHE_HITS,
    JUDGE_DOCUMENTS_LEFT_OUT, JUDGE_QUEUE, JUDGE_QUEUE_BYTES, JUDGE_IN_FLIGHT, JUDGE_BREAKER_OPEN,
    JUDGE_INFO, JUDGE_LEXICAL, JUDGE_LEXICAL_SKIPPED, APP_EVALUATIONS, EVALUATIONS_EXPORTED,
    PROBE_REQUESTS, PROBE_DURATION, PROBE_TRACES, PROBE_TRACES_PENDING,
    FEEDBACK, FEEDBACK_TRACES, FEEDBACK_TRACES_BYTES, FEEDBACK_TRACES_DROPPED,
)
"""Every family ragmon exports."""

_BY_SAMPLE: Final = {sample: family for family in CATALOGUE for sample in family.samples()}


def by_sample(name: str) -> Family:
    """The family a sample name (``ragmon_traces_total``, ``…_bucket``, a gauge's name) belongs to."""
    return _BY_SAMPLE[name]
