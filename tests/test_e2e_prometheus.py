"""End to end in CI: a real ``ragmon run`` fed by the OpenTelemetry SDK, scraped every second by
Debian's Prometheus with the rules ``python -m ragmon.ops.rules`` generates (windows and ``for:``
shortened through its options), alerting through Debian's Alertmanager (the deploy/ config,
timers shortened) to a webhook the test runs.

A ``[[probe]]`` replays golden queries against the example app (deploy/example/rag_app.py),
which continues the prober's ``traceparent``. Every query of the Grafana dashboard parses and
returns data; a retrieval regression injected
into variant B's traffic fires RagHitRateDrop, which reaches the webhook with its labels and
annotations; restoring quality resolves it; variant A, the control, never alerts. The stack
starts once for the module (``e2e_stack.py``); the whole module takes about 70 seconds.

Timing (W = 20s window, B = 30s baseline ending W ago, ``for:`` 15m x 0.01 = 9s, 2 traces/s per
variant): the good phase lasts until B's guard holds (about W + 10s); after the switch the 20s
hit rate falls below baseline - 0.1 once 10% of the window is bad (2-3s), then ``for:`` (9s),
then Alertmanager's 1s group_wait: about 13s, well inside the W seconds during which the baseline
still sees only good traffic. Restored, the hit rate climbs back while the baseline takes in the
bad seconds; the expression clears after about 14s. Every wait has a timeout with a message.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from net_helpers import wait_until
from e2e_stack import (
    NOT_YET,
    EXAMPLE_SERVICE,
    JOB,
    ROOT,
    SERVICE,
    RuleSettings,
    Stack,
    Variable,
    dashboard_targets,
    interpolate,
    resolve_variables,
    start_stack,
)

from ragmon.ops.rules import ALERTS, RUNBOOK_URL, parse_duration

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

RULES = RuleSettings(window="20s", baseline="30s", min_queries=15, for_scale=0.01)
RATE = 4.0
"""Traces per second, variants in turn."""
CONTROL, REGRESSED = "A", "B"
DASHBOARD = ROOT / "grafana" / "dashboards" / "ragmon.json"
KS = {"1", "3", "5", "10"}
EXPECTED_ALERTS = {"RagHitRateDrop", "RagMrrDrop"}
"""What the regression may fire (MRR drops with the hit rate; Alertmanager inhibits it)."""

EVERY_KIND = [
    'ragmon_retrieval_hits_total{source="label", k="1"}',
    'ragmon_retrieval_reciprocal_rank_count{source="label"}',
    'ragmon_retrieval_ndcg_count{source="label"}',
    'ragmon_faithfulness_count{judge="llm"}',
    'ragmon_answer_relevance_count{judge="llm"}',
    'ragmon_context_relevance_count{judge="llm"}',
    'ragmon_answer_correctness_count{judge="llm"}',
    *(f'ragmon_request_duration_seconds_count{{stage="{stage}"}}' for stage in ("total", "retrieval", "rerank", "generation", "embedding")),
    'ragmon_tokens_total{model="gpt-4o-mini", token_type="output"}',
    'ragmon_tokens_total{model="text-embedding-3-small"}',
    'ragmon_cost_usd_total{model="gpt-4o-mini"}',
    'ragmon_unpriced_tokens_total{model="local-llama"}',
    'ragmon_label_values_folded_total{label="model"}',
    'ragmon_tokens_total{model="other"}',
    "ragmon_llm_calls_without_usage_total",
    "ragmon_retrieval_unlabelled_total",
    "ragmon_trace_errors_total",
    'ragmon_requests_rejected_total{protocol="http"}',
    'ragmon_spans_rejected_total{protocol="http", reason="invalid_trace_id"}',
    'ragmon_judge_requests_total{outcome="ok"}',
    'ragmon_judge_requests_total{outcome="invalid"}',
    "ragmon_judge_cost_usd_total",
    'ragmon_retrieval_hit_rate{window="5m"}',
    'ragmon_latency_seconds{stage="total", window="5m"}',
    'ragmon_window_samples{window="5m"}',
    'ragmon_spans_received_total{protocol="http"}',
    "ragmon_build_info",
    'ragmon_probe_requests_total{probe="ask", outcome="ok"} > 0',
    'ragmon_probe_duration_seconds_count{probe="ask"} > 0',
    'ragmon_probe_traces_total{probe="ask", result="joined"} > 0',
    'ragmon_retrieval_queries_total{service="rag-example", source="probe"} > 0',
    "ragmon:requests:rate5m",
    "ragmon:retrieval_hit_rate:ratio_rate5m",
    "ragmon:faithfulness:ratio_rate5m",
]
"""Series the traffic must create, in Prometheus (retrieval with labels, judge scores, tokens,
cost, errors, every stage, self-metrics, the probe's requests and joined traces, recording rules)."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with start_stack(tmp_path_factory.mktemp("e2e"), RULES, RATE, (CONTROL, REGRESSED)) as running:
        yield running
    assert running.ragmon.popen.returncode == 0, "ragmon did not exit 0 on SIGTERM\n" + running.ragmon.tail()


def wait_for_every_kind_of_series(stack: Stack) -> None:
    def missing() -> list[str]:
        return [selector for selector in EVERY_KIND if not stack.api.vector(selector)]

    wait_until(what="every kind of series in Prometheus", tolerate=NOT_YET, interval=0.25, probe=lambda: not missing(), timeout=60,
        details=lambda: f"missing: {missing()}\n{stack.diagnostics()}",
    )


def test_prometheus_scrapes_ragmon_and_loads_the_generated_rules(stack: Stack) -> None:
    api = stack.api
    with stack.dump_on_failure():
        def targets() -> list[dict[str, Any]]:
            return [t for t in api.get("/api/v1/targets")["data"]["activeTargets"] if t["labels"]["job"] == JOB]

        wait_until(what="the ragmon target up", tolerate=NOT_YET, interval=0.25, probe=lambda: [t for t in targets() if t["health"] == "up"], timeout=30,
                   details=lambda: json.dumps(targets(), indent=1))
        (target,) = targets()
        assert target["scrapeUrl"] == f"http://127.0.0.1:{stack.ragmon_ports['metrics']}/metrics"

        def groups() -> list[dict[str, Any]]:
            return list(api.get("/api/v1/rules")["data"]["groups"])

        # every rule evaluated (health "unknown" before its first evaluation), none failing
        wait_until(what="every rule evaluated", tolerate=NOT_YET, interval=0.25, probe=lambda: all(r["health"] != "unknown" for g in groups() for r in g["rules"]),
                   timeout=30)
        loaded = groups()
        assert sorted(g["name"] for g in loaded) == ["ragmon.alerts", "ragmon.recording"]
        broken = [(r["name"], r["health"], r.get("lastError")) for g in loaded for r in g["rules"] if r["health"] != "ok" or r.get("lastError")]
        assert not broken, broken
        alerts = {r["name"]: r for g in loaded for r in g["rules"] if r["type"] == "alerting"}
        assert set(alerts) == set(ALERTS)
        for name, (_, for_) in ALERTS.items():  # the generator's --for-scale, not a hand edit
            assert alerts[name]["duration"] == pytest.approx(parse_duration(for_) * RULES.for_scale, abs=0.001), name
        assert f"ragmon:retrieval_hit_rate:ratio_rate{RULES.window}" in {r["name"] for g in loaded for r in g["rules"]}

        managers = api.get("/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
        assert [m["url"] for m in managers] == [f"http://127.0.0.1:{stack.alertmanager_port}/api/v2/alerts"]

        wait_for_every_kind_of_series(stack)
        traces = api.vector(f'sum by (service, variant) (ragmon_traces_total{{job="{JOB}"}})')
        assert {(s["metric"]["service"], s["metric"]["variant"]) for s in traces} == {
            (SERVICE, CONTROL), (SERVICE, REGRESSED), (EXAMPLE_SERVICE, "default"),
        }
        # the example app puts the golden document in its top 3 every time (--hit-rate 1)
        probe = f'service="{EXAMPLE_SERVICE}", source="probe"'
        queries = api.vector(f"sum(ragmon_retrieval_queries_total{{{probe}}})")
        hits = api.vector(f'sum(ragmon_retrieval_hits_total{{{probe}, k="3"}})')
        assert queries and hits and float(hits[0]["value"][1]) == float(queries[0]["value"][1]) > 0


def test_every_dashboard_query_parses_and_returns_data(stack: Stack) -> None:
    assert DASHBOARD.is_file(), f"{DASHBOARD.relative_to(ROOT)} is missing"
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    api = stack.api
    with stack.dump_on_failure():
        wait_for_every_kind_of_series(stack)
        variables, problems = resolve_variables(dashboard, api)
        assert not problems, "templating variables:\n" + "\n".join(problems)
        for name in ("service", "variant"):
            assert name in variables, f"no {name!r} templating variable"
        assert SERVICE in variables["service"].values and {CONTROL, REGRESSED} <= set(variables["variant"].values)

        targets = dashboard_targets(dashboard)
        assert targets, "the dashboard has no queries"

        def failures() -> list[str]:
            out = []
            for target in targets:
                expr, unknown = interpolate(target.expr, variables)
                if unknown:
                    out.append(f"{target.where}: unknown variables {unknown} in {target.expr!r}")
                    continue
                answer = api.query(expr)
                if answer.get("status") != "success":
                    out.append(f"{target.where}: does not run: {answer.get('error')}\n    {expr}")
                elif target.needs_data and answer["data"]["resultType"] in ("vector", "matrix") and not answer["data"]["result"]:
                    out.append(f"{target.where}: no data\n    {expr}")
            return out

        # data keeps arriving (rates need two scrapes of a new series): retry the empty ones a while
        last: list[str] = []

        def clean() -> bool:
            nonlocal last
            last = failures()
            return not last

        try:
            wait_until(what="every dashboard query to return data", tolerate=NOT_YET, probe=clean, timeout=30, interval=2.0)
        except AssertionError:
            pass
        assert not last, f"{len(last)} of {len(targets)} dashboard queries fail:\n" + "\n".join(last)


def quality_alerts(stack: Stack) -> list[dict[str, Any]]:
    """Alerts about the traffic's service received so far. ragmon's own alerts (``Ragmon*``) are
    left out: scaled by the same ``--for-scale``, RagmonDown waits only 3s, which a slow scrape on
    a busy CI machine can reach without anything being wrong with the test's subject; so is the
    example app (the probe's target), whose few requests stay under the guards anyway."""
    return [
        a for _, a in stack.webhook.alerts()
        if not a["labels"].get("alertname", "").startswith("Ragmon") and a["labels"].get("service") == SERVICE
    ]


def hit_rate_alerts(stack: Stack, status: str, after: float) -> list[dict[str, Any]]:
    """RagHitRateDrop alerts of variant B with ``status`` in notifications since ``after``."""
    return [
        alert for n, alert in stack.webhook.alerts()
        if n.at >= after and alert["labels"].get("alertname") == "RagHitRateDrop"
        and alert["labels"].get("variant") == REGRESSED and alert["status"] == status
    ]


def test_a_retrieval_regression_fires_the_hit_rate_alert_and_restoring_quality_resolves_it(stack: Stack) -> None:
    api, webhook, traffic = stack.api, stack.webhook, stack.traffic
    w, b, minimum = RULES.window, RULES.baseline, RULES.min_queries
    sel = f'job="{JOB}", service="{SERVICE}", variant="{REGRESSED}", source="label"'
    with stack.dump_on_failure():
        # 1. good traffic until the baseline window (ending W ago) has enough scored retrievals
        baseline_guard = f"sum by (service, variant, source) (increase(ragmon_retrieval_queries_total{{{sel}}}[{b}] offset {w}))"
        wait_until(what="enough good traffic in the baseline window", tolerate=NOT_YET, interval=0.25, probe=lambda: api.vector(f"{baseline_guard} >= {minimum + 4}")
            and api.vector(f'ragmon:retrieval_hit_rate:ratio_rate{b}_offset{w}{{variant="{REGRESSED}", k="1"}} == 1'),
            timeout=90,
        )
        assert not quality_alerts(stack), "alerts on good traffic:\n" + webhook.summary()

        # 2. the regression: variant B no longer retrieves the relevant document
        traffic.regress(REGRESSED)
        regressed_at = time.monotonic()

        def firing_at_every_k() -> list[dict[str, Any]]:
            alerts = hit_rate_alerts(stack, "firing", regressed_at)
            return alerts if KS <= {a["labels"]["k"] for a in alerts} else []

        firing = wait_until(what=f"RagHitRateDrop firing for variant {REGRESSED} at k = {sorted(KS)} on the webhook", tolerate=NOT_YET, interval=0.25, probe=firing_at_every_k, timeout=60, details=webhook.summary,
        )
        fired_after = time.monotonic() - regressed_at
        for alert in firing:
            k = alert["labels"]["k"]
            assert alert["labels"] == {
                "alertname": "RagHitRateDrop", "service": SERVICE, "variant": REGRESSED,
                "source": "label", "k": k, "severity": "critical",
            }
            annotations = alert["annotations"]
            assert set(annotations) == {"summary", "description", "runbook_url"}
            assert annotations["summary"] == f"Retrieval hit rate@{k} dropped for {SERVICE} (variant {REGRESSED})"
            assert annotations["runbook_url"] == f"{RUNBOOK_URL}#raghitratedrop"
            description = re.fullmatch(
                rf"Hit rate@{k} \(label relevance\) over the last {w} is ([\d.]+)%, more than 0\.1 below "
                rf"its {b} baseline \(ending {w} ago\); at least {minimum} scored retrievals in each window\.",
                annotations["description"],
            )
            assert description, annotations["description"]
            assert float(description.group(1)) < 90
        (first,) = [n for n, a in webhook.alerts() if a is firing[0]]
        assert first.payload["status"] == "firing"
        assert first.payload["receiver"] == "page"  # deploy/'s route for severity="critical"
        assert first.payload["groupLabels"] == {"alertname": "RagHitRateDrop", "service": SERVICE, "variant": REGRESSED}

        # 3. quality restored: the alert resolves and Alertmanager says so
        traffic.restore(REGRESSED)
        restored_at = time.monotonic()

        def resolved() -> list[dict[str, Any]]:
            return [
                n.payload for n in webhook.received()
                if n.at >= restored_at and n.payload.get("status") == "resolved"
                and n.payload.get("groupLabels", {}).get("alertname") == "RagHitRateDrop"
                and n.payload.get("groupLabels", {}).get("variant") == REGRESSED
            ]

        (payload, *_) = wait_until(what="RagHitRateDrop resolved on the webhook", tolerate=NOT_YET, interval=0.25, probe=resolved, timeout=90, details=webhook.summary)
        resolved_after = time.monotonic() - restored_at
        assert {a["labels"]["k"] for a in payload["alerts"]} == KS
        assert all(a["status"] == "resolved" and not a["endsAt"].startswith("0001") for a in payload["alerts"])
        still = [
            a for a in api.get("/api/v1/alerts")["data"]["alerts"]
            if a["labels"]["alertname"] == "RagHitRateDrop" and a["labels"].get("service") == SERVICE
        ]
        assert not still, still

        # only the regression alerted: nothing for the control variant, no other alert
        names = {a["labels"].get("alertname") for a in quality_alerts(stack)}
        assert names <= EXPECTED_ALERTS, webhook.summary(50)
        assert not [a for a in quality_alerts(stack) if a["labels"].get("variant") != REGRESSED], webhook.summary(50)
        print(
            f"good phase {regressed_at - traffic.started:.1f}s, fired {fired_after:.1f}s after the regression, "
            f"resolved {resolved_after:.1f}s after the restore; traces sent {traffic.sent}"
        )


def test_dashboard_helpers_interpolate_like_grafana() -> None:
    """The variable substitution the dashboard test relies on, on a small dashboard."""
    dashboard: dict[str, Any] = {
        "panels": [
            {"id": 1, "type": "row", "title": "r", "collapsed": True, "panels": [
                {"id": 2, "title": "nested", "targets": [{"refId": "A", "expr": 'x{service=~"${service:regex}"}[$__rate_interval]'}]},
            ]},
            {"id": 3, "title": "top", "targets": [{"refId": "A", "expr": 'y{variant=~"$variant", window="[[window]]"}'}, {"refId": "B"}]},
            {"id": 4, "type": "text", "title": "no targets"},
        ],
        "annotations": {"list": [{"name": "deploys", "expr": "changes(z[$__interval])"}]},
    }
    targets = dashboard_targets(dashboard)
    assert [(t.where, t.needs_data) for t in targets] == [
        ("panel 2 'nested' target A", True), ("panel 3 'top' target A", True), ("annotation 'deploys'", False),
    ]
    variables = {
        "service": Variable("service", ("rag-api",), ".*"),
        "variant": Variable("variant", ("A", "B.1")),
        "window": Variable("window", ("5m",)),
    }
    rendered = [interpolate(t.expr, variables) for t in targets]
    assert rendered == [
        ('x{service=~".*"}[1m]', []),
        ('y{variant=~"(A|B\\\\.1)", window="5m"}', []),
        ("changes(z[15s])", []),
    ]
    assert interpolate("$nope + ${also:raw}", variables) == ("$nope + ${also:raw}", ["nope", "also"])
