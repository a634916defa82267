"""Each shipped configuration, driven to the worst each surface admits, peaks within 75% of its
container's memory limit (issue 23): the sidecar (deploy/kubernetes/configmap.yaml, its limit in
deployment.yaml), the pool (deploy/kubernetes/ragmon-pool.yaml) and compose (deploy/compose.yaml
and the file it mounts). The configuration and the limit are both read from the files, so
raising a cap without the limit (or lowering the limit) makes the test fail. The drivers and the
phases are in tests/shipped_limits.py and the modules it names; ``pytest -s`` prints each run's
figures."""

from __future__ import annotations

import gzip
import json
import socket
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from limits_bodies import UNSAMPLED_LOW, Bodies, feedback_array_body, json_array_body, minimal_spans_protobuf, trace_id
from limits_configs import (
    CONFIGURATIONS,
    DEPLOY,
    K8S,
    SHARE,
    Shipped,
    compose,
    compose_bytes,
    effective,
    kubernetes_bytes,
    local_config,
    pool,
    sidecar,
    to_toml,
)
from limits_fill import SilentJudge
from shipped_limits import run_configuration

from ragmon.groundtruth.feedback import FeedbackError, decode_feedback
from ragmon.judge.sampling import sampled
from ragmon.otlp.decode import SpanSelection, decode_json, decode_protobuf

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

MiB = 1024 * 1024
READERS = CONFIGURATIONS


# -- the harness's parts ---------------------------------------------------------------------------


def test_memory_quantities_are_read_as_kubernetes_and_compose_read_them() -> None:
    assert [kubernetes_bytes(q) for q in ("512Mi", "1Gi", "768M", "1G", "64Ki", "1.5Gi", "1000", 2048)] == [
        512 * MiB, 1024 * MiB, 768_000_000, 1_000_000_000, 65536, 1536 * MiB, 1000, 2048,
    ]
    assert [compose_bytes(q) for q in ("1g", "512m", "768M", "1024k", "100b", "2gb", 4096)] == [
        1024 * MiB, 512 * MiB, 768 * MiB, MiB, 100, 2048 * MiB, 4096,
    ]
    for bad in ("1g", "512mb", "ten", "-1Gi", ""):
        with pytest.raises(ValueError):
            kubernetes_bytes(bad)
    for bad in ("1gigs", "1 Gi", "", "1.2.3m"):
        with pytest.raises(ValueError):
            compose_bytes(bad)


def test_each_configuration_and_limit_is_read_from_the_shipped_files() -> None:
    side, ragmon_pool, demo = sidecar(), pool(), compose()
    assert side.config == tomllib.loads(_configmap_toml(K8S / "configmap.yaml", "ragmon-config"))
    assert ragmon_pool.config == tomllib.loads(_configmap_toml(K8S / "ragmon-pool.yaml", "ragmon-pool-config"))
    assert demo.config == tomllib.loads((DEPLOY / "example" / "ragmon.toml").read_text())
    assert [side.limit, ragmon_pool.limit, demo.limit] == [512 * MiB, 1024 * MiB, 1024 * MiB]
    assert [side.budget, ragmon_pool.budget, demo.budget] == [384 * MiB, 768 * MiB, 768 * MiB]
    assert SHARE == 0.75
    assert [side.tokens, ragmon_pool.tokens, demo.tokens] == [(), ("RAGMON_RECEIVER_TOKEN",), ()]
    assert demo.mounts["/etc/ragmon/golden.jsonl"] == DEPLOY / "example" / "golden.jsonl"


def _configmap_toml(path: Path, name: str) -> str:
    import yaml

    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return str(doc["data"]["ragmon.toml"])


@pytest.mark.parametrize("name", list(READERS))
def test_only_what_cannot_work_here_is_changed(name: str) -> None:
    """Listeners, mounted files and probe URLs change; every cap, bound and timeout stays."""
    shipped = READERS[name]()
    local = local_config(shipped.config, shipped.mounts, "http://127.0.0.1:9/ask")
    assert tomllib.loads(to_toml(local)) == local
    changed = {
        ("receiver", "http"), ("receiver", "grpc"), ("metrics", "listen"), ("scoring", "golden"), ("probe", "url"),
    }
    for section, table in shipped.config.items():
        for i, item in enumerate(table if isinstance(table, list) else [table]):
            mine = local[section][i] if isinstance(table, list) else local[section]
            for key, value in item.items():
                if (section, key) not in changed:
                    assert mine[key] == value, (section, key)
    assert (local["receiver"]["http"], local["receiver"]["grpc"], local["metrics"]["listen"]) == ("127.0.0.1:0",) * 3
    for probe in local.get("probe", []):
        assert probe["url"] == "http://127.0.0.1:9/ask"
    golden = local.get("scoring", {}).get("golden")
    assert golden is None or Path(golden).is_file()
    config = effective(shipped)
    caps = shipped.config.get("traces", {}).get("max_bytes")
    assert caps is None or config.traces.max_bytes == caps


def test_a_judge_or_onward_endpoint_set_in_a_configuration_points_here() -> None:
    shipped = {"judge": {"base_url": "https://judge.example/v1", "export_endpoint": "http://collector:4318", "timeout": "5s"}}
    local = local_config(shipped, {}, "http://127.0.0.1:9/", "http://127.0.0.1:8/v1")
    assert local["judge"] == {"base_url": "http://127.0.0.1:8/v1", "export_endpoint": "http://127.0.0.1:9/", "timeout": "5s"}


def test_a_raised_cap_is_what_the_drivers_drive() -> None:
    """The drivers read the caps from the configuration they run: a cap raised in the shipped
    file is the cap driven to (and a limit not raised with it fails the run)."""
    shipped = sidecar()
    raised = {**shipped.config, "traces": {**shipped.config["traces"], "max_bytes": 2 * shipped.config["traces"]["max_bytes"]}}
    assert effective(Shipped("raised", "", raised, shipped.limit)).traces.max_bytes == 2 * shipped.config["traces"]["max_bytes"]


def test_the_bodies_are_the_largest_of_their_shape_and_decode() -> None:
    size = 256 * 1024
    selection = SpanSelection()
    protobuf = minimal_spans_protobuf(size)
    request = ExportTraceServiceRequest.FromString(protobuf)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert size - 30 < len(protobuf) <= size
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)
    assert len(decode_protobuf(protobuf, selection).spans) == len(spans) > 8000
    for element in ('{"intValue":"1"}', "{}"):
        body = json_array_body(size, element)
        assert size - len(element) - 1 < len(body) <= size
        decoded = decode_json(body, selection)
        assert (len(decoded.spans), decoded.rejected) == (1, 0)
    feedback = feedback_array_body(size)
    assert size - 3 < len(feedback) <= size
    refused = decode_feedback(feedback)  # parsed whole, then refused
    assert isinstance(refused, FeedbackError) and str(refused).startswith("relevant_document_ids:")
    bodies = Bodies(size).build()
    assert gzip.decompress(bodies.protobuf_gzip) == bodies.protobuf
    assert gzip.decompress(bodies.json_objects_gzip) == bodies.json_objects
    assert json.loads(bodies.json_integers)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["key"] == "input.value"


def test_trace_ids_are_in_the_judges_sample_exactly_when_meant() -> None:
    for rate in (0.1, 0.5, 0.999):
        bound = round(rate * 2**64)
        assert all(sampled(trace_id(low), rate) for low in (0, 1, 999, bound - 1))
        assert not sampled(trace_id(bound), rate)
        assert not sampled(trace_id(UNSAMPLED_LOW), rate)


def test_the_judge_reads_every_request_and_never_answers() -> None:
    judge = SilentJudge()
    try:
        with socket.create_connection(("127.0.0.1", judge.port), timeout=5) as sock:
            request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            sock.sendall(request)
            sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                sock.recv(1)
        deadline = time.monotonic() + 5
        while judge.received < len(request) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (judge.connections, judge.received) == (1, len(request))
    finally:
        judge.close()


# -- the shipped configurations ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bodies() -> Iterator[dict[int, Bodies]]:
    """Bodies by ``max_body_bytes``, built once for the configurations that share it."""
    yield {}


@pytest.mark.parametrize("name", list(READERS))
def test_peak_rss_stays_within_three_quarters_of_the_limit(name: str, tmp_path: Path, bodies: dict[int, Bodies]) -> None:
    shipped = READERS[name]()
    size = effective(shipped).receiver.max_body_bytes
    if size not in bodies:
        bodies[size] = Bodies(size).build()
    run = run_configuration(shipped, tmp_path, bodies[size])
    print("\n" + run.table())
    assert not run.problems, run.table()
    assert run.peak <= shipped.budget, run.table()
    assert run.healthz == "ok", run.table()
