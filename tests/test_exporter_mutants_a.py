"""RagMetrics' promises on /metrics beyond the families' shape (tests/test_metric_families.py):
window labels, the series budget of every family and its ``other`` series, label limits,
the build info, exemplar timestamps and the budget's validation."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from server_helpers import scrape

from ragmon import __version__
from ragmon.compiled import pipeline
from ragmon.export.exporter import RagMetrics
from ragmon.export.labels import OTHER
from ragmon.model import RagRecord
from ragmon.otlp.decode import DECODER
from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

WALL = 1_700_000_000.0
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def samples(registry: CollectorRegistry) -> list[Sample]:
    """Every sample line of the text exposition, repeats included."""
    out = []
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            match = _LINE.match(line)
            assert match is not None, line
            name, labels, value = match.groups()
            out.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return out


def select(got: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in got if s[0] == name and labels.items() <= s[1].items()]


def _metrics(**kwargs: object) -> tuple[RagMetrics, CollectorRegistry]:
    registry = CollectorRegistry(auto_describe=True)
    options: dict[str, object] = {
        "ks": (1, 3), "windows": (300.0,), "max_label_values": 100, "clock": lambda: 10.0, "wall": lambda: WALL, **kwargs,
    }
    return RagMetrics(registry, **options), registry  # type: ignore[arg-type]


def _record(i: int, service: str, variant: str = "v") -> RagRecord:
    return RagRecord(
        trace_id=i.to_bytes(16, "big"), service=service, variant=variant, start_ns=0, end_ns=2 * 10**8, error=True,
        stage_seconds={"retrieval": 0.05},
    )


def _scores(model: str, ks: tuple[int, ...] = (1, 3), calls: tuple[PricedCall, ...] | None = None) -> RecordScores:
    at_k = {k: 1.0 for k in ks}
    if calls is None:
        calls = (
            PricedCall(model, "generation", 100, 20, 1e-5, "table"),
            PricedCall(f"{model}-unpriced", "generation", 10, 2, None, "unpriced"),
            PricedCall(f"{model}-streamed", "generation", 0, 0, None, "no_usage"),
        )
    return RecordScores((RetrievalScore("label", 1.0, at_k, at_k, at_k, at_k),), True, calls)


def _window_labels(windows: tuple[float, ...]) -> list[str]:
    metrics, registry = _metrics(windows=windows)
    metrics.observe(_record(1, "s"), _scores("m"), 10.0)
    return [s[1]["window"] for s in select(samples(registry), "ragmon_error_ratio")]


def test_window_labels_name_each_window_in_its_largest_whole_unit() -> None:
    assert _window_labels((0.5, 30.0, 90.0, 5400.0, 7200.0)) == ["0.5s", "30s", "90s", "90m", "2h"]


def test_past_the_budget_series_fold_into_one_other_series_per_kept_label_set() -> None:
    metrics, registry = _metrics(max_series=1)
    for i, service in enumerate(("s1", "s2", "s3")):
        record = _record(i, service)
        metrics.observe(record, _scores(f"m{i}"), 10.0)
        metrics.observe_judged(record, "judge", "llm", {"faithfulness": 0.5}, None, 10.0)
    got = samples(registry)  # no label set twice in a family
    repeated = [key for key, n in Counter((n, tuple(sorted(ls.items()))) for n, ls, _ in got).items() if n > 1]
    assert repeated == []

    def per_series(name: str, *keys: str) -> dict[tuple[str, ...], float]:
        return {tuple(s[1][k] for k in keys): s[2] for s in select(got, name)}

    # each (service, variant, source) made one series per k: past the budget of 1, they all fold
    per_k = ("retrieval_hits_total", "retrieval_recall_count", "retrieval_precision_count", "retrieval_ndcg_count")
    for name in (f"ragmon_{family}" for family in per_k):
        assert per_series(name, "service", "k") == {(OTHER, "1"): 3, (OTHER, "3"): 3}, name
    assert per_series("ragmon_retrieval_reciprocal_rank_count", "service", "variant") == {("s1", "v"): 1, (OTHER, OTHER): 2}
    assert per_series("ragmon_unpriced_tokens_total", "model") == {("m0-unpriced",): 12, (OTHER,): 24}
    folded = {s[1]["metric"]: s[2] for s in select(got, "ragmon_series_folded_total")}
    assert [folded[f"ragmon_{name}"] for name in ("retrieval_hits_total", "retrieval_recall", "unpriced_tokens_total")] == [6, 6, 2]
    # rolling gauges: one ``other`` series per kept label set, its labels kept as they were
    hit_rate = select(got, "ragmon_retrieval_hit_rate", service=OTHER)
    assert sorted((s[1]["source"], s[1]["k"], s[1]["variant"], s[2]) for s in hit_rate) == [
        ("label", "1", OTHER, 1.0), ("label", "3", OTHER, 1.0),
    ]


def test_a_model_past_the_budget_counts_its_tokens_as_folded() -> None:
    """The first model made no token series (no usage reported): the second one, past the
    budget of bound models, still goes to ``other`` as a folded observation."""
    metrics, registry = _metrics(max_series=1)
    metrics.observe(_record(1, "s"), _scores("a", calls=(PricedCall("a", "generation", 0, 0, None, "no_usage"),)), 10.0)
    metrics.observe(_record(2, "s"), _scores("b", calls=(PricedCall("b", "generation", 100, 20, 1e-5, "table"),)), 10.0)
    got = samples(registry)
    assert [(s[1]["model"], s[1]["token_type"], s[2]) for s in select(got, "ragmon_tokens_total")] == [
        (OTHER, "input", 100), (OTHER, "output", 20),
    ]
    folded = {s[1]["metric"]: s[2] for s in select(got, "ragmon_series_folded_total")}
    assert (folded["ragmon_tokens_total"], folded["ragmon_cost_usd_total"]) == (2, 1)


def test_window_samples_count_each_series_once_whatever_its_k() -> None:
    metrics, registry = _metrics(ks=(1, 3, 5), windows=(300.0, 3600.0))
    metrics.observe(_record(1, "s"), _scores("m", ks=(1, 3, 5)), 10.0)
    metrics.observe(_record(2, "s"), _scores("m", ks=(1, 3, 5)), 10.0)
    hit = select(samples(registry), "ragmon_window_samples", metric="retrieval_hit_rate")
    assert [(s[1]["window"], s[2]) for s in hit] == [("5m", 2), ("1h", 2)]


def test_label_values_are_cut_and_capped_as_configured() -> None:
    metrics, registry = _metrics(max_label_values=2, max_label_chars=4)
    for i, service in enumerate(("alpha", "beta", "gamma")):
        metrics.observe(_record(i, service), _scores("m"), 10.0)
    got = samples(registry)
    assert sorted(s[1]["service"] for s in select(got, "ragmon_traces_total")) == ["alph", "beta", OTHER]
    assert [s[2] for s in select(got, "ragmon_label_values_truncated_total", label="service")] == [2]
    assert [s[2] for s in select(got, "ragmon_label_values_folded_total", label="service")] == [1]


def test_build_info_names_the_running_version() -> None:
    _, registry = _metrics()
    assert select(samples(registry), "ragmon_build_info") == [
        ("ragmon_build_info", {"version": __version__, "decoder": DECODER, "pipeline": pipeline()}, 1.0)
    ]


def test_histogram_exemplars_carry_the_wall_clock_time_of_their_flush() -> None:
    metrics, registry = _metrics()
    metrics.observe(_record(7, "s"), _scores("m"), 10.0)
    body, _ = scrape(registry, "application/openmetrics-text; version=1.0.0")
    text = body.decode()
    trace_id = (7).to_bytes(16, "big").hex()
    line = next(x for x in text.splitlines() if x.startswith('ragmon_request_duration_seconds_bucket{le="0.25"'))
    assert line.endswith(f'# {{trace_id="{trace_id}"}} 0.2 {WALL}')


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "5"])
def test_the_series_budget_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"max_series must be an integer >= 1, got {re.escape(repr(bad))}"):
        _metrics(max_series=bad)


def test_a_series_budget_of_one_is_allowed() -> None:
    metrics, _ = _metrics(max_series=1)
    assert metrics.max_series == 1
