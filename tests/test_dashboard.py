"""grafana/: the committed dashboard is the generator's output, its structure is what Grafana
provisions and imports (datasource variable, fixed uid, no overlap), and every query reads
series a real ragmon exports, with the labels it exports them with (checked against a scrape
of a running sidecar with an LLM judge; the e2e test runs the queries against Prometheus)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from net_helpers import wait_until
from e2e_stack import free_port
from judge_server import judge_server_thread
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import post
from test_sidecar import scrape
from test_sidecar_judge import ANSWER, DOCS, running

from ragmon.config import JudgeConfig, ProbeConfig
from ragmon.catalogue import CATALOGUE
from ragmon.ops.dashboard import UID, main, render_dashboard

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
DASHBOARD_FILE = GRAFANA / "dashboards" / "ragmon.json"
DASHBOARD: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
DS = {"type": "prometheus", "uid": "${datasource}"}
PANELS: list[dict[str, Any]] = DASHBOARD["panels"]
VARIABLES = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
TARGETS = [(p, t) for p in PANELS for t in p.get("targets", [])]
BUILTINS = {"__rate_interval", "__interval", "__range"}
UNITS = {"percentunit", "s", "currencyUSD", "short", "reqps", "bytes"}
METRIC = re.compile(r"\b(ragmon_\w+)(\{[^}]*\})?")
NOT_SHOWN = {
    # rolling gauges: the panels read the aggregatable series behind them
    "ragmon_retrieval_hit_rate", "ragmon_faithfulness_mean", "ragmon_retrieval_mrr", "ragmon_retrieval_recall_mean", "ragmon_retrieval_precision_mean",
    "ragmon_retrieval_ndcg_mean", "ragmon_cost_usd_per_request", "ragmon_error_ratio",
    "ragmon_answer_relevance_mean", "ragmon_context_relevance_mean", "ragmon_answer_correctness_mean",
    "ragmon_coherence_mean", "ragmon_toxicity_mean", "ragmon_latency_seconds", "ragmon_window_samples",
    "ragmon_user_feedback_mean",
}
"""Families ragmon exports that no panel reads, on purpose."""


def _send(endpoint: str) -> int:
    """Three RAG traces with contents, a reference answer and an app evaluation; the first two
    with relevance labels; the last one failed, called a model with no price and one with no
    usage. Returns the number of spans."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    provider.add_span_processor(SimpleSpanProcessor(HttpExporter(endpoint=endpoint, timeout=10)))
    tracer = provider.get_tracer("app")
    spans = 0
    for i, failed in enumerate((False, False, True)):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", f"what is the refund window? (query {i})")
            root.set_attribute("output.value", ANSWER)
            root.set_attribute("ragmon.reference_answer", "30 days from delivery.")
            root.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": 0.5})
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for rank, (doc_id, text) in enumerate(DOCS):
                    span.set_attribute(f"retrieval.documents.{rank}.document.id", doc_id)
                    span.set_attribute(f"retrieval.documents.{rank}.document.content", text)
                if not failed:
                    span.set_attribute("ragmon.relevant_document_ids", ["d1"])
            models = ["no-price-model", "no-usage-model"] if failed else ["gpt-4o-mini"]
            for model in models:
                with tracer.start_as_current_span("llm") as span:
                    span.set_attribute("openinference.span.kind", "LLM")
                    span.set_attribute("llm.model_name", model)
                    if model != "no-usage-model":
                        span.set_attribute("llm.token_count.prompt", 100)
                        span.set_attribute("llm.token_count.completion", 20)
            if failed:
                root.set_status(Status(StatusCode.ERROR))
            spans += 2 + len(models)
    provider.shutdown()
    return spans


def _send_feedback(car: Any) -> None:
    """Relevance feedback and a thumbs-up for one scored trace (``ragmon_user_feedback`` has a series)."""
    kept = car.feedback.store.trace_ids()
    assert kept
    for body in ({"relevant_document_ids": ["d1"]}, {"name": "thumbs", "score": 1}):
        status, _, _ = post(f"http://127.0.0.1:{car.ports.http}/v1/feedback",
                            json.dumps({"trace_id": kept[0].hex(), **body}).encode(), {"Content-Type": "application/json"})
        assert status == 202


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of a real sidecar with an LLM judge and a probe, after ``_send``'s traces are
    scored and judged (the probe's series exist at 0 before its first request)."""
    golden = tmp_path_factory.mktemp("golden") / "golden.jsonl"
    golden.write_text(json.dumps({"query": "what is the refund window?", "relevant_document_ids": ["d1"]}) + "\n")
    probe = ProbeConfig(name="ask", url=f"http://127.0.0.1:{free_port()}/ask", dataset=str(golden))
    with judge_server_thread(usage=(100, 20)) as server:
        judge = JudgeConfig(base_url=server.base_url, model="judge-model", sample_rate=1.0, concurrency=2)
        with running(judge, probes=(probe,)) as (car, clock, _):
            spans = _send(f"http://127.0.0.1:{car.ports.http}/v1/traces")
            wait_until(lambda: car.assembler.stats().spans_held == spans)
            clock.now += 3.0  # past the grace
            wait_until(lambda: car.pipeline.stats().records == 3)
            assert car.judge.judge is not None
            stats = car.judge.judge.stats
            wait_until(lambda: stats().counts.get(("faithfulness", "ok"), 0) >= 2 and not stats().queue_depth and not stats().in_flight)
            _send_feedback(car)
            yield scrape(car.ports.metrics)


@pytest.fixture(scope="module")
def exported(scraped: str) -> dict[str, str]:
    """Sample name -> type of every series ragmon exports (from the ``# TYPE`` lines)."""
    out = {}
    for family in text_string_to_metric_families(scraped):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        out.update({family.name + suffix: family.type for suffix in suffixes})
    return out


@pytest.fixture(scope="module")
def labels(scraped: str) -> dict[str, set[str]]:
    """Sample name -> label names, for the series the scrape has samples of."""
    out: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(scraped):
        for sample in family.samples:
            out[sample.name] |= set(sample.labels) - {"le"}
    return out


def _exprs() -> list[str]:
    return [t["expr"] for _, t in TARGETS]


# -- the file --------------------------------------------------------------------------------------


def test_committed_json_is_the_generators_output() -> None:
    """Regenerate with: python -m ragmon.ops.dashboard > grafana/dashboards/ragmon.json"""
    printed = subprocess.run(
        [sys.executable, "-m", "ragmon.ops.dashboard"], capture_output=True, text=True, check=True, cwd=ROOT, timeout=60
    ).stdout
    assert printed == render_dashboard() == DASHBOARD_FILE.read_text()


def test_portable_dashboard_with_a_fixed_uid() -> None:
    assert "__inputs" not in DASHBOARD and "__requires" not in DASHBOARD
    assert DASHBOARD["uid"] == UID == "ragmon"
    assert 36 <= DASHBOARD["schemaVersion"] <= 41
    assert "${datasource}" in DASHBOARD_FILE.read_text() and "${DS_" not in DASHBOARD_FILE.read_text()


def test_datasource_variable_is_used_everywhere() -> None:
    datasource = VARIABLES["datasource"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for panel in PANELS:
        assert panel["datasource"] == DS, panel["title"]
    for panel, target in TARGETS:
        assert target["datasource"] == DS, panel["title"]
    for variable in VARIABLES.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DS, variable["name"]


def test_service_and_variant_variables() -> None:
    for name in ("service", "variant", "source", "k"):
        variable = VARIABLES[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"], name
        assert variable["allValue"] == ".*", name
        assert variable["query"] == variable["definition"] and variable["query"].startswith("label_values("), name
        assert variable["query"].endswith(f", {name})"), name
    assert VARIABLES["service"]["query"] == "label_values(ragmon_traces_total, service)"
    assert "ragmon_traces_total{" in VARIABLES["variant"]["query"]


def test_every_variable_used_is_defined() -> None:
    texts = _exprs() + [v["query"] for v in VARIABLES.values() if v["type"] == "query"]
    used = {name for text in texts for name in re.findall(r"\$\{?(\w+)", text)}
    assert used <= set(VARIABLES) | BUILTINS, used - set(VARIABLES) - BUILTINS
    assert {"service", "variant", "source", "k", "__rate_interval"} <= used


def test_unique_ids_and_no_overlap() -> None:
    ids = [p["id"] for p in PANELS]
    assert len(ids) == len(set(ids))
    boxes = [(p["title"], p["gridPos"]) for p in PANELS]
    for title, g in boxes:
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, title
    for (a, g), (b, h) in itertools.combinations(boxes, 2):
        apart = g["x"] + g["w"] <= h["x"] or h["x"] + h["w"] <= g["x"] or g["y"] + g["h"] <= h["y"] or h["y"] + h["h"] <= g["y"]
        assert apart, (a, b)
    rows = [p for p in PANELS if p["type"] == "row"]
    assert len(rows) >= 8 and all(not p["collapsed"] and p["panels"] == [] for p in rows)


def test_panels_have_queries_units_and_distinct_titles_per_row() -> None:
    titles: list[tuple[int, str]] = []
    row = 0
    for panel in PANELS:
        if panel["type"] == "row":
            row = panel["id"]
            continue
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"] in UNITS, panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
        titles.append((row, panel["title"]))
    assert len(titles) == len(set(titles))


def test_latency_targets_ask_for_exemplars() -> None:
    latency = [(p, t) for p, t in TARGETS if "ragmon_request_duration_seconds_bucket" in t["expr"] and p["type"] == "timeseries"]
    assert len(latency) >= 3
    for panel, target in latency:
        assert target.get("exemplar") is True, panel["title"]
        assert target["expr"].startswith("histogram_quantile(")
    quantiles = {re.match(r"histogram_quantile\(([\d.]+),", t["expr"]).group(1) for _, t in latency}  # type: ignore[union-attr]
    assert quantiles == {"0.5", "0.95", "0.99"}


# -- the queries against a real scrape -------------------------------------------------------------


def test_the_scrape_is_the_catalogue(scraped: str) -> None:
    """A sidecar with a judge, a probe and its listeners exports every catalogue family but the
    onward export's, each with the catalogue's help, type and labels."""
    catalogue = {f.name: f for f in CATALOGUE}
    names = set()
    for family in text_string_to_metric_families(scraped):
        if family.name.endswith("_created") or not family.name.startswith("ragmon_"):
            continue
        entry = catalogue[family.name]
        names.add(family.name)
        assert (family.documentation, family.type) == (entry.help, entry.kind.value), family.name
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                assert set(sample.labels) == set(entry.samples()[sample.name]), sample
    assert set(catalogue) - names == {"ragmon_evaluations_exported"}


def test_queries_read_only_series_ragmon_exports(exported: dict[str, str]) -> None:
    texts = _exprs() + [v["query"] for v in VARIABLES.values() if v["type"] == "query"]
    read = {m.group(1) for text in texts for m in METRIC.finditer(text)}
    assert read <= set(exported), sorted(read - set(exported))
    for panel, target in TARGETS:
        assert METRIC.search(target["expr"]), panel["title"]


def test_every_family_is_shown_unless_listed(exported: dict[str, str]) -> None:
    """A new self-metric needs a panel (or a place in NOT_SHOWN)."""
    read = {m.group(1) for text in _exprs() for m in METRIC.finditer(text)}
    histograms = {name.removesuffix("_bucket") for name, kind in exported.items() if kind == "histogram" and name.endswith("_bucket")}
    families = {name for name in exported if exported[name] != "histogram" and not name.endswith("_created")} | histograms
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) if exported.get(name) == "histogram" else name for name in read}
    assert not families - shown - NOT_SHOWN, sorted(families - shown - NOT_SHOWN)
    assert NOT_SHOWN <= families


def test_counters_and_histograms_through_rate_gauges_not(exported: dict[str, str]) -> None:
    for panel, target in TARGETS:
        expr = target["expr"]
        for m in METRIC.finditer(expr):
            in_rate = expr[: m.start()].endswith("rate(")
            assert in_rate == (exported.get(m.group(1)) in ("counter", "histogram")), (panel["title"], m.group(1))


def test_no_panel_reads_a_rolling_gauge(labels: dict[str, set[str]]) -> None:
    """Rolling gauges are one replica's view (SPEC §6): every panel sums the replicas' series."""
    rolling = {name for name, names in labels.items() if "window" in names}
    assert {"ragmon_retrieval_hit_rate", "ragmon_faithfulness_mean"} <= rolling
    for panel, target in TARGETS:
        names = {m.group(1) for m in METRIC.finditer(target["expr"])}
        assert not names & rolling, (panel["title"], names & rolling)


def test_queries_filter_by_the_variables_where_the_labels_exist(labels: dict[str, set[str]]) -> None:
    """service, variant and source everywhere they are labels; k on retrieval series."""
    unknown = set()
    for panel, target in TARGETS:
        names = {m.group(1) for m in METRIC.finditer(target["expr"])}
        for m in METRIC.finditer(target["expr"]):
            name, matchers = m.group(1), m.group(2) or ""
            if name not in labels:
                unknown.add(name)
                continue
            wanted = {"service", "variant", "source"} | ({"k"} if name.startswith("ragmon_retrieval_") else set())
            if any("service" in labels.get(other, ()) and "variant" not in labels[other] for other in names):
                wanted.discard("variant")  # per request of a series with no variant (cost, tokens): all variants
            for label in wanted & labels[name]:
                fixed = re.search(rf'\b{label}="[^"]+"', matchers)  # a panel about one value (source="probe")
                assert f'{label}=~"${label}"' in matchers or fixed, (panel["title"], name, label)
    assert not unknown, unknown


# -- provisioning ----------------------------------------------------------------------------------


COMPOSE = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]["grafana"]


def _container_path(host: str) -> str:
    """Where compose mounts the repository's ``host`` directory in the Grafana container."""
    for volume in COMPOSE["volumes"]:
        source, target = volume.split(":")[:2]
        if (ROOT / "deploy" / source).resolve() == (ROOT / host).resolve():
            return str(target)
    raise AssertionError(f"compose does not mount {host}")


def _provisioned(kind: str, file: str, key: str) -> list[dict[str, Any]]:
    """The entries under ``key`` of grafana/provisioning/<kind>/<file>, which compose mounts
    where Grafana reads provisioning files."""
    assert _container_path(f"grafana/provisioning/{kind}") == f"/etc/grafana/provisioning/{kind}"
    config = yaml.safe_load((GRAFANA / "provisioning" / kind / file).read_text())
    assert config["apiVersion"] == 1
    return [dict(entry) for entry in config[key]]


def test_datasource_provisioning() -> None:
    by_uid = {d["uid"]: d for d in _provisioned("datasources", "prometheus.yaml", "datasources")}
    datasource = by_uid["prometheus"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    assert datasource["isDefault"] is True and datasource["access"] == "proxy"
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert datasource["jsonData"]["timeInterval"] == prometheus["global"]["scrape_interval"]
    # exemplar links: ragmon's exemplar label, to the provisioned tracing backend, which is where
    # the Collector fan-out config sends the traces
    (link,) = datasource["jsonData"]["exemplarTraceIdDestinations"]
    assert link["name"] == "trace_id" and by_uid[link["datasourceUid"]]["type"] == "tempo"
    fanout = yaml.safe_load((ROOT / "deploy" / "otel-collector" / "fanout.yaml").read_text())
    backend_host = fanout["exporters"]["otlp/backend"]["endpoint"].split(":")[0]
    assert by_uid[link["datasourceUid"]]["url"] == f"http://{backend_host}:3200"


def test_dashboard_provisioning_points_at_the_mounted_dashboards() -> None:
    (provider,) = _provisioned("dashboards", "ragmon.yaml", "providers")
    assert provider["type"] == "file" and provider["folder"] == "ragmon"
    path = provider["options"]["path"]
    assert path == _container_path("grafana/dashboards") == "/var/lib/grafana/dashboards"
    home = COMPOSE["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/{DASHBOARD_FILE.name}"


def test_runbook_link_can_point_at_your_copy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--runbook-url", "https://wiki.example.com/ragmon"]) == 0
    links = json.loads(capsys.readouterr().out)["links"]
    assert [link["url"] for link in links] == ["https://wiki.example.com/ragmon"]
