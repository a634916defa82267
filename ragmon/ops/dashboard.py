"""The Grafana dashboard for ragmon, generated as plain data.

``dashboard`` gives the dashboard model, ``render_dashboard`` its JSON (what
``grafana/dashboards/ragmon.json`` holds). The datasource is a template variable (no
``__inputs``), so the same file is provisioned and imported by hand; the ``uid`` is fixed.
Every panel reads the aggregatable series summed across replicas, never the rolling gauges
(one replica's view).

``python -m ragmon.ops.dashboard [--runbook-url URL]`` prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ragmon import catalogue as cat
from ragmon.catalogue import Family
from ragmon.ops.rules import RUNBOOK_URL

__all__ = ["UID", "dashboard", "main", "render_dashboard"]

UID = "ragmon"
_SCHEMA_VERSION = 39
_DS = {"type": "prometheus", "uid": "${datasource}"}
_WIDTH = 24

Panel = dict[str, Any]
Query = tuple[str, str]
"""(PromQL, legend format) of one target."""

# -- PromQL building blocks ------------------------------------------------------------------------

_SV = 'service=~"$service", variant=~"$variant"'
_SVS = f'{_SV}, source=~"$source"'
_SVSK = f'{_SVS}, k=~"$k"'
_SERVICE = 'service=~"$service"'
_BY_SV = "service, variant"
_BY_SVS = "service, variant, source"
_BY_SVSK = "service, variant, source, k"
_BY_SVSJ = "service, variant, source, judge"
_LEGEND_SV = "{{service}}/{{variant}}"
_LEGEND_SVS = f"{_LEGEND_SV} {{{{source}}}}"
_LEGEND_SVSK = f"{_LEGEND_SVS} @{{{{k}}}}"
_LEGEND_SVSJ = f"{_LEGEND_SV} {{{{source}}}}/{{{{judge}}}}"
_FAILED = "error|timeout|invalid"
_ATTEMPTED = "ok|error|timeout|invalid"


def _sel(metric: str, match: str = "") -> str:
    return f"{metric}{{{match}}}" if match else metric


def _rate(metric: str, by: str = "", match: str = "", window: str = "$__rate_interval") -> str:
    """``sum by (by) (rate(metric{match}[window]))``."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({_sel(metric, match)}[{window}]))"


def _ratio(numerator: str, denominator: str, match_on: str = "") -> str:
    """``numerator / (denominator > 0)``: no point (not NaN) where nothing was observed."""
    op = f"/ {match_on}" if match_on else "/"
    return f"{numerator}\n  {op}\n({denominator} > 0)"


def _share(part: str, whole: str) -> str:
    """``part / whole``, 0 (not absent) where ``whole`` has traffic and ``part`` has no series."""
    return _ratio(f"({part}\n  or 0 * {whole})", whole)


def _mean(histogram: Family, by: str, match: str, window: str = "$__rate_interval") -> str:
    """Mean of a histogram's observations: ``rate(_sum) / rate(_count)``."""
    return _ratio(_rate(histogram.sum, by, match, window), _rate(histogram.count, by, match, window))


def _hit_rate(window: str = "$__rate_interval", source: str = 'source=~"$source"') -> str:
    """Hit rate@k: hits over scored queries, summed across replicas."""
    return _ratio(
        _rate(cat.RETRIEVAL_HITS.total, _BY_SVSK, f'{_SV}, {source}, k=~"$k"', window),
        _rate(cat.RETRIEVAL_QUERIES.total, _BY_SVS, f"{_SV}, {source}", window),
        "ignoring (k) group_left ()",
    )


def _quantile(q: float, by: str, match: str, histogram: Family = cat.REQUEST_DURATION) -> str:
    buckets = _rate(histogram.bucket, f"le, {by}" if by else "le", match)
    return f"histogram_quantile({q:g}, {buckets})"


def _per_hour(rate: str) -> str:
    return f"{rate} * 3600"


def _per_request(rate: str, by: str, match_on: str = "") -> str:
    """``rate`` per scored request of the selected services (all variants: cost and tokens have
    no variant label)."""
    return _ratio(rate, _rate(cat.TRACES.total, by, _SERVICE), match_on)


# -- panels ----------------------------------------------------------------------------------------

_RATIO = {"unit": "percentunit", "min": 0, "max": 1}
_SCORE = {"unit": "short", "min": 0, "max": 1, "decimals": 3}
_SECONDS = {"unit": "s", "min": 0}
_USD = {"unit": "currencyUSD", "min": 0}
_NUMBER = {"unit": "short", "min": 0}
_REQPS = {"unit": "reqps", "min": 0}
_BYTES = {"unit": "bytes", "min": 0}

_OPTIONS: dict[str, dict[str, Any]] = {
    "timeseries": {
        "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    },
    "stat": {
        "colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "textMode": "auto",
    },
}
_CUSTOM: dict[str, dict[str, Any]] = {
    "timeseries": {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 1, "showPoints": "never", "spanNulls": False},
    "stat": {},
}


def _panel(
    title: str, description: str, field: dict[str, Any], queries: Sequence[Query], *,
    kind: str = "timeseries", width: int = 8, height: int = 8, exemplar: bool = False, text_mode: str = "",
) -> Panel:
    """One panel (id and position come from ``_layout``); targets A, B, … from ``queries``."""
    targets = [
        {
            "datasource": _DS, "editorMode": "code", "expr": expr, "legendFormat": legend,
            "range": True, "refId": chr(ord("A") + i), **({"exemplar": True} if exemplar else {}),
        }
        for i, (expr, legend) in enumerate(queries)
    ]
    options = dict(_OPTIONS[kind], **({"textMode": text_mode} if text_mode else {}))
    return {
        "datasource": _DS, "description": description, "fieldConfig": {
            "defaults": {**field, "custom": _CUSTOM[kind]}, "overrides": [],
        },
        "gridPos": {"h": height, "w": width}, "options": options, "targets": targets,
        "title": title, "type": kind,
    }


def _stat(
    title: str, description: str, field: dict[str, Any], query: Query, text_mode: str = "", width: int = 4,
) -> Panel:
    """A stat panel of one query: 4 high, 8 where it shares a line with timeseries panels."""
    return _panel(title, description, field, [query], kind="stat", width=width, height=4 if width == 4 else 8,
                  text_mode=text_mode)


def _layout(rows: Sequence[tuple[str, Sequence[Panel]]]) -> list[Panel]:
    """Rows and their panels left to right, wrapping at the dashboard's width; ids in order."""
    out: list[Panel] = []
    y = 0
    for title, panels in rows:
        out.append({
            "collapsed": False, "datasource": _DS, "gridPos": {"h": 1, "w": _WIDTH, "x": 0, "y": y},
            "panels": [], "title": title, "type": "row",
        })
        y += 1
        x = line = 0
        for panel in panels:
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > _WIDTH:
                x, y, line = 0, y + line, 0
            out.append({**panel, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
            x, line = x + w, max(line, h)
        y += line
    return [{**panel, "id": i} for i, panel in enumerate(out, start=1)]


# -- rows ------------------------------------------------------------------------------------------


def _overview() -> list[Panel]:
    traces = _rate(cat.TRACES.total, "", _SV)
    return [
        _stat("Requests / s", "Scored requests per second, all selected services.", _REQPS, (traces, "requests / s")),
        _stat("Error ratio", "Share of requests whose trace had an error.", _RATIO,
              (_share(_rate(cat.TRACE_ERRORS.total, "", _SV), traces), "errors")),
        _stat("p95 latency", "95th percentile of the whole request (stage total).", _SECONDS,
              (_quantile(0.95, "", f'{_SV}, stage="total"'), "p95")),
        _stat("Hit rate@k (5m)", "Over the last 5 minutes, all replicas.", _RATIO, (_hit_rate("5m"), _LEGEND_SVSK)),
        _stat("Faithfulness (5m)", "Over the last 5 minutes, all replicas.", _RATIO,
              (_mean(cat.FAITHFULNESS, _BY_SVSJ, _SVS, "5m"), _LEGEND_SVSJ)),
        _stat("Cost / hour", "Priced cost of every model call of the selected services (RAG or not).", _USD,
              (_per_hour(_rate(cat.COST_USD.total, "", _SERVICE)), "USD / h")),
    ]


def _traffic() -> list[Panel]:
    traces = _rate(cat.TRACES.total, _BY_SV, _SV)
    errors = _share(_rate(cat.TRACE_ERRORS.total, _BY_SV, _SV), traces)
    without_usage = _rate(cat.LLM_CALLS_WITHOUT_USAGE.total, "service, model", _SERVICE)
    gaps = [
        (_rate(cat.TRACES_IGNORED.total), "traces that are not RAG requests"),
        (_rate(cat.TRACES_WITHOUT_CONTENT.total), "scored traces without query or answer text"),
        (_rate(cat.RETRIEVAL_UNLABELLED.total, _BY_SV, _SV), f"{_LEGEND_SV} retrievals without relevance"),
        (without_usage, "{{service}} {{model}} calls without usage"),
    ]
    return [
        _panel("Requests / s", "Scored requests (RAG traces) per second.", _REQPS, [(traces, _LEGEND_SV)]),
        _panel("Error ratio", "Share of requests whose trace had an error.", _RATIO, [(errors, _LEGEND_SV)]),
        _panel("Instrumentation gaps / s", "Traces and calls ragmon could not fully score (the first two "
               "count for every service).", _NUMBER, gaps),
    ]


def _retrieval() -> list[Panel]:
    hit_rate = _hit_rate()
    per_k = [
        _panel(f"{name}@k", f"Mean {name.lower()}@k per scored retrieval.", field,
               [(_mean(metric, _BY_SVSK, _SVSK), _LEGEND_SVSK)])
        for name, metric, field in (
            ("Recall", cat.RETRIEVAL_RECALL, _RATIO),
            ("Precision", cat.RETRIEVAL_PRECISION, _RATIO),
            ("NDCG", cat.RETRIEVAL_NDCG, _SCORE),
        )
    ]
    return [
        _panel("Hit rate@k", "Share of scored retrievals with a relevant document in the top k.", _RATIO,
               [(hit_rate, _LEGEND_SVSK)]),
        _panel("MRR", "Mean reciprocal rank of the first relevant document.", _SCORE,
               [(_mean(cat.RETRIEVAL_RECIPROCAL_RANK, _BY_SVS, _SVS), _LEGEND_SVS)]),
        *per_k,
        _panel("Scored retrievals / s", "Retrievals scored against relevance: the evidence behind the ratios.",
               _NUMBER, [(_rate(cat.RETRIEVAL_QUERIES.total, _BY_SVS, _SVS), _LEGEND_SVS)]),
    ]


def _generation() -> list[Panel]:
    faithfulness = _mean(cat.FAITHFULNESS, _BY_SVSJ, _SVS)
    others = [
        (_mean(cat.SCORE_HISTOGRAMS[name], _BY_SVSJ, _SVS), f"{_LEGEND_SVSJ} {name}")
        for name in ("answer_relevance", "context_relevance", "answer_correctness")
    ]
    return [
        _panel("Faithfulness", "Supported claims / claims per judged answer, by source and judge (lexical: "
               "the offline estimate).", _RATIO, [(faithfulness, _LEGEND_SVSJ)], width=12),
        _panel("Answer relevance, context relevance, correctness", "Mean LLM-judge scores (correctness needs "
               "a reference answer).", _SCORE, others, width=12),
        _panel("Coherence", "Coherence rubric checks passed / checks per judged answer (LLM judge only).", _RATIO,
               [(_mean(cat.COHERENCE, _BY_SVSJ, _SVS), _LEGEND_SVSJ)]),
        _panel("Toxicity (0 clean)", "Mean of each judged answer's worst toxicity severity: none 0, low 1/3, "
               "medium 2/3, high 1 (LLM judge only).", _SCORE, [(_mean(cat.TOXICITY, _BY_SVSJ, _SVS), _LEGEND_SVSJ)]),
        _panel("Toxic answers / hour by category", "Judged answers at severity medium or worse, once per category "
               "(a sample of traffic: judge.sample_rate).", _NUMBER,
               [(_per_hour(_rate(cat.TOXIC_ANSWERS.total, f"{_BY_SV}, category", _SV)), f"{_LEGEND_SV} {{{{category}}}}")]),
    ]


def _latency() -> list[Panel]:
    by = f"{_BY_SV}, stage"
    return [
        _panel(f"Latency p{round(q * 100)} by stage", f"{q:g} quantile of each stage's duration; exemplars "
               "carry trace ids.", _SECONDS, [(_quantile(q, by, _SV), f"{_LEGEND_SV} {{{{stage}}}}")], exemplar=True)
        for q in (0.5, 0.95, 0.99)
    ]


def _cost() -> list[Panel]:
    per_hour = _per_hour(_rate(cat.COST_USD.total, "service, model", _SERVICE))
    per_request = _per_request(_rate(cat.COST_USD.total, "service", _SERVICE), "service")
    return [
        _panel("Cost / hour", "Priced model cost per hour, by service and model (cost has no variant label).",
               _USD, [(per_hour, "{{service}} {{model}}")], width=12),
        _panel("Cost / request", "Priced model cost per scored request of the service (all variants).",
               _USD, [(per_request, "{{service}}")], width=12),
    ]


def _tokens() -> list[Panel]:
    legend = "{{service}} {{model}} {{token_type}}"
    tokens = _rate(cat.TOKENS.total, "service, model, token_type", _SERVICE)
    rates = [
        (tokens, legend),
        (_rate(cat.UNPRICED_TOKENS.total, "model"), "{{model}} unpriced"),
        (_rate(cat.JUDGE_UNPRICED_TOKENS.total), "judge unpriced"),
    ]
    per_request = _per_request(tokens, "service", "on (service) group_left ()")
    return [
        _panel("Tokens / s by model", "Model tokens per second; unpriced: tokens of a model with no known "
               "price (also the judge's).", _NUMBER, rates, width=12),
        _panel("Tokens / request by model", "Model tokens per scored request of the service (all variants).",
               _NUMBER, [(per_request, legend)], width=12),
    ]


def _judge() -> list[Panel]:
    requests = cat.JUDGE_REQUESTS.total
    failed = _rate(requests, "evaluator", f'outcome=~"{_FAILED}"')
    attempted = _rate(requests, "evaluator", f'outcome=~"{_ATTEMPTED}"')
    judgements = [
        (_rate(requests, "evaluator, outcome"), "{{evaluator}} {{outcome}}"),
        (_rate(cat.JUDGE_CACHE_HITS.total), "cache hits"),
        (_rate(cat.JUDGE_LEXICAL.total), "lexical estimates"),
        (_rate(cat.JUDGE_LEXICAL_SKIPPED.total), "lexical estimates skipped"),
        (_rate(cat.APP_EVALUATIONS.total), "app evaluations"),
        (_rate(cat.JUDGE_USAGE_ESTIMATED.total), "usage estimated"),
        (_rate(cat.JUDGE_DOCUMENTS_LEFT_OUT.total), "documents left out"),
    ]
    state = [
        (f"sum ({cat.JUDGE_QUEUE.name})", "queued"),
        (f"sum ({cat.JUDGE_IN_FLIGHT.name})", "in flight"),
        (f"max ({cat.JUDGE_BREAKER_OPEN.name})", "breaker open"),
    ]
    return [
        _panel("Judgements / s", "Judge outcomes per evaluator, cache hits, lexical estimates (and those "
               "skipped past judge.lexical_max_per_second), app evaluation events, judge replies whose "
               "tokens were estimated (no usage), documents left out of judge prompts (past "
               "judge.max_documents).", _NUMBER, judgements, width=12),
        _panel("Judge failure ratio", "Failed (error, timeout, invalid) / attempted LLM judge calls; no data "
               "while every sampled trace is skipped or cached.", _RATIO, [(_share(failed, attempted), "{{evaluator}}")],
               width=12),
        _panel("Judge cost / hour", "USD per hour spent on the LLM judge's own tokens.", _USD,
               [(_per_hour(_rate(cat.JUDGE_COST_USD.total)), "judge")]),
        _panel("Judge queue", "Sampled traces waiting and calls in flight (summed over replicas), breaker open "
               "(LLM judge).", _NUMBER, state),
        _stat("Judge in use", "llm (an endpoint) or lexical, and how many replicas run it.", _NUMBER,
              (f"sum by (judge) ({cat.JUDGE_INFO.name})", "{{judge}}"), "value_and_name", width=8),
    ]


def _probes() -> list[Panel]:
    probe_hits = _hit_rate(source='source="probe"')
    return [
        _panel("Probe requests / s", "Golden queries the prober sent, by outcome (ok, http_error, timeout, "
               "error).", _REQPS, [(_rate(cat.PROBE_REQUESTS.total, "probe, outcome"), "{{probe}} {{outcome}}")]),
        _panel("Probe round trip p95", "95th percentile of the probed endpoint's answer time.", _SECONDS,
               [(_quantile(0.95, "probe", "", cat.PROBE_DURATION), "{{probe}}")]),
        _panel("Probe traces / s", "Probe traces joined and scored, missing (the app did not continue the "
               "traceparent or export the trace), dropped (registry full).", _NUMBER,
               [(_rate(cat.PROBE_TRACES.total, "probe, result"), "{{probe}} {{result}}"),
                (f"sum ({cat.PROBE_TRACES_PENDING.name})", "waiting for their trace")]),
        _panel("Probe hit rate@k", "Hit rate of the probed golden queries (source probe).", _RATIO,
               [(probe_hits, f"{_LEGEND_SV} @{{{{k}}}}")]),
    ]


def _feedback() -> list[Panel]:
    feedback_hits = _hit_rate(source='source="feedback"')
    by_name = f"{_BY_SV}, name"
    return [
        _panel("Feedback / s", "POST /v1/feedback bodies by outcome: accepted, invalid (400), unknown_trace and "
               "expired (404: never scored, evicted or past feedback.retention), duplicate (409).", _REQPS,
               [(_rate(cat.FEEDBACK.total, "outcome"), "{{outcome}}")]),
        _panel("Feedback hit rate@k", "Hit rate of the rankings users gave relevance feedback for (source feedback).",
               _RATIO, [(feedback_hits, f"{_LEGEND_SV} @{{{{k}}}}")]),
        _panel("User score mean", "Mean named user score (thumbs 0/1, ratings scaled to [0, 1]) by name.", _SCORE,
               [(_mean(cat.USER_FEEDBACK, by_name, _SV), f"{_LEGEND_SV} {{{{name}}}}")]),
        _panel("Traces kept for feedback", "Scored traces joinable by feedback per replica, and those no longer "
               "joinable per second: evicted (feedback.max_traces), expired (feedback.retention).", _NUMBER,
               [(_per_replica(cat.FEEDBACK_TRACES.name), "{{instance}} kept"),
                (_rate(cat.FEEDBACK_TRACES_DROPPED.total, "reason"), "{{reason}} / s")]),
        _panel("Feedback bytes held", "Bytes of the traces kept for feedback (ids and strings), per replica.", _BYTES,
               [(_per_replica(cat.FEEDBACK_TRACES_BYTES.name), "{{instance}}")]),
    ]


def _per_replica(metric: str, by: str = "instance") -> str:
    return f"sum by ({by}) ({metric})"


def _ragmon() -> list[Panel]:
    lost = [
        (_rate(cat.SPANS_REJECTED.total, "protocol, reason"), "spans rejected {{protocol}} {{reason}}"),
        (_rate(cat.REQUESTS_REJECTED.total, "protocol, reason"), "requests rejected {{protocol}} {{reason}}"),
        (_rate(cat.SPANS_DROPPED.total, "reason"), "spans dropped {{reason}}"),
        (_rate(cat.TRACES_EVICTED.total), "traces evicted"),
        (_rate(cat.DROPPED.total, "reason"), "traces unscored {{reason}}"),
        (_rate(cat.JUDGE_REQUESTS.total, "", 'outcome="dropped"'), "judgements dropped"),
        (_rate(cat.WINDOW_DROPPED.total, "store, reason"), "window {{store}} {{reason}}"),
        (_rate(cat.SCRAPES_DROPPED.total, "reason"), "scrapes dropped {{reason}}"),
    ]
    late = [
        (_rate(cat.SPANS_LATE.total), "late spans"),
        (_rate(cat.LABEL_VALUES_FOLDED.total, "label"), "folded {{label}}"),
        (_rate(cat.ATTRIBUTES_TRUNCATED.total, "protocol"), "truncated {{protocol}}"),
        (_rate(cat.LABEL_VALUES_TRUNCATED.total, "label"), "label cut {{label}}"),
        (_rate(cat.LABEL_VALUES_REPLACED.total, "label"), "label cleaned {{label}}"),
        (_rate(cat.SERIES_FOLDED.total, "metric"), "over budget {{metric}}"),
        (_rate(cat.DURATIONS_INVALID.total, "stage"), "impossible duration {{stage}}"),
    ]
    connections = [
        (_per_replica(cat.CONNECTIONS_OPEN.name, "instance, listener"), "{{instance}} open {{listener}}"),
        (_rate(cat.CONNECTIONS_REFUSED.total, "listener"), "refused / s {{listener}}"),
        (_rate(cat.CONNECTIONS_CLOSED.total, "listener, reason"), "closed / s {{listener}} {{reason}}"),
        (_rate(cat.HTTP_REQUESTS_UNROUTED.total, "listener, reason"), "wrong path or method / s {{listener}} {{reason}}"),
    ]
    held = [
        (_per_replica(cat.QUEUE_SPANS.name), "{{instance}} queued spans"),
        (_per_replica(cat.QUEUE_CAPACITY_SPANS.name), "{{instance}} queue capacity"),
        (_per_replica(cat.SPANS_PENDING.name), "{{instance}} spans pending"),
        (_per_replica(cat.TRACES_PENDING.name), "{{instance}} traces pending"),
        (_per_replica(cat.WINDOW_SERIES.name, "instance, store"), "{{instance}} window series {{store}}"),
    ]
    held_bytes = [
        (_per_replica(cat.QUEUE_BYTES.name), "{{instance}} queued"),
        (_per_replica(cat.SPAN_BYTES_PENDING.name), "{{instance}} pending"),
        (_per_replica(cat.JUDGE_QUEUE_BYTES.name), "{{instance}} judge queue"),
        (_per_replica(cat.SCRAPE_BYTES.name), "{{instance}} /metrics answers"),
    ]
    return [
        _panel("Spans / s", "Spans received by protocol and accepted into trace assembly.", _NUMBER, [
            (_rate(cat.SPANS_RECEIVED.total, "protocol"), "received {{protocol}}"),
            (_rate(cat.SPANS_ASSEMBLED.total), "assembled"),
        ]),
        _panel("Traces finished / s", "Why assembly finished traces (evicted: the pending cap was reached).", _NUMBER,
               [(_rate(cat.TRACES_FINISHED.total, "reason"), "{{reason}}")]),
        _panel("Lost and refused / s", "Spans, requests, traces, judgements, window observations and /metrics answers "
               "refused or dropped.",
               _NUMBER, lost),
        _panel("Late, folded, truncated / s", "Spans after their trace finished, label values folded into other, "
               "attribute and label values cut or cleaned, observations over a family's series budget, spans whose "
               "duration was impossible (no latency recorded).", _NUMBER, late, width=6),
        _panel("Connections", "Open connections per listener and replica; connections refused at the cap and "
               "closed by ragmon (header timeout, evicted idle, malformed).", _NUMBER, connections, width=6),
        _panel("Queue and pending", "Ingest queue depth and capacity, spans and traces held by assembly, window "
               "series, per replica.", _NUMBER, held, width=6),
        _panel("Held bytes", "Approximate bytes queued for ingest, held by assembly and queued for the judge, and "
               "/metrics answers being written, per replica.", _BYTES,
               held_bytes, width=6),
        _stat("Replicas by version", "ragmon replicas scraped, by version.", _NUMBER,
              (f"count by (version) ({cat.BUILD_INFO.name})", "{{version}}"), "value_and_name", width=6),
    ]


# -- the dashboard ---------------------------------------------------------------------------------


def _variable(name: str, label: str, query: str, sort: int = 1) -> dict[str, Any]:
    """A multi-value query variable with All (``.*``) selected."""
    return {
        "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": _DS, "definition": query, "hide": 0, "includeAll": True, "label": label,
        "multi": True, "name": name, "options": [], "query": query, "refresh": 2, "regex": "",
        "sort": sort, "type": "query",
    }


def _templating() -> list[dict[str, Any]]:
    datasource = {
        "current": {}, "hide": 0, "includeAll": False, "label": "Data source", "multi": False,
        "name": "datasource", "options": [], "query": "prometheus", "refresh": 1, "regex": "",
        "type": "datasource",
    }
    return [
        datasource,
        _variable("service", "Service", f"label_values({cat.TRACES.total}, service)"),
        _variable("variant", "Variant", f'label_values({cat.TRACES.total}{{{_SERVICE}}}, variant)'),
        _variable("source", "Relevance source", f"label_values({cat.RETRIEVAL_QUERIES.total}{{{_SV}}}, source)"),
        _variable("k", "k", f"label_values({cat.RETRIEVAL_HITS.total}{{{_SV}}}, k)", sort=3),
    ]


def dashboard(runbook_url: str = RUNBOOK_URL) -> dict[str, Any]:
    """The dashboard model (Grafana schema 39), ready to provision or import."""
    rows = [
        ("Overview", _overview()),
        ("Traffic and errors", _traffic()),
        ("Retrieval quality (source and k variables)", _retrieval()),
        ("Generation quality", _generation()),
        ("Latency", _latency()),
        ("Cost", _cost()),
        ("Tokens", _tokens()),
        ("Judge", _judge()),
        ("Probes (with [[probe]] configured)", _probes()),
        ("User feedback (POST /v1/feedback)", _feedback()),
        ("ragmon", _ragmon()),
    ]
    return {
        "description": "RAG retrieval and answer quality, latency, cost and ragmon's own health, from ragmon's metrics.",
        "editable": True,
        "graphTooltip": 1,
        "links": [{"icon": "doc", "targetBlank": True, "title": "Runbook", "type": "link", "url": runbook_url}],
        "panels": _layout(rows),
        "refresh": "30s",
        "schemaVersion": _SCHEMA_VERSION,
        "tags": ["ragmon", "rag"],
        "templating": {"list": _templating()},
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "",
        "title": "ragmon: RAG quality",
        "uid": UID,
        "version": 1,
    }


def render_dashboard(runbook_url: str = RUNBOOK_URL) -> str:
    """The dashboard as JSON: indent 2, sorted keys, a trailing newline."""
    return json.dumps(dashboard(runbook_url), indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ragmon.ops.dashboard``: print the dashboard JSON."""
    parser = argparse.ArgumentParser(prog="python -m ragmon.ops.dashboard", description="Print ragmon's Grafana dashboard as JSON.")
    parser.add_argument("--runbook-url", default=RUNBOOK_URL, metavar="URL", help=f"the runbook the dashboard links to (default {RUNBOOK_URL})")
    args = parser.parse_args(argv)
    sys.stdout.write(render_dashboard(args.runbook_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
