"""Exact values RagMetrics puts on /metrics: label fallbacks, model-call accounting, the
retrieval histograms of each source, bound state at the series budget (known keys keep their
own series; later keys fold and count as folded in every family and rolling store), exemplar
stamps, a judgement alone on the next scrape, the gzip body and the pipeline's own counters.

A real registry and prometheus_client's encoders; no sidecar (each test well under 0.1 s)."""

from __future__ import annotations

import gzip

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from server_helpers import scrape
from test_metrics_bounds import Samples, parse

from ragmon.export.exporter import RagMetrics
from ragmon.export.labels import OTHER
from ragmon.export.server import gzip_accepted
from ragmon.model import RagRecord
from ragmon.pipeline.queue import PipelineStats
from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

KS = (1, 3)
WALL = 1_700_000_000.5


class Clock:
    """A settable monotonic clock."""

    def __init__(self, now: float = 10.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _metrics(
    clock: Clock, *, max_series: int = 100, ks: tuple[int, ...] = KS, max_label_values: int = 100
) -> tuple[RagMetrics, CollectorRegistry]:
    registry = CollectorRegistry(auto_describe=True)
    metrics = RagMetrics(
        registry, ks=ks, windows=(300.0,), max_label_values=max_label_values, clock=clock, max_series=max_series,
        wall=lambda: WALL,
    )
    return metrics, registry


def _record(i: int, service: str = "s", variant: str = "v", **kwargs: object) -> RagRecord:
    return RagRecord(trace_id=i.to_bytes(16, "big"), service=service, variant=variant, start_ns=0, end_ns=4 * 10**8, **kwargs)  # type: ignore[arg-type]


def _retrieval(source: str, ks: tuple[int, ...] = KS) -> RetrievalScore:
    """Hit 1, recall 0.5, precision 0.25, NDCG 0.75 at every k; the judge has no recall or NDCG."""
    judge = source == "judge"
    return RetrievalScore(
        source, 0.5, dict.fromkeys(ks, 1.0), {} if judge else dict.fromkeys(ks, 0.5),
        dict.fromkeys(ks, 0.25), {} if judge else dict.fromkeys(ks, 0.75),
    )


def _value(v: Samples, name: str, **labels: str) -> float:
    return v[(name, frozenset(labels.items()))]


def _has(v: Samples, name: str, **labels: str) -> bool:
    want = set(labels.items())
    return any(n == name and want <= ls for n, ls in v)


def _folded(v: Samples) -> dict[str, float]:
    """``ragmon_series_folded_total`` by metric."""
    return {dict(ls)["metric"]: x for (name, ls), x in v.items() if name == "ragmon_series_folded_total"}


def _scrape(registry: CollectorRegistry) -> Samples:
    return parse(generate_latest(registry).decode())


def test_requests_without_service_variant_or_model_are_exported_as_unknown_and_default() -> None:
    metrics, registry = _metrics(Clock())
    record = _record(1, service="", variant="")
    metrics.observe(record, RecordScores((), False, (PricedCall("", "generation", 100, 20, None, "unpriced"),)), 10.0)
    metrics.observe_judged(record, "judge", "llm", {"faithfulness": 1.0}, None, 10.0)
    v = _scrape(registry)
    sv = {"service": "unknown", "variant": "default"}
    assert _value(v, "ragmon_traces_total", **sv) == 1
    assert _value(v, "ragmon_tokens_total", service="unknown", model="unknown", token_type="input") == 100
    assert _value(v, "ragmon_unpriced_tokens_total", model="unknown") == 120
    assert _value(v, "ragmon_faithfulness_count", **sv, source="judge", judge="llm") == 1


def test_model_calls_count_tokens_cost_unpriced_tokens_and_usage_less_calls() -> None:
    """A usage-less call is counted as such and nothing else, and the calls after it still count."""
    metrics, registry = _metrics(Clock())
    calls = (
        PricedCall("streamed", "generation", 0, 0, None, "no_usage"),
        PricedCall("gpt", "generation", 100, 20, 0.25, "table"),
        PricedCall("house", "generation", 7, 300, None, "unpriced"),
    )
    metrics.observe(_record(1), RecordScores((), False, calls), 10.0)
    priced = (PricedCall("gpt", "generation", 10, 2, 0.25, "table"), PricedCall("gpt", "rerank", 1, 0, 0.5, "table"))
    metrics.observe(_record(2, error=True), RecordScores((), False, priced), 10.0)
    v = _scrape(registry)
    assert _value(v, "ragmon_llm_calls_without_usage_total", service="s", model="streamed") == 1
    assert not _has(v, "ragmon_unpriced_tokens_total", model="streamed")
    assert not _has(v, "ragmon_tokens_total", model="streamed")
    assert _value(v, "ragmon_tokens_total", service="s", model="gpt", token_type="input") == 111
    assert _value(v, "ragmon_tokens_total", service="s", model="gpt", token_type="output") == 22
    assert _value(v, "ragmon_unpriced_tokens_total", model="house") == 307
    assert _value(v, "ragmon_cost_usd_total", service="s", model="gpt") == 1.0
    # only the second request was fully priced: the per-request cost is its own
    assert _value(v, "ragmon_cost_usd_per_request", service="s", variant="v", window="5m") == 0.75
    for metric, n in (("cost_usd_per_request", 1), ("error_ratio", 2)):
        assert _value(v, "ragmon_window_samples", service="s", variant="v", source="", metric=metric, window="5m") == n
    assert _value(v, "ragmon_error_ratio", service="s", variant="v", window="5m") == 0.5


def test_each_retrieval_source_feeds_its_histograms_and_gauges() -> None:
    """A labelled retrieval has reciprocal rank, recall, precision and NDCG; the judge's only
    reciprocal rank and precision (SPEC §5)."""
    metrics, registry = _metrics(Clock())
    metrics.observe(_record(1), RecordScores((_retrieval("label"), _retrieval("judge")), False, ()), 10.0)
    v = _scrape(registry)
    sv = {"service": "s", "variant": "v"}
    for source in ("label", "judge"):
        assert _value(v, "ragmon_retrieval_queries_total", **sv, source=source) == 1
        assert _value(v, "ragmon_retrieval_reciprocal_rank_sum", **sv, source=source) == 0.5
        assert _value(v, "ragmon_retrieval_mrr", **sv, source=source, window="5m") == 0.5
        for k in ("1", "3"):
            assert _value(v, "ragmon_retrieval_precision_sum", **sv, source=source, k=k) == 0.25
            assert _value(v, "ragmon_retrieval_hit_rate", **sv, source=source, k=k, window="5m") == 1.0
    for k in ("1", "3"):
        assert _value(v, "ragmon_retrieval_recall_sum", **sv, source="label", k=k) == 0.5
        assert _value(v, "ragmon_retrieval_ndcg_sum", **sv, source="label", k=k) == 0.75
        assert _value(v, "ragmon_retrieval_recall_mean", **sv, source="label", k=k, window="5m") == 0.5
        assert _value(v, "ragmon_retrieval_ndcg_mean", **sv, source="label", k=k, window="5m") == 0.75
    for name in ("ragmon_retrieval_recall_count", "ragmon_retrieval_ndcg_count", "ragmon_retrieval_recall_mean"):
        assert not _has(v, name, source="judge")
    assert not _has(v, "ragmon_retrieval_queries_total", service=OTHER)
    assert sum(_folded(v).values()) == 0


def _full_request(metrics: RagMetrics, i: int, service: str, call: PricedCall, now: float) -> None:
    """One request of ``service`` with a labelled retrieval and ``call``, and its judgement."""
    record = _record(i, service)
    metrics.observe(record, RecordScores((_retrieval("label", (1,)),), False, (call,)), now)
    metrics.observe_judged(record, "judge", "llm", {"faithfulness": 1.0, "answer_relevance": 0.5}, None, now)
    metrics.observe_feedback(service, "v", record.trace_id.hex(), None, {"thumbs": 1.0}, now)


def test_known_keys_keep_their_own_series_when_the_budget_is_full() -> None:
    metrics, registry = _metrics(Clock(), max_series=1, ks=(1,))
    usage_less = PricedCall("m", "generation", 0, 0, None, "no_usage")
    for i in range(3):
        record = _record(i)
        metrics.observe(record, RecordScores((_retrieval("label", (1,)),), False, (usage_less,)), 10.0)
        metrics.observe_judged(record, "judge", "llm", {"faithfulness": 1.0}, None, 10.0)
    v = _scrape(registry)
    sv = {"service": "s", "variant": "v"}
    assert _value(v, "ragmon_traces_total", **sv) == 3
    assert _value(v, "ragmon_llm_calls_without_usage_total", service="s", model="m") == 3
    assert _value(v, "ragmon_retrieval_queries_total", **sv, source="label") == 3
    assert _value(v, "ragmon_faithfulness_count", **sv, source="judge", judge="llm") == 3
    assert _value(v, "ragmon_faithfulness_mean", **sv, source="judge", judge="llm", window="5m") == 1.0
    assert sum(_folded(v).values()) == 0


def test_bound_state_stays_within_the_budget() -> None:
    metrics, _ = _metrics(Clock(), max_series=2, ks=(1,))
    for i in range(5):
        _full_request(metrics, i, f"s{i}", PricedCall(f"m{i}", "generation", 1, 1, 0.5, "table"), 10.0)
    generation = metrics.judgements.streams
    for state in (metrics.requests.series, metrics.retrieval.series, metrics.calls.series, generation["faithfulness"], generation["answer_relevance"], metrics.feedback.streams):
        assert len(state) == 2


def test_requests_past_the_budget_count_as_folded_even_where_a_store_has_room() -> None:
    """Service A fills the budget of every piece of state; once its observations have left the
    window, service B's go to ``other`` series and count as folded in every family and store,
    each generation score in its own fold series."""
    clock = Clock(10.0)
    metrics, registry = _metrics(clock, max_series=1, ks=(1,))
    _full_request(metrics, 1, "A", PricedCall("a", "generation", 0, 0, None, "no_usage"), 10.0)
    clock.now = 1000.0
    _full_request(metrics, 2, "B", PricedCall("b", "generation", 10, 2, 0.5, "table"), 1000.0)
    v = _scrape(registry)
    other = {"service": OTHER, "variant": OTHER, "window": "5m"}
    assert _value(v, "ragmon_error_ratio", **other) == 0.0
    assert _value(v, "ragmon_cost_usd_per_request", **other) == 0.5
    assert _value(v, "ragmon_retrieval_mrr", **other, source="label") == 0.5
    assert _value(v, "ragmon_faithfulness_mean", **other, source="judge", judge="llm") == 1.0
    assert _value(v, "ragmon_answer_relevance_mean", **other, source="judge", judge="llm") == 0.5
    assert _value(v, "ragmon_cost_usd_total", service=OTHER, model=OTHER) == 0.5
    assert not _has(v, "ragmon_traces_total", service="B")
    folded = _folded(v)
    for name in (
        "ragmon_error_ratio", "ragmon_cost_usd_per_request", "ragmon_retrieval_mrr", "ragmon_retrieval_hit_rate",
        "ragmon_latency_seconds", "ragmon_faithfulness_mean", "ragmon_answer_relevance_mean",
        "ragmon_cost_usd_total", "ragmon_traces_total",
    ):
        assert folded[name] == 1, name


def test_past_the_budget_folds_count_even_into_an_other_series_the_label_limiter_made() -> None:
    """Service and variant both folded by the label limiter make an own ``other`` series; once
    the budget is full, a new (service, variant) adds to it and counts as folded."""
    metrics, registry = _metrics(Clock(), max_series=2, ks=(1,), max_label_values=1)
    for i, (service, variant) in enumerate((("a", "x"), ("b", "y"), ("a", "z"))):
        metrics.observe(_record(i, service, variant), RecordScores((_retrieval("label", (1,)),), False, ()), 10.0)
    v = _scrape(registry)
    assert _value(v, "ragmon_traces_total", service=OTHER, variant=OTHER) == 2
    assert _value(v, "ragmon_retrieval_queries_total", service=OTHER, variant=OTHER, source="label") == 2
    folded = _folded(v)
    assert (folded["ragmon_traces_total"], folded["ragmon_retrieval_queries_total"]) == (1, 1)


def test_exemplars_are_stamped_with_the_wall_clock_of_the_flush() -> None:
    metrics, registry = _metrics(Clock())
    record = _record(7)
    metrics.observe(record, RecordScores((_retrieval("label"),), False, ()), 10.0)
    metrics.observe_judged(record, "judge", "llm", {"faithfulness": 1.0}, None, 10.0)
    text = generate_openmetrics(registry).decode()
    trace = f'# {{trace_id="{record.trace_id.hex()}"}}'
    for family in ("ragmon_request_duration_seconds", "ragmon_retrieval_reciprocal_rank", "ragmon_faithfulness"):
        exemplars = [line for line in text.splitlines() if line.startswith(family + "_bucket") and trace in line]
        assert exemplars, family
        assert all(line.endswith(f" {WALL}") for line in exemplars), exemplars


def test_a_judgement_alone_shows_on_the_next_scrape() -> None:
    metrics, registry = _metrics(Clock())
    metrics.observe_judged(_record(1), "judge", "llm", {"answer_relevance": 0.5}, None, 10.0)
    v = _scrape(registry)
    labels = {"service": "s", "variant": "v", "source": "judge", "judge": "llm"}
    assert _value(v, "ragmon_answer_relevance_count", **labels) == 1
    assert _value(v, "ragmon_answer_relevance_mean", **labels, window="5m") == 0.5


def test_gzip_accepted_reads_every_listed_coding_and_ignores_other_parameters() -> None:
    assert gzip_accepted("deflate,gzip") and gzip_accepted("gzip,deflate") and gzip_accepted("br,\tgzip")
    assert gzip_accepted("gzip;level=9")  # not a q value: still accepted
    assert not gzip_accepted("gzip;q=0.0, deflate")


def test_the_gzipped_body_is_reproducible() -> None:
    """Same families, same bytes (no timestamp in the gzip header)."""
    metrics, registry = _metrics(Clock())
    metrics.observe(_record(1), RecordScores((_retrieval("label"),), False, ()), 10.0)
    plain, _ = scrape(registry)
    body, headers = scrape(registry, accept_encoding="gzip")
    assert headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == plain
    assert body[4:8] == b"\0\0\0\0"
    assert scrape(registry, accept_encoding="gzip")[0] == body


def test_the_pipeline_counters_are_exported_as_they_stand() -> None:
    stats = PipelineStats(
        queued_spans=3, max_queued_spans=100, queued_bytes=640, records=9, ignored=2, unlabelled=1,
        without_content=4, dropped={},
    )
    families = {f.name: f for f in stats.collect()}
    values = {
        name: [(s.labels, s.value) for s in f.samples if s.name.endswith(("_total", "_spans", "_bytes"))]
        for name, f in families.items()
    }
    assert values["ragmon_dropped"] == [({"reason": "trace_error"}, 0)]
    assert values["ragmon_traces_ignored"] == [({}, 2)]
    assert values["ragmon_traces_without_content"] == [({}, 4)]
    assert values["ragmon_queue_spans"] == [({}, 3)]
    assert values["ragmon_queue_bytes"] == [({}, 640)]
    assert values["ragmon_queue_capacity_spans"] == [({}, 100)]
    one_dropped = PipelineStats(0, 0, 0, 0, 0, 0, 0, {"trace_error": 5})
    dropped = {f.name: f for f in one_dropped.collect()}
    assert [s.value for s in dropped["ragmon_dropped"].samples if s.name.endswith("_total")] == [5]


def test_the_calls_of_a_trace_that_is_not_a_request_count_as_calls_only() -> None:
    """``observe_calls``: tokens, cost, unpriced tokens and calls without usage, under the
    service's (limited) label, added to what requests count; no request series; labels capped."""
    metrics, registry = _metrics(Clock(), max_label_values=3)
    metrics.observe(_record(1, "svc"), RecordScores((), False, (PricedCall("gpt", "generation", 100, 20, 0.25, "table"),)), 10.0)
    metrics.observe_calls("svc", [
        PricedCall("gpt", "generation", 10, 2, 0.5, "config"),
        PricedCall("emb", "embedding", 7, 0, 0.125, "span"),
        PricedCall("odd", "embedding", 3, 0, None, "unpriced"),
        PricedCall("gpt", "generation", 0, 0, None, "no_usage"),
    ])
    metrics.observe_calls("", [PricedCall("emb", "embedding", 1, 0, 0.25, "config")])  # no service.name
    metrics.observe_calls("x", [])
    metrics.observe_calls("third", [PricedCall("emb", "embedding", 2, 0, 0.25, "config")])  # past the label cap
    v = _scrape(registry)
    assert _value(v, "ragmon_tokens_total", service="svc", model="gpt", token_type="input") == 110
    assert _value(v, "ragmon_tokens_total", service="svc", model="gpt", token_type="output") == 22
    assert _value(v, "ragmon_cost_usd_total", service="svc", model="gpt") == 0.75
    assert _value(v, "ragmon_tokens_total", service="svc", model="emb", token_type="input") == 7
    assert not _has(v, "ragmon_tokens_total", model="emb", token_type="output")
    assert _value(v, "ragmon_cost_usd_total", service="svc", model="emb") == 0.125
    assert _value(v, "ragmon_unpriced_tokens_total", model="odd") == 3
    assert _value(v, "ragmon_llm_calls_without_usage_total", service="svc", model="gpt") == 1
    assert _value(v, "ragmon_tokens_total", service="unknown", model="emb", token_type="input") == 1
    assert _value(v, "ragmon_tokens_total", service=OTHER, model="emb", token_type="input") == 2
    assert _value(v, "ragmon_traces_total", service="svc", variant="v") == 1  # the request's only
    assert not _has(v, "ragmon_traces_total", service="unknown") and not _has(v, "ragmon_traces_total", service=OTHER)
    assert _value(v, "ragmon_cost_usd_per_request", service="svc", variant="v", window="5m") == 0.25
    assert _value(v, "ragmon_request_duration_seconds_count", service="svc", variant="v", stage="total") == 1


def test_the_calls_of_a_trace_that_is_not_a_request_share_the_service_label_budget() -> None:
    """``observe_calls`` caps ``service`` within the same per-label budget as requests: with
    one value allowed, a second service folds into ``other``, counted under ``service``."""
    metrics, registry = _metrics(Clock(), max_label_values=1)
    metrics.observe(_record(1, "first"), RecordScores((), False, ()), 10.0)
    metrics.observe_calls("second", [PricedCall("emb", "embedding", 4, 0, 0.5, "config")])
    v = _scrape(registry)
    assert _value(v, "ragmon_tokens_total", service=OTHER, model="emb", token_type="input") == 4
    assert not _has(v, "ragmon_tokens_total", service="second")
    assert metrics.limit.folded["service"] == 1
