"""deploy/: the manifests validate offline, the files reference what exists, the example app
feeds a real ragmon.

Kubernetes objects are checked against the bundled schemas of ``kubernetes-validate`` (strict:
unknown fields fail) for the oldest version with native sidecars (1.29) and the newest bundled;
the prometheus-operator objects (CRDs, no bundled schema) structurally. Tools that may be
missing (promtool, amtool) fail: the README's test command installs them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from net_helpers import wait_until
from ragmon.config import Config, config_from_mapping, load_config

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SIDECAR_MIN_VERSION = "1.29"  # restartPolicy: Always on init containers (native sidecars)


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: the README's test command installs it (apt-get install prometheus prometheus-alertmanager)")
    return path


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in _yaml_docs(path)
    ]


MANIFESTS = _manifests()
CORE = [(name, doc) for name, doc in MANIFESTS if "monitoring.coreos.com" not in doc["apiVersion"]]


def _pod_specs() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, pod template labels, pod spec) of every workload."""
    for name, doc in MANIFESTS:
        if doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            yield name, template["metadata"]["labels"], template["spec"]


# -- Kubernetes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "doc"), CORE, ids=[n for n, _ in CORE])
def test_kubernetes_manifest_validates_against_the_schema(name: str, doc: dict[str, Any]) -> None:
    import kubernetes_validate as kv
    for version in (SIDECAR_MIN_VERSION, kv.latest_version()):
        kv.validate(doc, version, strict=True)


APP_SHUTDOWN_ALLOWANCE = 30
"""Seconds left for the app's own shutdown before its native sidecar (ragmon) is signalled."""


def test_grace_periods_cover_ragmons_shutdown_and_the_linger_outlasts_a_scrape_interval() -> None:
    """SIGTERM must end in exit 0, not SIGKILL: each pod's grace covers ragmon's worst case (plus
    the app's shutdown where ragmon is a sidecar), and the linger waits out one scrape interval."""
    from ragmon.sidecar.wiring import shutdown_bound
    from ragmon.config import parse_duration

    configs = {
        d["metadata"]["name"]: config_from_mapping(tomllib.loads(d["data"]["ragmon.toml"]))
        for _, d in MANIFESTS if d["kind"] == "ConfigMap"
    }
    intervals = [parse_duration(e["interval"]) for _, d in MANIFESTS if d["kind"] == "PodMonitor"
                 for e in d["spec"]["podMetricsEndpoints"]]
    checked = 0
    for path, _, spec in _pod_specs():
        containers = [*spec.get("initContainers", []), *spec["containers"]]
        ragmon = next(c for c in containers if c["name"] == "ragmon")
        (config_map,) = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
        linger = configs[config_map].metrics.linger
        assert linger > max(intervals), path
        sidecar = ragmon in spec.get("initContainers", [])
        need = shutdown_bound(linger) + (APP_SHUTDOWN_ALLOWANCE if sidecar else 0)
        assert spec["terminationGracePeriodSeconds"] >= need, (path, need)
        checked += 1
    assert checked == 2


def test_the_validator_catches_mistakes() -> None:
    import kubernetes_validate as kv
    doc = next(d for _, d in CORE if d["kind"] == "Deployment")
    broken = json.loads(json.dumps(doc))
    sidecar = broken["spec"]["template"]["spec"]["initContainers"][0]
    sidecar["restartPolcy"] = sidecar.pop("restartPolicy")
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, SIDECAR_MIN_VERSION, strict=True)
    broken = json.loads(json.dumps(doc))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, SIDECAR_MIN_VERSION, strict=True)


def test_ragmon_runs_as_a_native_sidecar() -> None:
    _, _, spec = next(p for p in _pod_specs() if p[0].startswith("deployment.yaml"))
    (sidecar,) = [c for c in spec["initContainers"] if c["name"] == "ragmon"]
    assert sidecar["restartPolicy"] == "Always"
    assert {p["containerPort"] for p in sidecar["ports"]} == {4317, 4318, 9464}
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["RAGMON_CONFIG"]["value"] == "/etc/ragmon/ragmon.toml"
    (app,) = spec["containers"]
    app_env = {e["name"]: e.get("value") for e in app["env"]}
    assert app_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"


@pytest.mark.parametrize("name", [n for n, _, _ in _pod_specs()])
def test_workloads_are_hardened(name: str) -> None:
    _, _, spec = next(p for p in _pod_specs() if p[0] == name)
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
        assert container["livenessProbe"] and container["readinessProbe"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    configmaps = {d["metadata"]["name"] for _, d in MANIFESTS if d["kind"] == "ConfigMap"}
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configmaps


@pytest.mark.parametrize("name", [n for n, d in MANIFESTS if d["kind"] == "ConfigMap"])
def test_configmap_holds_a_valid_ragmon_config(name: str) -> None:
    doc = dict(MANIFESTS)[name]
    config = config_from_mapping(tomllib.loads(doc["data"]["ragmon.toml"]), name)
    assert config.metrics.listen.startswith("0.0.0.0:")


def test_example_config_is_valid() -> None:
    config = load_config(str(DEPLOY / "ragmon.toml"))
    assert config.receiver.http.startswith("0.0.0.0:") and config.receiver.grpc.startswith("0.0.0.0:")


@pytest.mark.parametrize("name", ["ragmon", "ragmon-pool"])
def test_podmonitor_selects_the_pods_and_their_metrics_port(name: str) -> None:
    """Each PodMonitor selects the pods applied with it (a PodMonitor sees its own namespace)."""
    (pm,) = [d for _, d in MANIFESTS if d["kind"] == "PodMonitor" and d["metadata"]["name"] == name]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(pm["spec"]) <= {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"}
    selector = pm["spec"]["selector"]["matchLabels"]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and re.fullmatch(r"\d+s", endpoint["interval"])
    selected = [(path, spec) for path, labels, spec in _pod_specs() if selector.items() <= labels.items()]
    (pm_file,) = [path.split(":")[0] for path, doc in MANIFESTS if doc is pm]
    kustomized = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    applied_with = kustomized if pm_file in kustomized else {pm_file}
    assert len(selected) == 1 and selected[0][0].split(":")[0] in applied_with, selected
    for path, spec in selected:
        ports = {p["name"]: p["containerPort"] for c in [*spec.get("initContainers", []), *spec["containers"]] for p in c.get("ports", [])}
        assert ports[endpoint["port"]] == 9464, path
    # the job label, "<namespace>/<name>", matches the rules' job_regex
    from ragmon.ops.rules import Thresholds

    assert re.fullmatch(Thresholds().job_regex, f"default/{pm['metadata']['name']}")


def test_prometheus_rule_matches_the_rule_file() -> None:
    (rule,) = [d for _, d in MANIFESTS if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    assert rule["spec"] == yaml.safe_load((DEPLOY / "prometheus" / "ragmon-rules.yml").read_text())
    for group in rule["spec"]["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"]
        for r in group["rules"]:
            assert set(r) <= {"record", "alert", "expr", "for", "labels", "annotations"}
            assert ("record" in r) != ("alert" in r) and isinstance(r["expr"], str)


def test_kustomization_lists_the_manifests() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "ragmon-pool.yaml"}
    assert listed == on_disk


def test_pool_service_is_headless_and_speaks_otlp_grpc() -> None:
    docs = {d["kind"]: d for d in _yaml_docs(K8S / "ragmon-pool.yaml")}
    service = docs["Service"]
    assert service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in service["spec"]["ports"]] == [4317]
    config = config_from_mapping(tomllib.loads(docs["ConfigMap"]["data"]["ragmon.toml"]))
    assert config.receiver.grpc == "0.0.0.0:4317"


def test_pool_ingest_needs_a_token_and_only_collectors_and_prometheus_reach_the_pool() -> None:
    """The pool binds OTLP to every interface, so it takes a bearer token from a Secret (and the
    collector sends it) and a NetworkPolicy admits only collectors to OTLP, Prometheus to /metrics."""
    docs = {d["kind"]: d for d in _yaml_docs(K8S / "ragmon-pool.yaml")}
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    secret = env["RAGMON_RECEIVER_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "ragmon-ingest", "key": "token"}  # not optional: no token, no pod
    toml = tomllib.loads(docs["ConfigMap"]["data"]["ragmon.toml"])
    config = load_config_from(toml, {"RAGMON_RECEIVER_TOKEN": "t0ken"})
    assert config.receiver.grpc.startswith("0.0.0.0:") and config.receiver.token == "t0ken"
    lb = _collector("loadbalancing.yaml")["exporters"]["loadbalancing/ragmon"]["protocol"]["otlp"]
    assert lb["headers"]["authorization"] == "Bearer ${env:RAGMON_INGEST_TOKEN}"
    policy = docs["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    allowed = {
        (tuple(sorted(peer["podSelector"]["matchLabels"].items())), port["port"])
        for rule in policy["spec"]["ingress"] for peer in rule["from"] for port in rule["ports"]
    }
    assert allowed == {
        ((("ragmon.io/ingest", "true"),), 4317), ((("ragmon.io/ingest", "true"),), 4318),
        ((("app.kubernetes.io/name", "prometheus"),), 9464),
    }


def load_config_from(data: dict[str, Any], environ: dict[str, str]) -> Config:
    from ragmon.config import with_environment

    return with_environment(config_from_mapping(data), environ)


# -- compose, Prometheus, Alertmanager ----------------------------------------------------------


COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _bind_mounts() -> list[tuple[str, Path]]:
    mounts = []
    for service, spec in COMPOSE["services"].items():
        for volume in spec.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                mounts.append((service, (DEPLOY / source).resolve()))
    return mounts


def test_compose_has_the_whole_loop() -> None:
    services = COMPOSE["services"]
    assert set(services) == {"rag-app", "ragmon", "prometheus", "alertmanager", "grafana"}
    for name, spec in services.items():
        for dependency in spec.get("depends_on", []):
            assert dependency in services, (name, dependency)
        for port in spec.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
        if "build" in spec:
            context = (DEPLOY / spec["build"]["context"]).resolve()
            assert (context / spec["build"].get("dockerfile", "Dockerfile")).is_file(), name
    assert services["rag-app"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://ragmon:4318"
    assert services["ragmon"]["environment"]["RAGMON_CONFIG"] == "/etc/ragmon/ragmon.toml"
    assert services["rag-app"]["depends_on"]["ragmon"]["condition"] == "service_healthy"
    for name, spec in services.items():  # images pinned
        if "image" in spec and "build" not in spec:
            assert re.search(r":v?\d+\.\d+", spec["image"]), name


def test_compose_mounts_inside_deploy_exist() -> None:
    for service, path in _bind_mounts():
        if DEPLOY in path.parents or path == DEPLOY:
            assert path.exists(), (service, path)


def test_compose_mounts_grafana_provisioning() -> None:
    """The mounted grafana/ directories hold the provisioning files and the dashboard (their
    contents: tests/test_dashboard.py)."""
    grafana = {path.relative_to(ROOT).as_posix(): path for service, path in _bind_mounts() if service == "grafana"}
    assert list(grafana) == ["grafana/provisioning/datasources", "grafana/provisioning/dashboards", "grafana/dashboards"]
    for rel, files in zip(grafana, (["prometheus.yaml"], ["ragmon.yaml"], ["ragmon.json"])):
        assert sorted(p.name for p in grafana[rel].iterdir()) == files, rel
    home = COMPOSE["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == "/var/lib/grafana/dashboards/ragmon.json"


def test_prometheus_config_scrapes_ragmon_and_loads_the_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["ragmon-rules.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    from ragmon.ops.rules import Thresholds

    ragmon_jobs = [name for name in jobs if re.fullmatch(Thresholds().job_regex, name)]
    assert ragmon_jobs == ["ragmon"]
    assert jobs["ragmon"]["static_configs"][0]["targets"] == ["ragmon:9464"]
    (am,) = config["alerting"]["alertmanagers"]
    host = am["static_configs"][0]["targets"][0].split(":")[0]
    assert host in COMPOSE["services"]
    result = subprocess.run(
        [_require_tool("promtool"), "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_config_is_valid() -> None:
    result = subprocess.run(
        [_require_tool("amtool"), "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- images ----------------------------------------------------------------------------------------


def _dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines if line and not line.startswith("#")
    ]


@pytest.mark.parametrize("path", [DEPLOY / "Dockerfile", DEPLOY / "example" / "Dockerfile"], ids=["ragmon", "example"])
def test_images_run_as_non_root_with_a_healthcheck(path: Path) -> None:
    instructions = _dockerfile(path)
    users = [args for op, args in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    (healthcheck,) = [args for op, args in instructions if op == "HEALTHCHECK"]
    assert "urllib.request" in healthcheck and "/healthz" in healthcheck and "curl" not in healthcheck
    assert all(args.startswith("python:3.11-slim") for op, args in instructions if op == "FROM")


def test_ragmon_image() -> None:
    instructions = _dockerfile(DEPLOY / "Dockerfile")
    ops = dict(instructions)  # last of each
    assert json.loads(ops["ENTRYPOINT"]) == ["ragmon", "run"]
    assert set(ops["EXPOSE"].split()) == {"4317", "4318", "9464"}
    assert "127.0.0.1:9464/healthz" in ops["HEALTHCHECK"]
    assert "RAGMON_CONFIG=/etc/ragmon/ragmon.toml" in ops["ENV"]
    copied = [args.split()[0] for op, args in instructions if op == "COPY" and not args.startswith("--from")]
    for source in copied:
        assert (ROOT / source).exists(), source
    assert any("pip install" in args or "pip wheel" in args for op, args in instructions if op == "RUN")
    # the image refuses to build without both compiled parts
    assert any("DECODER != 'compiled'" in args and "pipeline() != 'compiled'" in args for op, args in instructions if op == "RUN")
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for source in copied:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, source


# -- OpenTelemetry Collector ---------------------------------------------------------------------


def _collector(name: str) -> dict[str, Any]:
    config = yaml.safe_load((DEPLOY / "otel-collector" / name).read_text())
    service = config["service"]
    for pipeline in service["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (config.get(kind) or {}), (name, kind, component)
    return config


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_fanout_sends_to_the_backend_and_to_ragmon() -> None:
    config = _collector("fanout.yaml")
    (pipeline,) = config["service"]["pipelines"].values()
    exporters = {e: config["exporters"][e] for e in pipeline["exporters"]}
    assert len(exporters) == 2
    assert any("ragmon" in str(e.get("endpoint", "")) for e in exporters.values())
    assert all(e.get("sending_queue", {}).get("enabled", True) for e in exporters.values())
    assert {_type(e) for e in exporters} <= {"otlp", "otlphttp", "otlp_grpc", "otlp_http"}


def test_loadbalancing_routes_by_trace_id_to_a_ragmon_pool() -> None:
    config = _collector("loadbalancing.yaml")
    (pipeline,) = config["service"]["pipelines"].values()
    (lb_id,) = [e for e in pipeline["exporters"] if _type(e) in ("loadbalancing", "load_balancing")]
    lb = config["exporters"][lb_id]
    assert lb["routing_key"] == "traceID"
    assert "endpoint" not in lb["protocol"]["otlp"]  # set per replica by the exporter
    resolver = lb["resolver"]
    assert set(resolver) <= {"dns", "static", "k8s"} and resolver
    if "dns" in resolver:
        pool = yaml.safe_load_all((K8S / "ragmon-pool.yaml").read_text())
        service = next(d for d in pool if d and d["kind"] == "Service")
        assert resolver["dns"]["hostname"].split(".")[0] == service["metadata"]["name"]
        assert resolver["dns"]["port"] == 4317


# -- the example app -------------------------------------------------------------------------------


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rag_app", DEPLOY / "example" / "rag_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rag_app"] = module
    spec.loader.exec_module(module)
    return module


def test_compose_demo_probes_the_example_app_with_its_golden_set() -> None:
    """compose's ragmon config probes rag-app's /ask (its port, its body) with a golden set
    that is exactly the example app's questions, relevant documents and answers."""
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    mounts = dict(reversed(volume.split(":")[:2]) for volume in services["ragmon"]["volumes"])
    config_file = DEPLOY / mounts[services["ragmon"]["environment"]["RAGMON_CONFIG"]]
    config = load_config(str(config_file))
    golden_file = DEPLOY / mounts[config.scoring.golden]
    (probe,) = config.probe
    app = _example()
    container_port = services["rag-app"]["ports"][0].rsplit(":", 1)[1]
    assert probe.url == f"http://rag-app:{container_port}/ask"
    assert probe.body == {"question": "{query}"} and 'body["question"]' in (DEPLOY / "example" / "rag_app.py").read_text()
    golden = [json.loads(line) for line in golden_file.read_text().splitlines()]
    assert golden == [
        {"query": q, "relevant_document_ids": [doc], "reference_answer": answer} for q, doc, answer in app.QUESTIONS
    ]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_example_app_feeds_a_real_ragmon() -> None:
    """The example's traces, through ragmon's real OTLP/HTTP receiver with deploy/ragmon.toml,
    become exact counts on /metrics; and every series the alert rules read is exported."""
    from prometheus_client.parser import text_string_to_metric_families
    from server_helpers import sidecar_thread

    base = load_config(str(DEPLOY / "ragmon.toml"))
    config: Config = dataclasses.replace(
        base,
        receiver=dataclasses.replace(base.receiver, http="127.0.0.1:0", grpc="127.0.0.1:0"),
        metrics=dataclasses.replace(base.metrics, listen="127.0.0.1:0"),
    )
    clock = _Clock()
    with sidecar_thread(config, clock) as (car, _):
        app = _example()
        argv = ["--endpoint", f"http://127.0.0.1:{car.ports.http}", "--requests", "40", "--rps", "0",
                "--port", "-1", "--seed", "7", "--service", "rag-example", "--variant", "A", "--error-rate", "0"]
        assert app.main(argv) == 0
        wait_until(lambda: car.ingest.spans_received["http"] == 120, 30.0, details=lambda: car.ingest)  # root, retriever, LLM
        wait_until(lambda: car.assembler.stats().spans_held == 120, 30.0, details=lambda: car.assembler.stats())
        clock.now += 5.0  # past the grace period (after assembly: arrival times are the clock's)
        wait_until(lambda: car.pipeline.stats().records == 40, 30.0, details=lambda: car.pipeline.stats())
        with urllib.request.urlopen(f"http://127.0.0.1:{car.ports.metrics}/metrics", timeout=10) as response:
            text = response.read().decode()
    values = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }
    sv = {"service": "rag-example", "variant": "A"}
    src = {**sv, "source": "label"}
    assert values[("ragmon_traces_total", frozenset(sv.items()))] == 40
    assert values[("ragmon_retrieval_queries_total", frozenset(src.items()))] == 40
    hits = {k: values[("ragmon_retrieval_hits_total", frozenset({**src, "k": k}.items()))] for k in ("1", "3", "10")}
    assert hits["3"] == hits["10"] and 25 <= hits["3"] <= 40 and hits["1"] <= hits["3"]
    tokens = frozenset({"service": "rag-example", "model": "gpt-4o-mini", "token_type": "input"}.items())
    assert values[("ragmon_tokens_total", tokens)] == 40 * (60 + 40 * 5)
    assert values[("ragmon_request_duration_seconds_count", frozenset({**sv, "stage": "total"}.items()))] == 40

    # every ragmon series the rules read is one ragmon exports (no drift between the two)
    from ragmon.ops.rules import rule_groups

    exported: set[str] = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        exported.update(family.name + suffix for suffix in suffixes)
    read = {name for g in rule_groups()["groups"] for r in g["rules"] for name in re.findall(r"\b(ragmon_\w+)", r["expr"])}
    assert read <= exported, sorted(read - exported)


def test_example_app_serves_ask_and_continues_the_callers_trace() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    app = _example()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = app.serve(provider.get_tracer("t"), app.Settings(hit_rate=1.0, error_rate=0.0), 0, seed=1)
    port = server.server_address[1]
    try:
        trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/ask", data=json.dumps({"question": "Do gift cards expire?"}).encode(),
            headers={"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{parent_id}-01"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.status == 200
    finally:
        server.shutdown()
    assert "gift-cards" in [d["id"] for d in body["documents"]][:3]
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"POST /ask", "retrieve", "generate"}
    root = spans["POST /ask"]
    assert format(root.context.trace_id, "032x") == trace_id
    assert root.parent is not None and root.parent.is_remote and format(root.parent.span_id, "016x") == parent_id
    assert spans["retrieve"].attributes["ragmon.relevant_document_ids"] == ("gift-cards",)
    assert spans["retrieve"].parent.span_id == root.context.span_id  # type: ignore[union-attr]


def test_deploy_readme_names_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text()
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = path.relative_to(DEPLOY).as_posix()
        if rel != "README.md":
            assert rel in readme or path.name in readme, rel
