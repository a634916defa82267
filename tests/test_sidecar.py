"""The whole sidecar on 127.0.0.1: real SDK exporters (HTTP and gRPC) in, exact values on /metrics."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Tracer
from prometheus_client.parser import text_string_to_metric_families
from net_helpers import wait_until
from server_helpers import LoopThread, sidecar_thread

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, Price, ReceiverConfig, MetricsConfig
from ragmon.model import Offer

PRICE = Price(input=0.15, output=0.60)
# (ranking, relevant): reciprocal ranks 1, 1/2, 0
TRACES = [
    (["d1", "d2", "d3"], ["d1"]),
    (["x", "d5", "y"], ["d5"]),
    (["a", "b", "c"], ["z"]),
]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(port: int, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return values[(name, frozenset(labels.items()))]


def send_rag_traces(exporter: SpanExporter, service: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service, "ragmon.variant": "B"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    make_rag_traces(provider.get_tracer("app"))
    provider.shutdown()


def make_rag_traces(tracer: Tracer, traces: Sequence[tuple[list[str], list[str]]] = TRACES) -> None:
    """One OpenInference RAG trace (chain, retriever, LLM) per ``(ranking, relevant)`` pair."""
    for ranking, relevant in traces:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the refund window?")
            root.set_attribute("output.value", "30 days.")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(ranking):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
                span.set_attribute("ragmon.relevant_document_ids", relevant)
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "gpt-4o-mini")
                span.set_attribute("llm.provider", "openai")
                span.set_attribute("llm.token_count.prompt", 100)
                span.set_attribute("llm.token_count.completion", 20)


@pytest.fixture
def sidecar() -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc="127.0.0.1:0"),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        pricing={"gpt-4o-mini": PRICE},
    )
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_exact_values_on_metrics(sidecar: tuple[Sidecar, FakeClock, LoopThread], protocol: str) -> None:
    car, clock, _ = sidecar
    if protocol == "http":
        exporter: SpanExporter = HttpExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
    else:
        exporter = GrpcExporter(endpoint=f"127.0.0.1:{car.ports.grpc}", insecure=True, timeout=10)
    send_rag_traces(exporter, "rag-api")
    wait_until(lambda: car.ingest.spans_received[protocol] == 9)
    wait_until(lambda: car.assembler.stats().spans_held == 9)
    assert car.pipeline.stats().records == 0  # grace not over yet
    clock.now += 3.0  # past the 2 s grace
    wait_until(lambda: car.pipeline.stats().records == 3)

    v = samples(scrape(car.ports.metrics))
    sv = {"service": "rag-api", "variant": "B"}
    src = {**sv, "source": "label"}
    assert value(v, "ragmon_traces_total", **sv) == 3
    assert value(v, "ragmon_spans_received_total", protocol=protocol) == 9
    assert value(v, "ragmon_retrieval_queries_total", **src) == 3
    assert value(v, "ragmon_retrieval_hits_total", **src, k="1") == 1
    assert value(v, "ragmon_retrieval_hits_total", **src, k="3") == 2
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **src) == pytest.approx(1.5, abs=1e-12)
    assert value(v, "ragmon_retrieval_reciprocal_rank_count", **src) == 3
    ndcg3 = 1.0 + 1.0 / __import__("math").log2(3)
    assert value(v, "ragmon_retrieval_ndcg_sum", **src, k="3") == pytest.approx(ndcg3, abs=1e-12)
    assert value(v, "ragmon_tokens_total", service="rag-api", model="gpt-4o-mini", token_type="input") == 300
    assert value(v, "ragmon_tokens_total", service="rag-api", model="gpt-4o-mini", token_type="output") == 60
    cost = 3 * (100 * 0.15 + 20 * 0.60) / 1e6
    assert value(v, "ragmon_cost_usd_total", service="rag-api", model="gpt-4o-mini") == pytest.approx(cost, rel=1e-12)
    # rolling gauges
    assert value(v, "ragmon_retrieval_hit_rate", **src, k="1", window="5m") == pytest.approx(1 / 3, abs=1e-12)
    assert value(v, "ragmon_retrieval_hit_rate", **src, k="3", window="1h") == pytest.approx(2 / 3, abs=1e-12)
    assert value(v, "ragmon_retrieval_mrr", **src, window="5m") == pytest.approx(0.5, abs=1e-12)
    assert value(v, "ragmon_retrieval_ndcg_mean", **src, k="3", window="5m") == pytest.approx(ndcg3 / 3, abs=1e-12)
    assert value(v, "ragmon_window_samples", **src, metric="retrieval_hit_rate", window="5m") == 3
    assert value(v, "ragmon_cost_usd_per_request", **sv, window="5m") == pytest.approx(cost / 3, rel=1e-12)
    assert value(v, "ragmon_error_ratio", **sv, window="5m") == 0
    assert value(v, "ragmon_request_duration_seconds_count", **sv, stage="total") == 3
    assert value(v, "ragmon_request_duration_seconds_count", **sv, stage="retrieval") == 3
    assert ("ragmon_latency_seconds", frozenset({**sv, "stage": "total", "quantile": "0.95", "window": "5m"}.items())) in v

    openmetrics = scrape(car.ports.metrics, openmetrics=True)
    assert "# {trace_id=" in openmetrics  # trace-id exemplars on the histograms

    # after the window, the 5m gauges are gone and the 1h ones stay
    clock.now += 301.0
    v = samples(scrape(car.ports.metrics))
    assert ("ragmon_retrieval_mrr", frozenset({**src, "window": "5m"}.items())) not in v
    assert value(v, "ragmon_retrieval_mrr", **src, window="1h") == pytest.approx(0.5, abs=1e-12)


def test_health_ready_and_status_page(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, _, _ = sidecar
    for path, expected in (("/healthz", "ok"), ("/readyz", "ready"), ("/", "ragmon")):
        with urllib.request.urlopen(f"http://127.0.0.1:{car.ports.metrics}{path}", timeout=10) as response:
            assert response.status == 200 and expected in response.read().decode()


def test_shutdown_scores_the_traces_held(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, _, loop = sidecar
    send_rag_traces(HttpExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10), "svc")
    wait_until(lambda: car.assembler.stats().spans_held == 9)
    loop.run(car.pipeline.shutdown())
    wait_until(lambda: car.worker is not None and car.worker.done())
    assert car.worker is not None and car.worker.exception() is None
    assert car.pipeline.stats().records == 3
    assert car.pipeline.offer([]) is Offer.SHUTTING_DOWN  # no longer accepting
