"""Text no exposition can carry, from the one source that hands ragmon Python strings as they
are (the application's own spans, in-process): lone surrogates, control characters and
bidirectional overrides in the service name, the variant, the model and the content. Every
scrape still answers (the application's registry, the served ``/metrics`` in both formats, and
the status page); label values are cleaned once, where labels are made, and counted; a service
name that is not a string is no service name (``unknown``), never a Python repr."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from ragmon.config import Config, MetricsConfig, ScoringConfig
from ragmon.sidecar.inprocess import RagmonSpanProcessor

HOSTILE = "a\ud800b\r\nc\x00d\u202ee\x1b"
CLEAN = "a\ufffdb\ufffd\ufffdc\ufffdd\ufffde\ufffd"


def _labels(text: str, family: str) -> list[dict[str, str]]:
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == family]


@pytest.fixture
def processor() -> Iterator[tuple[RagmonSpanProcessor, CollectorRegistry]]:
    registry = CollectorRegistry()
    config = Config(metrics=MetricsConfig(listen=""), scoring=ScoringConfig(k=(1,)))
    proc = RagmonSpanProcessor(config, registry=registry, serve="127.0.0.1:0", environ={})
    try:
        yield proc, registry
    finally:
        proc.shutdown()


def _send(proc: RagmonSpanProcessor, service: object, variant: str, model: str, text: str, relevant: str = "") -> None:
    provider = TracerProvider(resource=Resource({"service.name": service}))  # type: ignore[dict-item]
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", text)
        root.set_attribute("output.value", text)
        root.set_attribute("ragmon.variant", variant)
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", text)
            span.set_attribute("retrieval.documents.0.document.content", text)
            span.set_attribute("ragmon.relevant_document_ids", [relevant or text])
        with tracer.start_as_current_span("llm") as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("llm.model_name", model)
            span.set_attribute("llm.token_count.prompt", 10)
            span.set_attribute("llm.token_count.completion", 5)
    assert proc.force_flush()


def test_hostile_text_in_process_never_blinds_a_scrape(processor: tuple[RagmonSpanProcessor, CollectorRegistry]) -> None:
    proc, registry = processor
    _send(proc, HOSTILE, HOSTILE, HOSTILE, HOSTILE, relevant="not retrieved")  # a miss: listed on the status page
    text = generate_latest(registry).decode("utf-8")
    assert _labels(text, "ragmon_traces_total") == [{"service": CLEAN, "variant": CLEAN}]
    assert {"service": CLEAN, "model": CLEAN, "token_type": "input"} in _labels(text, "ragmon_tokens_total")
    assert generate_openmetrics(registry).decode("utf-8").endswith("# EOF\n")
    replaced = {s.labels["label"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "ragmon_label_values_replaced_total"}
    assert replaced["service"] >= 1 and replaced["variant"] >= 1 and replaced["model"] >= 1
    port = proc.port
    for path, accept in (("/metrics", ""), ("/metrics", "application/openmetrics-text; version=1.0.0"), ("/", "")):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, timeout=10) as response:  # a 500 raises
            assert response.status == 200
            response.read().decode("utf-8")  # valid UTF-8 throughout


@pytest.mark.parametrize("service", [b"rag-api", ("rag", "api"), 42])
def test_a_service_name_that_is_not_a_string_is_unknown_not_a_repr(
    processor: tuple[RagmonSpanProcessor, CollectorRegistry], service: object,
) -> None:
    proc, registry = processor
    _send(proc, service, "A", "m", "what is the refund window?")
    text = generate_latest(registry).decode("utf-8")
    assert _labels(text, "ragmon_traces_total") == [{"service": "unknown", "variant": "A"}]
