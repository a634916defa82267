"""ragmon's Prometheus rules: promtool unit tests generated here, the committed files in sync.

Every alert gets three cases run by ``promtool test rules`` on the rule file rendered with a
shortened ``for:``: it fires (exact labels and annotations), it does not fire, and its guard
(too few observations) keeps it quiet. Inputs come from two replicas where it matters, so the
rules must sum across them. Without promtool they fail: the README's test command installs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragmon.ops.rules import (
    ALERTS,
    RUNBOOK_URL,
    Thresholds,
    format_duration,
    main,
    parse_duration,
    prometheus_rule,
    render_rules,
    rule_groups,
    to_yaml,
)

pytestmark = [pytest.mark.system, pytest.mark.same_in_both_builds]  # (tests/conftest.py: what each means)

ROOT = Path(__file__).resolve().parent.parent
RULE_FILE = ROOT / "deploy" / "prometheus" / "ragmon-rules.yml"
PROMETHEUS_RULE = ROOT / "deploy" / "kubernetes" / "prometheusrule.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
FOR_SCALE = 0.2
DAY = 1440  # minutes

PROMTOOL = shutil.which("promtool")


def _promtool() -> str:
    if PROMTOOL is None:
        pytest.fail("promtool is not installed: the README's test command installs it (apt-get install prometheus)")
    return PROMTOOL


# -- input series ----------------------------------------------------------------------------------


def counter(*segments: tuple[int, float], start_missing: int = 0, reset_at: int | None = None) -> str:
    """Per-minute samples of a counter: ``segments`` of (minutes, increase per minute), from 0.

    ``start_missing`` minutes without samples come first (the series appears later);
    ``reset_at`` (a sample index) restarts the counter from 0 there, as a replica restart does.
    """
    values: list[str] = ["_"] * start_missing
    value = 0.0
    index = start_missing
    values.append("0")
    for minutes, per_minute in segments:
        for _ in range(minutes):
            index += 1
            value = 0.0 if index == reset_at else value + per_minute
            values.append(repr(round(value, 9)))
    return " ".join(values)


def gauge(*segments: tuple[int, float | None]) -> str:
    """Per-minute samples of a gauge: (count, value) runs, ``None`` for missing samples."""
    return " ".join("_" if v is None else repr(v) for n, v in segments for _ in range(n))


def sel(metric: str, **labels: str) -> str:
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


SV = {"service": "rag-api", "variant": "B"}
SVS = {**SV, "source": "label"}


@dataclass
class Case:
    """One promtool test group: inputs, an evaluation time, the alerts expected then."""

    name: str
    series: dict[str, str]
    eval_minutes: int
    expected: list[tuple[dict[str, str], float]] = field(default_factory=list)
    """(labels without alertname and severity, value of the alert's expression)."""


def retrieval_counters(
    metric_hits: str, per_replica: float, before: float, after: float, *, regress: int = 60,
    history: int = DAY, k: str | None = "5", reset: bool = True,
) -> dict[str, str]:
    """Two replicas scoring ``per_replica`` retrievals a minute; the per-query value (hit or
    reciprocal rank) is ``before`` for ``history`` minutes, then ``after`` for ``regress``."""
    series: dict[str, str] = {}
    for instance in ("a", "b"):
        reset_at = history - 120 if reset and instance == "b" and history > 120 else None
        common = {**SVS, "job": "ragmon", "instance": instance}
        count = counter((history, per_replica), (regress, per_replica), reset_at=reset_at)
        hits = counter((history, per_replica * before), (regress, per_replica * after), reset_at=reset_at)
        if metric_hits == "ragmon_retrieval_hits_total":
            series[sel("ragmon_retrieval_queries_total", **common)] = count
            series[sel(metric_hits, **common, k=k or "5")] = hits
        else:
            series[sel(metric_hits + "_count", **common)] = count
            series[sel(metric_hits + "_sum", **common)] = hits
    return series


def faithfulness(per_replica: float, llm: tuple[float, float], lexical: tuple[float, float]) -> dict[str, str]:
    series: dict[str, str] = {}
    for instance in ("a", "b"):
        for judge, (before, after) in (("llm", llm), ("lexical", lexical)):
            labels = {**SVS, "judge": judge, "job": "ragmon", "instance": instance}
            series[sel("ragmon_faithfulness_count", **labels)] = counter((DAY, per_replica), (60, per_replica))
            series[sel("ragmon_faithfulness_sum", **labels)] = counter((DAY, per_replica * before), (60, per_replica * after))
    return series


def coherence(per_replica: float, before: float, after: float) -> dict[str, str]:
    series: dict[str, str] = {}
    for instance in ("a", "b"):
        labels = {**SVS, "judge": "llm", "job": "ragmon", "instance": instance}
        series[sel("ragmon_coherence_count", **labels)] = counter((DAY, per_replica), (60, per_replica))
        series[sel("ragmon_coherence_sum", **labels)] = counter((DAY, per_replica * before), (60, per_replica * after))
    return series


def toxic(at: dict[str, int | None], category: str = "harassment", minutes: int = 90) -> dict[str, str]:
    """Toxic-answer counters of two replicas for every category, 0 throughout except one toxic
    answer in ``category`` at minute ``at[instance]`` (``None``: none); ``at`` < 0: that
    replica's series appear only at minute ``-at``, already at 1 (the answer came before
    their first scrape)."""
    series: dict[str, str] = {}
    for instance, minute in at.items():
        for cat_ in ("hate", "harassment", "violence", "sexual", "self_harm", "profanity"):
            labels = {**SV, "category": cat_, "job": "ragmon", "instance": instance}
            if cat_ != category or minute is None:
                series[sel("ragmon_toxic_answers_total", **labels)] = counter((minutes, 0))
            elif minute < 0:
                series[sel("ragmon_toxic_answers_total", **labels)] = gauge((-minute, None), (minutes + 1 + minute, 1.0))
            else:
                series[sel("ragmon_toxic_answers_total", **labels)] = counter((minute, 0), (1, 1), (minutes - minute - 1, 0))
    return series


def latency(per_replica: float, bucket: str, stage: str = "total") -> dict[str, str]:
    """Every request of two replicas in the bucket whose upper bound is ``bucket``."""
    series: dict[str, str] = {}
    bounds = ["0.5", "1", "5", "10", "+Inf"]
    for instance in ("a", "b"):
        labels = {**SV, "stage": stage, "job": "ragmon", "instance": instance}
        for le in bounds:
            rate = per_replica if bounds.index(le) >= bounds.index(bucket) else 0.0
            series[sel("ragmon_request_duration_seconds_bucket", **labels, le=le)] = counter((90, rate))
        series[sel("ragmon_request_duration_seconds_count", **labels)] = counter((90, per_replica))
    return series


def per_replica(metric: str, rates: dict[str, float], *, minutes: int = 90, **labels: str) -> dict[str, str]:
    """One counter per replica (``rates``: instance -> increase per minute)."""
    return {
        sel(metric, **labels, job="ragmon", instance=instance): counter((minutes, rate))
        for instance, rate in rates.items()
    }


def judge(outcomes: dict[str, float]) -> dict[str, str]:
    series: dict[str, str] = {}
    for outcome, rate in outcomes.items():
        series.update(per_replica("ragmon_judge_requests_total", {"a": rate, "b": rate}, evaluator="faithfulness", outcome=outcome))
    return series


DAY_LONG = ("RagHitRateDrop", "RagMrrDrop", "RagFaithfulnessDrop", "RagCoherenceDrop")
NOW = DAY + 60
"""Evaluation time of the drop cases: a day of history, then an hour of regression."""

CASES: dict[str, list[Case]] = {
    "RagHitRateDrop": [
        Case("fires", retrieval_counters("ragmon_retrieval_hits_total", 5, 0.9, 0.6)
             | retrieval_counters("ragmon_retrieval_hits_total", 5, 0.5, 0.5, k="1"),
             NOW, [({**SVS, "k": "5"}, 0.6)]),
        Case("does_not_fire", retrieval_counters("ragmon_retrieval_hits_total", 5, 0.9, 0.85), NOW),
        Case("guard", retrieval_counters("ragmon_retrieval_hits_total", 1.5, 0.9, 0.6), NOW),
        Case("baseline_guard", retrieval_counters("ragmon_retrieval_hits_total", 2.5, 0.9, 0.3, history=15, regress=30), 45),
    ],
    "RagMrrDrop": [
        Case("fires", retrieval_counters("ragmon_retrieval_reciprocal_rank", 5, 0.7, 0.4), NOW, [(SVS, 0.4)]),
        Case("does_not_fire", retrieval_counters("ragmon_retrieval_reciprocal_rank", 5, 0.7, 0.65), NOW),
        Case("guard", retrieval_counters("ragmon_retrieval_reciprocal_rank", 1.5, 0.7, 0.4), NOW),
        Case("baseline_guard", retrieval_counters("ragmon_retrieval_reciprocal_rank", 2.5, 0.7, 0.2, history=15, regress=30), 45),
    ],
    "RagFaithfulnessDrop": [
        Case("fires", faithfulness(2, llm=(0.9, 0.6), lexical=(0.8, 0.3)), NOW, [({**SVS, "judge": "llm"}, 0.6)]),
        Case("does_not_fire_lexical", faithfulness(2, llm=(0.9, 0.9), lexical=(0.8, 0.3)), NOW),
        Case("guard", faithfulness(0.5, llm=(0.9, 0.6), lexical=(0.8, 0.8)), NOW),
    ],
    "RagCoherenceDrop": [
        Case("fires", coherence(2, 0.95, 0.7), NOW, [({**SVS, "judge": "llm"}, 0.7)]),
        Case("does_not_fire", coherence(2, 0.95, 0.9), NOW),
        Case("guard", coherence(0.5, 0.95, 0.5), NOW),
    ],
    "RagToxicAnswers": [
        Case("fires", toxic({"a": None, "b": 80}), 90, [({**SV, "category": "harassment"}, 1.0)]),
        Case("fires_new_series", toxic({"a": None, "b": -85}, category="violence"), 90,
             [({**SV, "category": "violence"}, 1.0)]),
        Case("does_not_fire", toxic({"a": None, "b": None}), 90),
        Case("guard_outside_window", toxic({"a": 20, "b": None}), 90),
    ],
    "RagLatencyP95High": [
        Case("fires", latency(5, "10"), 90, [({**SV, "stage": "total"}, 9.75)]),
        Case("does_not_fire", latency(5, "1") | latency(5, "10", stage="retrieval"), 90),
        Case("guard", latency(1.5, "10"), 90),
    ],
    "RagErrorRatioHigh": [
        Case("fires", per_replica("ragmon_traces_total", {"a": 5, "b": 5}, **SV)
             | per_replica("ragmon_trace_errors_total", {"a": 1, "b": 1}, **SV), 90, [(SV, 0.2)]),
        Case("does_not_fire", per_replica("ragmon_traces_total", {"a": 5, "b": 5}, **SV)
             | per_replica("ragmon_trace_errors_total", {"b": 0.1}, **SV), 90),
        Case("guard", per_replica("ragmon_traces_total", {"a": 1, "b": 1}, **SV)
             | per_replica("ragmon_trace_errors_total", {"a": 0.5, "b": 0.5}, **SV), 90),
    ],
    "RagCostBurnHigh": [
        Case("fires", per_replica("ragmon_cost_usd_total", {"a": 0.125, "b": 0.125}, service="rag-api", model="m1")
             | per_replica("ragmon_cost_usd_total", {"a": 0.125, "b": 0.125}, service="rag-api", model="m2")
             | per_replica("ragmon_traces_total", {"a": 5, "b": 5}, **SV), 90, [({"service": "rag-api"}, 30.0)]),
        Case("does_not_fire", per_replica("ragmon_cost_usd_total", {"a": 0.05, "b": 0.05}, service="rag-api", model="m1")
             | per_replica("ragmon_traces_total", {"a": 5, "b": 5}, **SV), 90),
        Case("guard", per_replica("ragmon_cost_usd_total", {"a": 0.25, "b": 0.25}, service="rag-api", model="m1")
             | per_replica("ragmon_traces_total", {"a": 0.02, "b": 0.02}, **SV), 90),
    ],
    "RagmonJudgeFailing": [
        Case("fires", judge({"ok": 2, "timeout": 1.5, "error": 0.5, "skipped_rate": 20}), 90,
             [({"job": "ragmon", "evaluator": "faithfulness"}, 0.5)]),
        Case("does_not_fire", judge({"ok": 5, "error": 0.05, "skipped_budget": 50, "dropped": 1}), 90),
        Case("guard", judge({"ok": 0.1, "timeout": 0.2}), 90),
    ],
    "RagmonDroppingData": [
        Case("fires", per_replica("ragmon_spans_rejected_total", {"a": 20, "b": 10}, protocol="http", reason="overloaded")
             | per_replica("ragmon_traces_evicted_total", {"a": 0, "b": 0}), 60,
             [({"job": "ragmon", "loss": "spans_refused"}, 150.0)]),
        Case("does_not_fire", per_replica("ragmon_spans_rejected_total", {"a": 100}, protocol="http", reason="shutting_down")
             | per_replica("ragmon_spans_dropped_total", {"a": 50}, reason="duplicate")
             | per_replica("ragmon_spans_dropped_total", {"a": 0}, reason="trace_full"), 60),
        Case("guard", per_replica("ragmon_spans_rejected_total", {"a": 1}, protocol="grpc", reason="overloaded"), 60),
    ],
    "RagmonDown": [
        Case("fires", {sel("up", job="ragmon", instance="a"): gauge((30, 1), (30, 0)),
                       sel("up", job="ragmon", instance="b"): gauge((60, 1))},
             59, [({"job": "ragmon", "instance": "a"}, 0.0)]),
        Case("does_not_fire", {sel("up", job="ragmon", instance="a"): gauge((60, 1)),
                               sel("up", job="node", instance="n"): gauge((60, 0))}, 59),
        Case("guard", {sel("up", job="ragmon", instance="c"): gauge((58, None), (2, 0))}, 59),
        Case("fires_new_target", {sel("up", job="ragmon", instance="c"): gauge((57, None), (4, 0))},
             60, [({"job": "ragmon", "instance": "c"}, 0.0)]),
    ],
    "RagmonTargetsMissing": [
        Case("fires", {sel("up", job="node", instance="n"): gauge((30, 1))}, 20, [({}, 1.0)]),
        Case("does_not_fire", {sel("up", job="default/ragmon", instance="a"): gauge((30, 1))}, 20),
        Case("guard", {sel("up", job="ragmon", instance="a"): gauge((15, 1))}, 20),
        Case("fires_vanished", {sel("up", job="ragmon", instance="a"): gauge((5, 1))}, 20, [({}, 1.0)]),
    ],
}

FLOORS = Thresholds(hit_rate_floor=0.5, mrr_floor=0.5, faithfulness_floor=0.5)
FLOOR_CASES: dict[str, list[Case]] = {
    # no baseline yet (a new service): only the floor can fire, still behind the guard
    "RagHitRateDrop": [
        Case("floor_fires", retrieval_counters("ragmon_retrieval_hits_total", 2.5, 0.9, 0.3, history=15, regress=30),
             45, [({**SVS, "k": "5"}, 0.3)]),
        Case("floor_guard", retrieval_counters("ragmon_retrieval_hits_total", 1, 0.9, 0.3, history=15, regress=30), 45),
    ],
    "RagMrrDrop": [
        Case("floor_fires", retrieval_counters("ragmon_retrieval_reciprocal_rank", 2.5, 0.7, 0.2, history=15, regress=30),
             45, [(SVS, 0.2)]),
        Case("floor_does_not_fire", retrieval_counters("ragmon_retrieval_reciprocal_rank", 2.5, 0.7, 0.6, history=15, regress=30), 45),
    ],
}


# -- template expansion (the subset the rules use) ---------------------------------------------

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """Prometheus' expansion of the template constructs ragmon's rules use (others fail)."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr.startswith("$labels."):
            return labels[expr.removeprefix("$labels.")]
        if expr == "$value | humanizePercentage":
            return f"{value * 100:.4g}%"
        if expr == '$value | printf "%.3g"':
            return f"{value:.3g}"
        raise AssertionError(f"template construct not covered by the tests: {{{{ {expr} }}}}")

    return _TEMPLATE.sub(one, template)


def _alert_rules(groups: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups["groups"] for r in g["rules"] if "alert" in r}


def promtool_tests(alert: str, cases: Sequence[Case], groups: dict[str, Any]) -> dict[str, Any]:
    rule = _alert_rules(groups)[alert]
    tests = []
    for case in cases:
        exp_alerts = []
        for labels, value in case.expected:
            all_labels = {**labels, **rule["labels"], "alertname": alert}
            exp_alerts.append({
                "exp_labels": {k: v for k, v in all_labels.items() if k != "alertname"},
                "exp_annotations": {k: expand(v, all_labels, value) for k, v in rule["annotations"].items()},
            })
        tests.append({
            "name": f"{alert}/{case.name}",
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [{"eval_time": f"{case.eval_minutes}m", "alertname": alert, "exp_alerts": exp_alerts}],
        })
    # Rules with a day-long baseline are evaluated every 5 minutes: 5 times fewer steps over the
    # day of history; every other alert each minute, as its scrape-level cases need.
    interval = "5m" if alert in DAY_LONG else "1m"
    return {"rule_files": ["rules.yml"], "evaluation_interval": interval, "tests": tests}


def run_promtool(tmp_path: Path, alert: str, cases: Sequence[Case], thresholds: Thresholds | None = None) -> None:
    promtool = _promtool()
    (tmp_path / "rules.yml").write_text(render_rules(FOR_SCALE, thresholds))
    groups = rule_groups(FOR_SCALE, thresholds)
    (tmp_path / "test.yml").write_text(to_yaml(promtool_tests(alert, cases, groups)))
    result = subprocess.run(
        [promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, f"promtool test rules failed for {alert}:\n{result.stdout}\n{result.stderr}"


# -- tests ---------------------------------------------------------------------------------------


def test_every_alert_has_fires_not_fires_and_guard_cases() -> None:
    assert set(CASES) == set(ALERTS) == set(_alert_rules(rule_groups()))
    for alert, cases in CASES.items():
        kinds = {c.name.split("_")[0] for c in cases}
        assert {"fires", "does", "guard"} <= kinds, alert
        assert any(c.expected for c in cases) and any(not c.expected for c in cases)


@pytest.mark.parametrize("alert", sorted(CASES))
def test_promtool_unit_tests(tmp_path: Path, alert: str) -> None:
    run_promtool(tmp_path, alert, CASES[alert])


@pytest.mark.parametrize("alert", sorted(FLOOR_CASES))
def test_promtool_floors(tmp_path: Path, alert: str) -> None:
    run_promtool(tmp_path, alert, FLOOR_CASES[alert], FLOORS)


LOW_GUARDS = Thresholds(
    min_queries=1, min_judged=1, min_requests=1, min_cost_requests=1, min_judge_requests=1, min_lost_per_5m=1
)
GUARD_CASES = [
    (alert, case) for alert, cases in CASES.items() for case in cases
    if "guard" in case.name and alert not in ("RagmonDown", "RagmonTargetsMissing", "RagToxicAnswers")
]


@pytest.mark.parametrize(("alert", "case"), GUARD_CASES, ids=[f"{a}-{c.name}" for a, c in GUARD_CASES])
def test_guard_is_what_keeps_the_guard_case_quiet(tmp_path: Path, alert: str, case: Case) -> None:
    """With every minimum lowered to 1, the guard case's alert fires (so promtool, expecting
    none, fails naming it): the guard, not the data, keeps it quiet."""
    promtool = _promtool()
    (tmp_path / "rules.yml").write_text(render_rules(FOR_SCALE, LOW_GUARDS))
    (tmp_path / "test.yml").write_text(to_yaml(promtool_tests(alert, [case], rule_groups(FOR_SCALE, LOW_GUARDS))))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "got:[" in output, output
    assert f'alertname="{alert}"' in output.split("got:[", 1)[1], output


@pytest.mark.parametrize("path", [RULE_FILE], ids=["ragmon-rules.yml"])
def test_committed_rule_file_is_generated_and_valid(tmp_path: Path, path: Path) -> None:
    assert path.read_text() == render_rules(), "regenerate: python -m ragmon.ops.rules > deploy/prometheus/ragmon-rules.yml"
    result = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_prometheus_rule_is_generated_and_in_sync(tmp_path: Path) -> None:
    text = PROMETHEUS_RULE.read_text()
    assert text == render_rules(kubernetes=True), (
        "regenerate: python -m ragmon.ops.rules --kubernetes > deploy/kubernetes/prometheusrule.yaml"
    )
    obj = yaml.safe_load(text)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["spec"] == yaml.safe_load(RULE_FILE.read_text())
    (tmp_path / "spec.yml").write_text(to_yaml(obj["spec"]))
    result = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "spec.yml")], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_yaml_reads_back_as_the_data() -> None:
    for scale in (1.0, FOR_SCALE, 0.0):
        assert yaml.safe_load(render_rules(scale)) == rule_groups(scale)
        assert yaml.safe_load(render_rules(scale, kubernetes=True)) == prometheus_rule(scale)
    awkward = {"yes": "no", "n": ["1", "1.5", "", "a: b", "#x", "x\n  y", " lead\nx", "tail\n", "é", "null"],
               "e": {}, "l": [], "t": True, "f": 0.25, "i": -3, "z": None, "nested": [[1], [], {"a": [{"b": "c\nd"}]}]}
    assert yaml.safe_load(to_yaml(awkward)) == awkward


def test_for_scale_scales_every_for_and_nothing_else() -> None:
    base, short = _alert_rules(rule_groups()), _alert_rules(rule_groups(0.1))
    for name, rule in base.items():
        assert parse_duration(short[name]["for"]) == pytest.approx(parse_duration(rule["for"]) * 0.1)
        assert {k: v for k, v in short[name].items() if k != "for"} == {k: v for k, v in rule.items() if k != "for"}
    assert [r for g in rule_groups(1.0)["groups"] for r in g["rules"] if "record" in r] == [
        r for g in rule_groups(0.1)["groups"] for r in g["rules"] if "record" in r
    ]
    with pytest.raises(ValueError, match="for_scale"):
        rule_groups(-1)


def test_durations() -> None:
    assert [format_duration(s) for s in (0, 0.9, 90, 900, 5400, 86400)] == ["0s", "900ms", "1m30s", "15m", "1h30m", "24h"]
    assert parse_duration("1h30m") == 5400 and parse_duration("1d") == 86400
    with pytest.raises(ValueError):
        parse_duration("30 minutes")


def test_alerts_carry_severity_annotations_and_runbook_sections() -> None:
    runbook = RUNBOOK.read_text()
    anchors = {_github_anchor(h) for h in re.findall(r"^#+ (.+)$", runbook, flags=re.MULTILINE)}
    for name, rule in _alert_rules(rule_groups()).items():
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOK_URL}#{name.lower()}" and name.lower() in anchors, name
    own = _alert_rules(rule_groups(thresholds=Thresholds(runbook_url="https://wiki.example.com/ragmon")))
    assert {r["annotations"]["runbook_url"] for r in own.values()} == {f"https://wiki.example.com/ragmon#{n.lower()}" for n in own}
    with pytest.raises(ValueError, match="runbook_url"):
        Thresholds(runbook_url="docs/runbook.md")


def _github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_thresholds_are_parameters() -> None:
    t = Thresholds(hit_rate_drop=0.05, min_queries=500, latency_p95_seconds=2.5, faithfulness_skip_judges=())
    rules = _alert_rules(rule_groups(thresholds=t))
    assert "- 0.05)" in rules["RagHitRateDrop"]["expr"] and ">= 500" in rules["RagHitRateDrop"]["expr"]
    assert "> 2.5" in rules["RagLatencyP95High"]["expr"]
    assert "lexical" not in rules["RagFaithfulnessDrop"]["expr"]
    assert 'judge!~"lexical"' in _alert_rules(rule_groups())["RagFaithfulnessDrop"]["expr"]
    for bad in ({"hit_rate_drop": 0}, {"min_queries": 0}, {"window": "30 min"}, {"mrr_floor": 2.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Thresholds(**bad)  # type: ignore[arg-type]


def test_other_windows_and_regexes_are_valid_promql(tmp_path: Path) -> None:
    t = Thresholds(window="5m", baseline="2h", job_regex=r"rag\w*-mon|ragmon", faithfulness_skip_judges=("lexical", "app"))
    groups = rule_groups(0.5, t)
    assert [g["name"] for g in groups["groups"]] == ["ragmon.alerts"]  # the 5m rules are the alert window's
    (tmp_path / "rules.yml").write_text(render_rules(0.5, t))
    result = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'up{job=~"rag\\\\w*-mon|ragmon"}' in _alert_rules(groups)["RagmonDown"]["expr"]


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == render_rules()
    assert main(["--kubernetes", "--for-scale", "0.5", "--set", "hit_rate_drop=0.2", "--set", "hit_rate_floor=0.4"]) == 0
    expected = render_rules(0.5, Thresholds(hit_rate_drop=0.2, hit_rate_floor=0.4), kubernetes=True)
    assert capsys.readouterr().out == expected
    assert main(["--kubernetes", "--label", "release=kube-prometheus-stack"]) == 0
    labels = yaml.safe_load(capsys.readouterr().out)["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/name": "ragmon", "app.kubernetes.io/component": "alerting", "release": "kube-prometheus-stack"}
    assert main(["--set", "nope=1"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["--set", "min_queries=ten"]) == 2
    assert main(["--for-scale", "-1"]) == 2


def test_cases_cover_replicas() -> None:
    """Quality cases feed two replicas (instance a and b), one with a counter reset."""
    fires = next(c for c in CASES["RagHitRateDrop"] if c.name == "fires")
    assert {re.search(r'instance="(\w)"', s).group(1) for s in fires.series} == {"a", "b"}  # type: ignore[union-attr]


def test_counter_helper() -> None:
    assert counter((2, 1.5), (1, 0.5)) == "0 1.5 3.0 3.5"
    assert counter((3, 1.0), reset_at=2) == "0 1.0 0.0 1.0"
    assert counter((1, 1.0), start_missing=2).split() == ["_", "_", "0", "1.0"]
