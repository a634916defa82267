"""Bounded /metrics (SPEC §6, §10): label values cut and counted, a series budget per family
whose folded observations still count exactly in ``other``, bound state capped by the same
budget, and a scrape never larger than the worst case computed here from the configuration."""

from __future__ import annotations

import gc
import math
import re
from collections import defaultdict
from collections.abc import Iterable

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from ragmon.config import MetricsConfig, ScoringConfig
from ragmon.export.exporter import LATENCY_BUCKETS, SCORE_BUCKETS, RagMetrics
from ragmon.export.labels import OTHER, LabelLimiter
from ragmon.model import RagRecord
from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

KS = (1, 3, 5, 10)
WINDOWS = (300.0, 3600.0)
STAGES = ("retrieval", "rerank", "generation", "embedding")
SOURCES = ("label", "golden", "probe", "feedback", "judge")
"""Every retrieval source the bound allows for (more than the code makes today)."""
JUDGES = (("app", "app"), ("judge", "lexical"), ("judge", "llm"), ("probe", "llm"))
"""(source, judge) pairs of generation scores the bound allows for."""
GENERATION = ("faithfulness", "answer_relevance", "context_relevance", "answer_correctness")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition (a plain parser: fast on 100k lines)."""
    out: Samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _LINE.match(line)
            assert match is not None, line
            name, labels, value = match.groups()
            out[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of ``name`` over the series whose labels include ``labels``."""
    want = set(labels.items())
    return math.fsum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def series_of(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls) in samples if n == name]


def worst_case_samples(max_series: int, ks: int, windows: int) -> int:
    """The most samples RagMetrics' families can hold (on top of an empty scrape's).

    Each family keeps ``max_series`` label sets of its own plus one fold series per combination
    of its kept labels (source, k, stage, token_type, judge). Per series: a counter has
    ``_total`` and ``_created``; a histogram one ``_bucket`` per bound and +Inf, ``_count``,
    ``_sum``, ``_created``; a mean gauge one sample per window, the latency gauge one per
    quantile and window; ``ragmon_window_samples`` at most one per window for each series of
    the rolling gauges.
    """
    m, s, j, t = max_series, len(SOURCES), len(JUDGES), 1 + len(STAGES)
    counter_folds = [1, 1, 1, 2, 1, 1, 1, s, s * ks]  # traces, errors, unlabelled, tokens, cost, unpriced, no usage, queries, hits
    latency_hist, score_hist = len(LATENCY_BUCKETS) + 4, len(SCORE_BUCKETS) + 4
    histograms = latency_hist * (m + t) + score_hist * ((m + s) + 3 * (m + s * ks) + len(GENERATION) * (m + j))
    mean_series = 4 * (m + s * ks) + (m + s) + 2 * (m + 1) + len(GENERATION) * (m + j)
    latency_series = m + t
    return (
        sum(2 * (m + f) for f in counter_folds)
        + histograms
        + windows * mean_series
        + 3 * windows * latency_series
        + windows * (mean_series + latency_series)
    )


def _metrics(**kwargs: object) -> tuple[RagMetrics, CollectorRegistry]:
    registry = CollectorRegistry(auto_describe=True)
    options: dict[str, object] = {"ks": KS, "windows": WINDOWS, "max_label_values": 100, "clock": lambda: 10.0, **kwargs}
    return RagMetrics(registry, **options), registry  # type: ignore[arg-type]


def _scores(i: int, model: str, sources: Iterable[str] = ("label",), priced: bool = True) -> RecordScores:
    at_k = {k: float(i % k == 0) for k in KS}
    retrieval = tuple(
        RetrievalScore(source, 1.0 / (1 + i % 3), at_k, {} if source == "judge" else at_k, at_k, {} if source == "judge" else at_k)
        for source in sources
    )
    usd = 1e-5 if priced else None
    call = PricedCall(model, "generation", 100, 20, usd, "table" if priced else "unpriced")
    return RecordScores(retrieval, False, (call,))


def _record(i: int, service: str, variant: str, error: bool = False) -> RagRecord:
    stages = {stage: 0.01 * (1 + n) for n, stage in enumerate(STAGES)}
    return RagRecord(
        trace_id=i.to_bytes(16, "big"), service=service, variant=variant, start_ns=0,
        end_ns=(1 + i % 7) * 10**8, error=error, stage_seconds=stages,  # type: ignore[arg-type]
    )


def _observe_all(metrics: RagMetrics, names: list[tuple[str, str, str]]) -> None:
    """Each (service, variant, model) once: every stage, every source, an error every 4th,
    every generation score under every (source, judge)."""
    for i, (service, variant, model) in enumerate(names):
        record = _record(i, service, variant, error=i % 4 == 0)
        metrics.observe(record, _scores(i, model, ("label", "golden", "probe"), priced=i % 5 != 0), 10.0)
        for source, judge in JUDGES:
            retrieval = _scores(i, model, ("judge",)).retrieval[0] if judge == "llm" and source == "judge" else None
            metrics.observe_judged(record, source, judge, {name: 0.5 for name in GENERATION}, retrieval, 10.0)


def test_label_limiter_cuts_values_then_caps_distinct_ones() -> None:
    limit = LabelLimiter(2, max_chars=5)
    assert limit("service", "abcdefgh") == "abcde"
    assert limit("service", "abcdeXYZ") == "abcde"  # the same cut value: not a new one
    assert limit("service", "x") == "x"
    assert limit("service", "y") == OTHER
    assert limit("variant", "123456") == "12345"
    assert (limit.truncated["service"], limit.truncated["variant"], limit.folded["service"]) == (2, 1, 1)
    with pytest.raises(ValueError):
        LabelLimiter(2, max_chars=0)


def test_long_label_values_from_traffic_are_cut_and_counted() -> None:
    metrics, registry = _metrics()
    record = _record(1, "s" * 1000, "v" * 300)
    metrics.observe(record, _scores(1, "m" * 500), 10.0)
    metrics.observe_judged(record, "judge", "lexical", {"faithfulness": 1.0}, None, 10.0)
    v = parse(generate_latest(registry).decode())
    values = {value for _, labels in v for _, value in labels}
    assert max(len(value) for value in values) == 128
    assert total(v, "ragmon_traces_total", service="s" * 128, variant="v" * 128) == 1
    assert total(v, "ragmon_tokens_total", model="m" * 128, token_type="input") == 100
    assert total(v, "ragmon_faithfulness_count", service="s" * 128) == 1
    for label, cut in (("service", 2), ("variant", 2), ("model", 1)):
        assert total(v, "ragmon_label_values_truncated_total", label=label) == cut


def test_each_family_folds_past_its_budget_and_totals_stay_exact() -> None:
    budget, n = 6, 30
    metrics, registry = _metrics(ks=(1, 3), windows=(300.0,), max_series=budget, max_label_values=1000)
    for i in range(n):
        record = _record(i, f"s{i}", "v", error=i % 3 == 0)
        metrics.observe(record, _scores(i, f"m{i}"), 10.0)
        metrics.observe_judged(record, "judge", "lexical", {"faithfulness": 0.25}, None, 10.0)
    v = parse(generate_latest(registry).decode())
    for name in ("ragmon_traces_total", "ragmon_retrieval_hits_total", "ragmon_request_duration_seconds_count",
                 "ragmon_tokens_total", "ragmon_retrieval_hit_rate", "ragmon_latency_seconds", "ragmon_faithfulness_count"):
        label_sets = {frozenset((k, x) for k, x in ls.items() if k not in ("quantile", "window")) for ls in series_of(v, name)}
        own = {ls for ls in label_sets if (("service", OTHER) not in ls and ("model", OTHER) not in ls)}
        kept = {frozenset((k, x) for k, x in ls if k not in ("service", "variant", "model")) for ls in label_sets}
        assert len(own) <= budget, name
        assert any(("service", OTHER) in ls for ls in label_sets), name
        assert len(label_sets) <= budget + len(kept), name
    # exact totals across own and other series
    assert total(v, "ragmon_traces_total") == n
    assert total(v, "ragmon_trace_errors_total") == 10
    assert total(v, "ragmon_retrieval_hits_total", k="3") == sum(i % 3 == 0 for i in range(n))
    assert total(v, "ragmon_request_duration_seconds_count", stage="generation") == n
    assert total(v, "ragmon_tokens_total", token_type="input") == 100 * n
    assert total(v, "ragmon_unpriced_tokens_total") == 0
    assert total(v, "ragmon_faithfulness_sum") == 0.25 * n
    assert total(v, "ragmon_window_samples", metric="error_ratio") == n
    assert total(v, "ragmon_window_samples", metric="latency_total") == n
    other = {"service": OTHER, "variant": OTHER, "window": "5m"}
    assert v[("ragmon_error_ratio", frozenset(other.items()))] == pytest.approx(8 / 24, abs=1e-12)
    # folded observations, per family: one label set per unit (traces) or two (hits: k = 1, 3)
    folded = {dict(ls)["metric"]: x for (name, ls), x in v.items() if name == "ragmon_series_folded_total"}
    assert folded["ragmon_traces_total"] == n - budget
    assert folded["ragmon_retrieval_hits_total"] == 2 * (n - budget // 2)
    assert folded["ragmon_retrieval_hit_rate"] == 2 * (n - budget // 2)
    assert folded["ragmon_request_duration_seconds"] == 5 * n - budget  # total + 4 stages per request
    assert folded["ragmon_faithfulness"] == folded["ragmon_faithfulness_mean"] == n - budget
    assert folded["ragmon_unpriced_tokens_total"] == 0


def _live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_bound_state_stops_growing_at_the_budget() -> None:
    """Past the budget a new (service, variant) costs nothing: the state is capped (a unit of
    bound state, its streams and series, is dozens of objects)."""
    metrics, _ = _metrics(max_series=20, max_label_values=10_000)
    names = [(f"svc-{a}", f"var-{b}", "gpt") for a in range(100) for b in range(20)]
    _observe_all(metrics, names[:1000])
    metrics.flush()
    before = _live_objects()
    _observe_all(metrics, names[1000:])
    metrics.flush()
    assert _live_objects() - before < 100
    for state in (metrics.requests.series, metrics.retrieval.series, metrics.calls.series, *metrics.judgements.streams.values(), metrics.feedback.streams):
        assert len(state) <= 20
    for family in (*metrics.counters, *metrics.histograms):
        assert len(family) <= 20 + 20, family.name


@pytest.mark.parametrize(
    ("services", "variants", "name_chars", "max_label_values"),
    [
        (100, 100, 0, None),  # the defaults: 100 services × 100 variants
        (1000, 1, 1000, None),  # 1000 services with 1000-character names (100 kept, cut)
        (1000, 1, 1000, 1000),  # the same, every name kept: the series budget binds
    ],
)
def test_a_scrape_stays_within_the_worst_case_with_exact_totals(
    services: int, variants: int, name_chars: int, max_label_values: int | None
) -> None:
    defaults = MetricsConfig()
    ks, windows = ScoringConfig().k, len(ScoringConfig().windows)
    limit = max_label_values or defaults.max_label_values
    metrics, registry = _metrics(
        ks=ks, max_series=defaults.max_series, max_label_chars=defaults.max_label_chars, max_label_values=limit
    )
    empty = len(parse(generate_latest(_metrics()[1]).decode()))
    pad = "x" * name_chars
    names = [(f"svc{a:04d}-{pad}", f"v{b}", f"model-{a % 7}") for a in range(services) for b in range(variants)]
    _observe_all(metrics, names)
    text = generate_latest(registry).decode()
    v = parse(text)
    bound = empty + worst_case_samples(defaults.max_series, len(ks), windows)
    assert len(v) <= bound
    assert max(len(value) for _, labels in v for _, value in labels) <= defaults.max_label_chars
    n = services * variants
    assert total(v, "ragmon_traces_total") == n
    assert total(v, "ragmon_trace_errors_total") == sum(i % 4 == 0 for i in range(n))
    assert total(v, "ragmon_retrieval_queries_total") == 4 * n  # label, golden, probe, judge
    assert total(v, "ragmon_retrieval_hits_total", source="golden", k="1") == n
    assert total(v, "ragmon_request_duration_seconds_count", stage="total") == n
    assert total(v, "ragmon_tokens_total", token_type="output") == 20 * n
    assert total(v, "ragmon_unpriced_tokens_total") == 120 * sum(i % 5 == 0 for i in range(n))
    assert total(v, "ragmon_answer_relevance_count") == len(JUDGES) * n
    assert total(v, "ragmon_window_samples", metric="error_ratio", window="1h") == n
    assert total(v, "ragmon_window_samples", metric="latency_rerank", window="5m") == n
    per_source: dict[str, float] = defaultdict(float)
    for (name, labels), x in v.items():
        if name == "ragmon_window_samples" and dict(labels).get("metric") == "retrieval_mrr" and dict(labels)["window"] == "5m":
            per_source[dict(labels)["source"]] += x
    assert per_source == {"label": n, "golden": n, "probe": n, "judge": n}
    if services * variants > defaults.max_series and limit >= services:
        assert total(v, "ragmon_series_folded_total") > 0
    if name_chars:
        assert total(v, "ragmon_label_values_truncated_total", label="service") == (1 + len(JUDGES)) * n


def test_the_worst_case_holds_when_every_family_is_full() -> None:
    """Small budget, every label saturated: the count reaches the bound's order, never past it."""
    budget = 8
    metrics, registry = _metrics(max_series=budget, max_label_values=1000)
    names = [(f"s{a}", f"v{b}", f"m{a}{b}") for a in range(12) for b in range(12)]
    _observe_all(metrics, names)
    v = parse(generate_latest(registry).decode())
    empty = len(parse(generate_latest(_metrics()[1]).decode()))
    bound = empty + worst_case_samples(budget, len(KS), len(WINDOWS))
    assert 0.5 * bound < len(v) <= bound
