"""Exact error and unpriced-token series through the real sidecar: the OTel SDK's OTLP/HTTP
exporter in, /metrics scraped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from net_helpers import wait_until
from server_helpers import LoopThread, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, Price, ReceiverConfig

SV = {"service": "rag-api", "variant": "B"}
PRICED, UNPRICED = "gpt-4o-mini", "house-model-without-a-price"


def send(car: Sidecar, traces: list[tuple[bool, str, int, int]]) -> None:
    """One RAG trace per (error, model, input tokens, output tokens); an error is a failed
    retrieval span (status ERROR) under a healthy root."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    for error, model, tokens_in, tokens_out in traces:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the refund window?")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                span.set_attribute("retrieval.documents.0.document.id", "d1")
                if error:
                    span.set_status(Status(StatusCode.ERROR, "index unavailable"))
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", model)
                span.set_attribute("llm.token_count.prompt", tokens_in)
                span.set_attribute("llm.token_count.completion", tokens_out)
    provider.shutdown()


@pytest.fixture
def sidecar() -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        pricing={PRICED: Price(input=0.15, output=0.60)},
    )
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


def _scored(car: Sidecar, clock: FakeClock, records: int, new: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The scrape once ``new`` more traces (3 spans each) are scored, ``records`` in all."""
    wait_until(lambda: car.assembler.stats().spans_held == 3 * new)
    clock.now += 3.0  # past the grace
    wait_until(lambda: car.pipeline.stats().records == records)
    return samples(scrape(car.ports.metrics))


def test_error_traces_give_exact_error_counts_and_ratio(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    errors = [True, False, False, True, False, False, False, False]
    send(car, [(error, PRICED, 10, 2) for error in errors])
    v = _scored(car, clock, len(errors), len(errors))
    assert value(v, "ragmon_traces_total", **SV) == 8
    assert value(v, "ragmon_trace_errors_total", **SV) == 2
    for window in ("5m", "1h"):
        assert value(v, "ragmon_error_ratio", **SV, window=window) == 2 / 8
        assert value(v, "ragmon_window_samples", **SV, source="", metric="error_ratio", window=window) == 8
    clock.now += 301.0  # the errors leave the 5m window; the next two requests are healthy
    send(car, [(False, PRICED, 10, 2), (False, PRICED, 10, 2)])
    v = _scored(car, clock, 10, 2)
    assert value(v, "ragmon_error_ratio", **SV, window="5m") == 0.0
    assert value(v, "ragmon_error_ratio", **SV, window="1h") == 2 / 10
    assert value(v, "ragmon_trace_errors_total", **SV) == 2


def test_unpriced_tokens_count_input_and_output(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    send(car, [(False, UNPRICED, 100, 20), (False, UNPRICED, 7, 300), (False, PRICED, 50, 5)])
    v = _scored(car, clock, 3, 3)
    assert value(v, "ragmon_unpriced_tokens_total", model=UNPRICED) == 100 + 20 + 7 + 300
    assert value(v, "ragmon_tokens_total", service="rag-api", model=UNPRICED, token_type="input") == 107
    assert value(v, "ragmon_tokens_total", service="rag-api", model=UNPRICED, token_type="output") == 320
    assert ("ragmon_unpriced_tokens_total", frozenset({("model", PRICED)})) not in v
    assert ("ragmon_cost_usd_total", frozenset({("service", "rag-api"), ("model", UNPRICED)})) not in v
    cost = (50 * 0.15 + 5 * 0.60) / 1e6
    assert value(v, "ragmon_cost_usd_total", service="rag-api", model=PRICED) == pytest.approx(cost, rel=1e-12)
    assert ("ragmon_cost_usd_per_request", frozenset({**SV, "window": "5m"}.items())) in v  # the priced request
