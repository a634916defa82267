"""Prometheus recording and alert rules for ragmon, generated from one definition.

``rule_groups`` gives the rule file as data, ``render_rules`` as YAML (what
``deploy/prometheus/ragmon-rules.yml`` holds) and ``prometheus_rule`` the same groups as a
Kubernetes ``PrometheusRule`` (``deploy/kubernetes/prometheusrule.yaml``). Every rule reads the
aggregatable series (counters and histograms, summed across replicas), never the rolling
gauges, which are one replica's view. Quality alerts compare the last ``window`` with a
``baseline`` window that ends where the current one starts, and fire only with enough
observations in both. ``docs/runbook.md`` has a section per alert.

``python -m ragmon.ops.rules [--for-scale X] [--kubernetes] [--set NAME=VALUE]…`` prints the YAML;
``--for-scale`` multiplies every alert's ``for:`` (tests shorten them this way).

The YAML is PyYAML's (its safe dumper, configured for block style and literal multi-line strings).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence

from typing import Any

import yaml

from ragmon import catalogue as cat
from ragmon.export.alerts import ALERTS, RUNBOOK_URL, Thresholds, parse_duration

__all__ = [
    "ALERTS",
    "RUNBOOK_URL",
    "Thresholds",
    "format_duration",
    "main",
    "parse_duration",
    "prometheus_rule",
    "render_rules",
    "rule_groups",
    "to_yaml",
]

def format_duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds`` (rounded to the millisecond): ``15m``, ``1m30s``, ``0s``."""
    ms = round(seconds * 1000)
    if ms < 0:
        raise ValueError(f"negative duration: {seconds}")
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


# -- PromQL building blocks ------------------------------------------------------------------------

SV = "service, variant"
SVS = "service, variant, source"
SVSK = "service, variant, source, k"
SVSJ = "service, variant, source, judge"
SVC = "service, variant, category"
JOB_EVALUATOR = "job, evaluator"
_FAILED = "error|timeout|invalid"
_ATTEMPTED = "ok|error|timeout|invalid"

_PCT = "{{ $value | humanizePercentage }}"
_NUM = '{{ $value | printf "%.3g" }}'


def _l(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def _sel(metric: str, match: str) -> str:
    return f"{metric}{{{match}}}" if match else metric


def _agg(fn: str, metric: str, window: str, by: str, match: str = "", offset: str = "") -> str:
    """``sum by (by) (fn(metric{match}[window] offset …))``."""
    off = f" offset {offset}" if offset else ""
    return f"sum by ({by}) ({fn}({_sel(metric, match)}[{window}]{off}))"


def _num(value: float) -> str:
    """A number as PromQL and people write it: ``5``, ``0.1``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def _ratio(numerator: str, denominator: str, match_on: str = "") -> str:
    """``numerator / (denominator > 0)``: no series (not NaN) where nothing was observed."""
    op = f"/ {match_on}" if match_on else "/"
    return f"{numerator}\n  {op}\n({denominator} > 0)"


def _skip(judges: Sequence[str]) -> str:
    return f'judge!~"{"|".join(judges)}"' if judges else ""


def _recording(t: Thresholds, windows: Sequence[str], *, alerting: bool) -> list[dict[str, Any]]:
    """Recording rules: ratios and quantiles over each of ``windows``; with ``alerting``, also
    the baselines and the data-loss rates the alerts read."""
    rules: list[dict[str, Any]] = []

    def record(name: str, expr: str, labels: Mapping[str, str] | None = None) -> None:
        rule: dict[str, Any] = {"record": name, "expr": expr}
        if labels:
            rule["labels"] = dict(labels)
        rules.append(rule)

    for w in windows:
        traces = _agg("rate", cat.TRACES.total, w, SV)
        record(f"ragmon:requests:rate{w}", traces)
        errors = _agg("rate", cat.TRACE_ERRORS.total, w, SV)
        record(f"ragmon:trace_error:ratio_rate{w}", _ratio(f"({errors}\n or 0 * {traces})", traces))
        record(
            f"ragmon:request_duration_seconds:p95_rate{w}",
            f"histogram_quantile(0.95, {_agg('rate', cat.REQUEST_DURATION.bucket, w, 'le, ' + SV + ', stage')})",
        )
        record(f"ragmon:retrieval_queries:rate{w}", _agg("rate", cat.RETRIEVAL_QUERIES.total, w, SVS))
        record(
            f"ragmon:retrieval_hit_rate:ratio_rate{w}",
            _ratio(
                _agg("rate", cat.RETRIEVAL_HITS.total, w, SVSK),
                _agg("rate", cat.RETRIEVAL_QUERIES.total, w, SVS),
                "ignoring (k) group_left ()",
            ),
        )
        record(
            f"ragmon:retrieval_mrr:ratio_rate{w}",
            _ratio(
                _agg("rate", cat.RETRIEVAL_RECIPROCAL_RANK.sum, w, SVS),
                _agg("rate", cat.RETRIEVAL_RECIPROCAL_RANK.count, w, SVS),
            ),
        )
        record(
            f"ragmon:faithfulness:ratio_rate{w}",
            _ratio(_agg("rate", cat.FAITHFULNESS.sum, w, SVSJ), _agg("rate", cat.FAITHFULNESS.count, w, SVSJ)),
        )
        record(
            f"ragmon:coherence:ratio_rate{w}",
            _ratio(_agg("rate", cat.COHERENCE.sum, w, SVSJ), _agg("rate", cat.COHERENCE.count, w, SVSJ)),
        )
        record(f"ragmon:cost_usd:rate{w}", _agg("rate", cat.COST_USD.total, w, "service, model"))
        failed = _agg("rate", cat.JUDGE_REQUESTS.total, w, JOB_EVALUATOR, f'outcome=~"{_FAILED}"')
        attempted = _agg("rate", cat.JUDGE_REQUESTS.total, w, JOB_EVALUATOR, f'outcome=~"{_ATTEMPTED}"')
        record(f"ragmon:judge_failure:ratio_rate{w}", _ratio(f"({failed}\n or 0 * {attempted})", attempted))

    if not alerting:
        return rules
    b, w = t.baseline, t.window
    record(
        f"ragmon:retrieval_hit_rate:ratio_rate{b}_offset{w}",
        _ratio(
            _agg("rate", cat.RETRIEVAL_HITS.total, b, SVSK, offset=w),
            _agg("rate", cat.RETRIEVAL_QUERIES.total, b, SVS, offset=w),
            "ignoring (k) group_left ()",
        ),
    )
    record(
        f"ragmon:retrieval_mrr:ratio_rate{b}_offset{w}",
        _ratio(
            _agg("rate", cat.RETRIEVAL_RECIPROCAL_RANK.sum, b, SVS, offset=w),
            _agg("rate", cat.RETRIEVAL_RECIPROCAL_RANK.count, b, SVS, offset=w),
        ),
    )
    record(
        f"ragmon:faithfulness:ratio_rate{b}_offset{w}",
        _ratio(
            _agg("rate", cat.FAITHFULNESS.sum, b, SVSJ, offset=w),
            _agg("rate", cat.FAITHFULNESS.count, b, SVSJ, offset=w),
        ),
    )
    record(
        f"ragmon:coherence:ratio_rate{b}_offset{w}",
        _ratio(
            _agg("rate", cat.COHERENCE.sum, b, SVSJ, offset=w),
            _agg("rate", cat.COHERENCE.count, b, SVSJ, offset=w),
        ),
    )

    for loss, metric, match in _LOSSES:
        record("ragmon:data_lost:rate5m", _agg("rate", metric, "5m", "job", match), {"loss": loss})
    return rules


_LOSSES: tuple[tuple[str, str, str], ...] = (
    ("spans_refused", cat.SPANS_REJECTED.total, 'reason="overloaded"'),
    ("spans_invalid", cat.SPANS_REJECTED.total, 'reason!~"overloaded|shutting_down"'),
    ("requests_rejected", cat.REQUESTS_REJECTED.total, ""),
    ("spans_dropped", cat.SPANS_DROPPED.total, 'reason!="duplicate"'),
    ("traces_evicted", cat.TRACES_EVICTED.total, ""),
    ("traces_unscored", cat.DROPPED.total, ""),
    ("judgements_dropped", cat.JUDGE_REQUESTS.total, 'outcome="dropped"'),
    ("window_observations", cat.WINDOW_DROPPED.total, 'reason="dropped"'),
)
"""What ragmon loses, by the ``loss`` label of ``ragmon:data_lost:rate5m``: (loss, counter, matchers).
Left out on purpose: spans refused while shutting down (the exporter retries them elsewhere),
duplicate spans, late spans and folded label values (counted, not lost)."""


def _alert(
    name: str, expr: str, for_scale: float, summary: str, description: str
) -> dict[str, Any]:
    severity, for_ = ALERTS[name]
    return {
        "alert": name,
        "expr": expr,
        "for": format_duration(parse_duration(for_) * for_scale),
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
        },
    }


def _drop_expr(
    current: str, baseline: str, by: str, drop: float, floor: float | None,
    count: str, count_match: str, guard_by: str, minimum: int, t: Thresholds,
) -> str:
    """Current below baseline − drop (with enough observations in the baseline), or below the
    floor; either way with enough observations in the current window."""
    baseline_guard = _agg("increase", count, t.baseline, guard_by, count_match, offset=t.window)
    current_guard = _agg("increase", count, t.window, guard_by, count_match)
    expr = (
        f"(\n  {current}\n    < on ({by})\n  ({baseline} - {_num(drop)})\n"
        f"  and on ({guard_by})\n  {baseline_guard} >= {minimum}\n)"
    )
    if floor is not None:
        expr += f"\nor\n  {current} < {_num(floor)}"
        expr = f"(\n{expr}\n)"
    return f"{expr}\nand on ({guard_by})\n  {current_guard} >= {minimum}"


def _drop_text(
    what: str, value: str, drop: float, floor: float | None, minimum: int, unit: str, t: Thresholds
) -> str:
    text = (
        f"over the last {t.window} is {value}, more than {_num(drop)} below its {t.baseline} baseline "
        f"(ending {t.window} ago)"
    )
    if floor is not None:
        text += f" or below the floor {_num(floor)}"
    return f"{what} {text}; at least {minimum} {unit} in each window."


def _alerts(t: Thresholds, for_scale: float) -> list[dict[str, Any]]:
    w = t.window
    svc = f"{_l('service')} (variant {_l('variant')})"
    rules = []

    rules.append(_alert(
        "RagHitRateDrop",
        _drop_expr(
            f"ragmon:retrieval_hit_rate:ratio_rate{w}", f"ragmon:retrieval_hit_rate:ratio_rate{t.baseline}_offset{w}",
            SVSK, t.hit_rate_drop, t.hit_rate_floor, cat.RETRIEVAL_QUERIES.total, "", SVS, t.min_queries, t,
        ),
        for_scale,
        f"Retrieval hit rate@{_l('k')} dropped for {svc}",
        _drop_text(
            f"Hit rate@{_l('k')} ({_l('source')} relevance)", _PCT, t.hit_rate_drop, t.hit_rate_floor,
            t.min_queries, "scored retrievals", t,
        ),
    ))
    rules.append(_alert(
        "RagMrrDrop",
        _drop_expr(
            f"ragmon:retrieval_mrr:ratio_rate{w}", f"ragmon:retrieval_mrr:ratio_rate{t.baseline}_offset{w}",
            SVS, t.mrr_drop, t.mrr_floor, cat.RETRIEVAL_RECIPROCAL_RANK.count, "", SVS, t.min_queries, t,
        ),
        for_scale,
        f"Retrieval MRR dropped for {svc}",
        _drop_text(
            f"MRR ({_l('source')} relevance)", _NUM, t.mrr_drop, t.mrr_floor, t.min_queries,
            "scored retrievals", t,
        ),
    ))
    skip = _skip(t.faithfulness_skip_judges)
    skip_sel = f"{{{skip}}}" if skip else ""
    rules.append(_alert(
        "RagFaithfulnessDrop",
        _drop_expr(
            f"ragmon:faithfulness:ratio_rate{w}{skip_sel}", f"ragmon:faithfulness:ratio_rate{t.baseline}_offset{w}{skip_sel}",
            SVSJ, t.faithfulness_drop, t.faithfulness_floor, cat.FAITHFULNESS.count, skip, SVSJ, t.min_judged, t,
        ),
        for_scale,
        f"Answer faithfulness dropped for {svc}",
        _drop_text(
            f"Mean faithfulness (judge {_l('judge')}, {_l('source')} traffic)", _NUM, t.faithfulness_drop,
            t.faithfulness_floor, t.min_judged, "judged answers", t,
        ),
    ))
    rules.append(_alert(
        "RagCoherenceDrop",
        _drop_expr(
            f"ragmon:coherence:ratio_rate{w}", f"ragmon:coherence:ratio_rate{t.baseline}_offset{w}",
            SVSJ, t.coherence_drop, t.coherence_floor, cat.COHERENCE.count, "", SVSJ, t.min_judged, t,
        ),
        for_scale,
        f"Answer coherence dropped for {svc}",
        _drop_text(
            f"Mean coherence (judge {_l('judge')}, {_l('source')} traffic)", _NUM, t.coherence_drop,
            t.coherence_floor, t.min_judged, "judged answers", t,
        ),
    ))
    toxic = cat.TOXIC_ANSWERS.total
    rules.append(_alert(
        "RagToxicAnswers",
        # A series born with a count (its first toxic answer came before its first scrape) has no
        # increase yet: the second term counts it while it is younger than the window.
        f"{_agg('increase', toxic, w, SVC)} > 0\n"
        f"or\n"
        f"  sum by ({SVC}) ({toxic} unless {toxic} offset {w}) > 0",
        for_scale,
        f"Toxic answers ({_l('category')}) from {svc}",
        f"About {_NUM} answers judged {_l('category')} at severity medium or worse over the last {w}. "
        "Every judged toxic answer pages: look at the sampled traces now.",
    ))
    total = 'stage="total"'
    requests = _agg("increase", cat.REQUEST_DURATION.count, w, SV, total)
    rules.append(_alert(
        "RagLatencyP95High",
        f"ragmon:request_duration_seconds:p95_rate{w}{{{total}}} > {_num(t.latency_p95_seconds)}\n"
        f"and on ({SV})\n"
        f"  {requests} >= {t.min_requests}",
        for_scale,
        f"p95 latency of {svc} is high",
        f"p95 request latency over the last {w} is {_NUM}s, above {_num(t.latency_p95_seconds)}s; "
        f"at least {t.min_requests} requests in the window.",
    ))
    rules.append(_alert(
        "RagErrorRatioHigh",
        f"ragmon:trace_error:ratio_rate{w} > {_num(t.max_error_ratio)}\n"
        f"and on ({SV})\n"
        f"  {_agg('increase', cat.TRACES.total, w, SV)} >= {t.min_requests}",
        for_scale,
        f"Errors in requests of {svc}",
        f"{_PCT} of requests over the last {w} had an error span, above {_pct(t.max_error_ratio)}; "
        f"at least {t.min_requests} requests in the window.",
    ))
    rules.append(_alert(
        "RagCostBurnHigh",
        f"{_agg('rate', cat.COST_USD.total, '1h', 'service')} * 3600 > {_num(t.max_usd_per_hour)}\n"
        f"and on (service)\n"
        f"  {_agg('increase', cat.TRACES.total, '1h', 'service')} >= {t.min_cost_requests}",
        for_scale,
        f"Model cost of {_l('service')} is burning fast",
        f"{_l('service')} spent {_NUM} USD on model calls over the last hour, above "
        f"{_num(t.max_usd_per_hour)} USD/hour; at least {t.min_cost_requests} requests in the hour.",
    ))
    attempted = _agg("increase", cat.JUDGE_REQUESTS.total, w, JOB_EVALUATOR, f'outcome=~"{_ATTEMPTED}"')
    rules.append(_alert(
        "RagmonJudgeFailing",
        f"ragmon:judge_failure:ratio_rate{w} > {_num(t.max_judge_failure_ratio)}\n"
        f"and on ({JOB_EVALUATOR})\n"
        f"  {attempted} >= {t.min_judge_requests}",
        for_scale,
        f"LLM judge calls failing for {_l('evaluator')} ({_l('job')})",
        f"{_PCT} of {_l('evaluator')} judge calls over the last {w} ended in error, timeout or an "
        f"invalid verdict, above {_pct(t.max_judge_failure_ratio)}; at least {t.min_judge_requests} calls "
        "in the window. Those requests get no judge scores.",
    ))
    rules.append(_alert(
        "RagmonDroppingData",
        f"ragmon:data_lost:rate5m * 300 >= {t.min_lost_per_5m}",
        for_scale,
        f"ragmon ({_l('job')}) is losing data: {_l('loss')}",
        f"ragmon lost {_NUM} items of kind {_l('loss')} in the last 5 minutes (at least "
        f"{t.min_lost_per_5m} per 5 minutes, sustained); the metrics under-count what it lost.",
    ))
    up = f"up{{job=~{json.dumps(t.job_regex)}}}"
    rules.append(_alert(
        "RagmonDown",
        f"{up} == 0\nand\n  count_over_time({up}[5m]) >= 3",
        for_scale,
        f"ragmon target {_l('instance')} is down",
        f"Prometheus cannot scrape ragmon at {_l('instance')} (job {_l('job')}), after at least "
        "3 scrapes in 5 minutes: the requests it watches are not measured.",
    ))
    rules.append(_alert(
        "RagmonTargetsMissing",
        f"absent_over_time({up}[10m])",
        for_scale,
        "No ragmon target is scraped",
        f"No series {up} for 10 minutes: Prometheus discovers no ragmon target, "
        "so no RAG quality alert can fire.",
    ))
    for rule in rules:
        rule["annotations"]["runbook_url"] = f"{t.runbook_url}#{rule['alert'].lower()}"
    return rules


# -- the rule file -------------------------------------------------------------------------------


def rule_groups(for_scale: float = 1.0, thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The Prometheus rule file as data: ``{"groups": [...]}``.

    Group ``ragmon.recording`` records 5-minute ratios and quantiles for dashboards; group
    ``ragmon.alerts`` records what the alerts read (the alert window, baselines, data loss), then
    the alerts, which so see this evaluation's values. ``for_scale`` (>= 0) multiplies every
    alert's ``for:``.
    """
    if not (math.isfinite(for_scale) and for_scale >= 0):
        raise ValueError(f"for_scale: must be a finite number >= 0, got {for_scale}")
    t = thresholds or Thresholds()
    groups = []
    if t.window != "5m":
        groups.append({"name": "ragmon.recording", "rules": _recording(t, ["5m"], alerting=False)})
    # One group, evaluated in order: each alert reads series recorded at the same instant.
    alerting = _recording(t, [t.window], alerting=True) + _alerts(t, for_scale)
    groups.append({"name": "ragmon.alerts", "rules": alerting})
    return {"groups": groups}


_DEFAULT_LABELS = {"app.kubernetes.io/name": "ragmon", "app.kubernetes.io/component": "alerting"}


def prometheus_rule(
    for_scale: float = 1.0,
    thresholds: Thresholds | None = None,
    *,
    name: str = "ragmon",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The same groups as a Kubernetes ``PrometheusRule`` (prometheus-operator)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "labels": dict(labels if labels is not None else _DEFAULT_LABELS),
        },
        "spec": rule_groups(for_scale, thresholds),
    }


def render_rules(
    for_scale: float = 1.0,
    thresholds: Thresholds | None = None,
    *,
    kubernetes: bool = False,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The rule file (or with ``kubernetes``, the ``PrometheusRule``, with ``labels`` when
    given) as YAML, with a header."""
    command = "python -m ragmon.ops.rules" + (" --kubernetes" if kubernetes else "")
    data = prometheus_rule(for_scale, thresholds, labels=labels) if kubernetes else rule_groups(for_scale, thresholds)
    header = f"# Generated by `{command}` (ragmon/ops/rules.py): do not edit by hand.\n"
    return header + to_yaml(data)


# -- YAML ------------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):  # type: ignore[misc,unused-ignore]  # Any without PyYAML's stubs
    """PyYAML's safe dumper, for reading: lists indented under their key, multi-line strings
    as literal blocks, tuples as lists."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """A multi-line string as a literal block (PyYAML quotes it instead when a block cannot
    hold it exactly, e.g. trailing spaces)."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


def _represent_tuple(dumper: yaml.SafeDumper, items: tuple[Any, ...]) -> yaml.SequenceNode:
    return dumper.represent_list(list(items))


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(tuple, _represent_tuple)


def to_yaml(data: Mapping[str, Any] | Sequence[Any]) -> str:
    """Block-style YAML (PyYAML's safe dumper) for dicts, lists, strings, numbers, booleans and
    None, keys in their order, lines never folded."""
    text: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30)
    return text


# -- command line --------------------------------------------------------------------------------


def _set(thresholds: Thresholds, assignment: str) -> Thresholds:
    """``thresholds`` with one ``NAME=VALUE`` applied (``ValueError`` naming the field)."""
    name, sep, text = assignment.partition("=")
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    if not sep or name not in fields:
        raise ValueError(f"--set {assignment!r}: expected NAME=VALUE with NAME one of {', '.join(fields)}")
    default = fields[name].default
    value: Any
    try:
        if isinstance(default, tuple):
            value = tuple(part.strip() for part in text.split(",") if part.strip())
        elif default is None:
            value = None if text.lower() in ("", "none") else float(text)
        elif isinstance(default, int):
            value = int(text)
        elif isinstance(default, float):
            value = float(text)
        else:
            value = text
    except ValueError:
        raise ValueError(f"--set {name}: not a valid value: {text!r}") from None
    return dataclasses.replace(thresholds, **{name: value})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ragmon.ops.rules``: print the rule file (or the PrometheusRule) as YAML."""
    parser = argparse.ArgumentParser(prog="python -m ragmon.ops.rules", description="Print ragmon's Prometheus rules as YAML.")
    parser.add_argument("--for-scale", type=float, default=1.0, metavar="X", help="multiply every alert's for: by X (default 1)")
    parser.add_argument("--kubernetes", action="store_true", help="print a prometheus-operator PrometheusRule")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a threshold, e.g. hit_rate_drop=0.05; repeatable")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="with --kubernetes: add a metadata label, e.g. release=kube-prometheus-stack; repeatable")
    args = parser.parse_args(argv)
    try:
        thresholds = Thresholds()
        for assignment in args.set:
            thresholds = _set(thresholds, assignment)
        labels = dict(_DEFAULT_LABELS)
        for label in args.label:
            key, sep, value = label.partition("=")
            if not sep or not key:
                raise ValueError(f"--label {label!r}: expected KEY=VALUE")
            labels[key] = value
        text = render_rules(args.for_scale, thresholds, kubernetes=args.kubernetes, labels=labels)
    except ValueError as exc:
        print(f"ragmon.ops.rules: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
