"""The status page's estimate of the alerts that hold (``ragmon.export.alerts.holding``): the
generated rules' thresholds and minimum observations, on ragmon's own windows."""

from __future__ import annotations

import math

import pytest

from ragmon import catalogue as cat
from ragmon.export.alerts import Thresholds, headline_k, holding
from ragmon.export.windows import WindowReading

HIT = cat.RETRIEVAL_HIT_RATE.name
MRR = cat.RETRIEVAL_MRR.name
FAITH = cat.SCORE_MEANS["faithfulness"].name
T = Thresholds()


def _pair(gauge: str, now: float, base: float, samples: int = 100, detail: str = "5", source: str = "label") -> list[WindowReading[tuple[str, str, str, str, str]]]:
    key = (gauge, "svc", "B", source, detail)
    return [WindowReading(key, 300.0, samples, now), WindowReading(key, 3600.0, samples, base)]


@pytest.mark.parametrize(("now", "fires"), [
    (0.69, True), (math.nextafter(0.80 - 0.10, 0.0), True), (0.80 - 0.10, False), (0.75, False),
])
def test_a_drop_fires_only_past_the_rules_drop(now: float, fires: bool) -> None:
    """The rules' condition, ``current < baseline - drop`` in float64 as Prometheus computes it:
    exactly the drop does not fire."""
    found = holding({HIT: _pair(HIT, now, 0.80)}, [], T, 5)
    assert [h.alert for h in found] == (["RagHitRateDrop"] if fires else [])
    if now == 0.69:
        [h] = found
        assert (h.severity, h.service, h.variant) == ("critical", "svc", "B")
        assert h.why == "hit rate@5 (label) 0.69 over the last 5m against 0.80 over 1h: a drop of 0.11 > 0.1"


def test_too_few_observations_in_either_window_hold_nothing() -> None:
    assert holding({HIT: _pair(HIT, 0.1, 0.9, samples=T.min_queries - 1)}, [], T, 5) == []
    thin_baseline = _pair(HIT, 0.1, 0.9, samples=T.min_queries)
    thin_baseline[1] = WindowReading(thin_baseline[1].key, 3600.0, T.min_queries - 1, 0.9)
    assert holding({HIT: thin_baseline}, [], T, 5) == []
    assert [h.alert for h in holding({HIT: _pair(HIT, 0.1, 0.9, samples=T.min_queries)}, [], T, 5)] == ["RagHitRateDrop"]


def test_only_the_headline_k_and_not_the_lexical_estimate() -> None:
    assert holding({HIT: _pair(HIT, 0.1, 0.9, detail="10")}, [], T, 5) == []
    assert holding({FAITH: _pair(FAITH, 0.1, 0.9, samples=T.min_judged, detail="lexical", source="judge")}, [], T, 5) == []
    [h] = holding({FAITH: _pair(FAITH, 0.1, 0.9, samples=T.min_judged, detail="llm", source="judge")}, [], T, 5)
    assert h.alert == "RagFaithfulnessDrop" and h.why.startswith("faithfulness (judge, llm) 0.10")
    [h] = holding({MRR: _pair(MRR, 0.1, 0.9, detail="")}, [], T, 5)
    assert h.alert == "RagMrrDrop"


def test_a_floor_fires_whatever_the_baseline() -> None:
    floored = Thresholds(hit_rate_floor=0.5)
    [h] = holding({HIT: _pair(HIT, 0.45, 0.45)}, [], floored, 5)
    assert h.why == "hit rate@5 (label) 0.45 over the last 5m, below its floor 0.5"


def test_latency_errors_and_cost_on_their_thresholds() -> None:
    latency = [
        WindowReading(("svc", "B", "total"), 300.0, 100, None, {0.5: 1.0, 0.95: 5.5, 0.99: 6.0}),
        WindowReading(("svc", "A", "total"), 300.0, 100, None, {0.5: 1.0, 0.95: 5.0, 0.99: 6.0}),  # at the threshold
        WindowReading(("svc", "C", "total"), 300.0, 99, None, {0.5: 1.0, 0.95: 9.0, 0.99: 9.0}),  # too few
    ]
    errors = [WindowReading((cat.ERROR_RATIO.name, "svc", "B", "", ""), 300.0, 100, 0.06),
              WindowReading((cat.ERROR_RATIO.name, "svc", "A", "", ""), 300.0, 100, 0.05)]
    cost = [WindowReading((cat.COST_USD_PER_REQUEST.name, "svc", "B", "", ""), 3600.0, 1000, 0.011),  # 11 USD/hour
            WindowReading((cat.COST_USD_PER_REQUEST.name, "svc", "A", "", ""), 3600.0, 1000, 0.010)]
    found = holding({cat.ERROR_RATIO.name: errors, cat.COST_USD_PER_REQUEST.name: cost}, latency, T, 5)
    assert [(h.alert, h.variant) for h in found] == [
        ("RagLatencyP95High", "B"), ("RagErrorRatioHigh", "B"), ("RagCostBurnHigh", "B")]
    assert found[2].why == "model cost 11.00 USD/hour over the last 1h > 10"


def test_the_headline_k_is_the_demos() -> None:
    assert headline_k((1, 3, 5, 10)) == 5 and headline_k((1, 3, 10)) == 10
