"""Every model call counts in ``ragmon_tokens_total`` / ``ragmon_cost_usd_total``, RAG request or not.

Real parts: the official OpenTelemetry OpenAI instrumentation (opentelemetry-instrumentation-openai-v2
2.4b0, which traces ``chat.completions.create`` and ``embeddings.create``: spans with
``gen_ai.operation.name`` ``chat`` / ``embeddings``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` and, for chat, ``gen_ai.usage.output_tokens``)
around the real ``openai`` client, talking to a fake OpenAI-compatible server on 127.0.0.1 that
echoes the requested model and reports known usage; the spans go through the SDK's
``OTLPSpanExporter`` to a real sidecar, whose ``/metrics`` is scraped. A bare instrumented client
has no application span: each call is its own trace, the call span at the top. Prices come
from the configured ``[pricing]`` table, so every cost is known exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from fake_openai import fake_openai as serve_openai
from opentelemetry.util.genai.handler import TelemetryHandler
from net_helpers import wait_until
from server_helpers import sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, Price, ReceiverConfig

CHAT, EMBED, UNPRICED = "chat-model-1", "embed-model-1", "unpriced-embedder-1"
PRICING = {CHAT: Price(input=1000.0, output=4000.0), EMBED: Price(input=2000.0)}
"""USD per million tokens: a chat call (12 in, 3 out) costs 0.012 + 0.012; an embedding (5 in) 0.01."""
CHAT_IN, CHAT_OUT, EMBED_IN = 12, 3, 5
CHAT_USD, EMBED_USD = (CHAT_IN * 1000.0 + CHAT_OUT * 4000.0) / 1e6, EMBED_IN * 2000.0 / 1e6

REQUEST_FAMILIES = (
    "ragmon_traces_total", "ragmon_trace_errors_total", "ragmon_request_duration_seconds_count",
    "ragmon_latency_seconds", "ragmon_cost_usd_per_request", "ragmon_error_ratio", "ragmon_window_samples",
    "ragmon_retrieval_queries_total", "ragmon_retrieval_unlabelled_total",
)
"""Series that stand for RAG requests: none of them for a trace that is not one."""


def _reply(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's chat.completion / embeddings list shapes for the requested model, fixed usage."""
    model = request["model"]
    if path.endswith("/embeddings"):
        return {
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "usage": {"prompt_tokens": EMBED_IN, "total_tokens": EMBED_IN},
        }
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": CHAT_IN, "completion_tokens": CHAT_OUT, "total_tokens": CHAT_IN + CHAT_OUT},
    }


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve_openai(_reply, monkeypatch) as url:
        yield url


@pytest.fixture
def sidecar() -> Iterator[tuple[Sidecar, FakeClock]]:
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        pricing=PRICING,
    )
    clock = FakeClock()
    with sidecar_thread(config, clock) as (car, _):
        yield car, clock


class _App:
    """An app's OpenTelemetry set-up: the SDK's OTLP/HTTP exporter to the sidecar, and the
    openai-v2 instrumentor on the real ``openai`` client (removed again on ``close``)."""

    def __init__(self, car: Sidecar, base_url: str, service: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        endpoint = f"http://127.0.0.1:{car.ports.http}/v1/traces"
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
        self.instrumentor = OpenAIInstrumentor()
        self.instrumentor.instrument(tracer_provider=self.provider)
        self.client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)

    def chat(self, model: str = CHAT) -> None:
        reply = self.client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Capital of France?"}])
        assert reply.choices[0].message.content == "Paris."

    def embed(self, model: str = EMBED) -> None:
        assert len(self.client.embeddings.create(model=model, input="capital of France?").data) == 1

    def rag_request(self) -> None:
        """A RAG request: an application span around a GenAI retrieval span (util-genai) holding
        an embeddings call, then a chat call."""
        with self.provider.get_tracer("app").start_as_current_span("POST /ask"):
            with TelemetryHandler(tracer_provider=self.provider).retrieval(data_source_id="kb", provider="chroma") as retrieval:
                self.embed()
                retrieval.documents = [{"id": "kb-7", "score": 0.9}]
            self.chat()

    def close(self) -> None:
        self.client.close()
        self.instrumentor.uninstrument()
        self.provider.shutdown()


def _settle(car: Sidecar, clock: FakeClock, spans: int, traces: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Wait for ``spans`` spans to arrive, finish the traces, wait for all ``traces``, scrape."""
    wait_until(lambda: car.assembler.stats().spans_held == spans and car.pipeline.stats().queued_spans == 0)
    clock.now += 3.0
    wait_until(lambda: car.pipeline.stats().records + car.pipeline.stats().ignored >= traces)
    return samples(scrape(car.ports.metrics))


def _series_of(v: dict[tuple[str, frozenset[tuple[str, str]]], float], service: str) -> set[str]:
    return {name for name, labels in v if ("service", service) in labels and not name.endswith("_created")}


def test_a_bare_instrumented_client_counts_every_call_and_no_request(
    fake_openai: str, sidecar: tuple[Sidecar, FakeClock]
) -> None:
    """One trace per call, no application span: 3 chat calls, 2 priced and 1 unpriced
    embeddings; tokens and cost exact, unpriced tokens counted, and no request series."""
    car, clock = sidecar
    app = _App(car, fake_openai, "bare-client")
    try:
        for _ in range(3):
            app.chat()
        app.embed()
        app.embed()
        app.embed(UNPRICED)
    finally:
        app.close()
    v = _settle(car, clock, spans=6, traces=6)

    tokens = {"service": "bare-client", "model": CHAT}
    assert value(v, "ragmon_tokens_total", **tokens, token_type="input") == 3 * CHAT_IN
    assert value(v, "ragmon_tokens_total", **tokens, token_type="output") == 3 * CHAT_OUT
    assert value(v, "ragmon_cost_usd_total", **tokens) == pytest.approx(3 * CHAT_USD, rel=1e-12)
    embeddings = {"service": "bare-client", "model": EMBED}
    assert value(v, "ragmon_tokens_total", **embeddings, token_type="input") == 2 * EMBED_IN
    assert ("ragmon_tokens_total", frozenset({**embeddings, "token_type": "output"}.items())) not in v
    assert value(v, "ragmon_cost_usd_total", **embeddings) == pytest.approx(2 * EMBED_USD, rel=1e-12)
    assert value(v, "ragmon_tokens_total", service="bare-client", model=UNPRICED, token_type="input") == EMBED_IN
    assert value(v, "ragmon_unpriced_tokens_total", model=UNPRICED) == EMBED_IN
    assert ("ragmon_cost_usd_total", frozenset({"service": "bare-client", "model": UNPRICED}.items())) not in v
    # not RAG requests: ignored as requests, counted as calls only
    assert value(v, "ragmon_traces_ignored_total") == 6
    assert car.pipeline.stats().records == 0 and car.pipeline.stats().model_call_traces == 6
    assert _series_of(v, "bare-client") == {"ragmon_tokens_total", "ragmon_cost_usd_total"}
    assert not any(name in REQUEST_FAMILIES for name, _ in v)


def test_a_mixed_run_counts_each_call_once_and_only_rag_traces_as_requests(
    fake_openai: str, sidecar: tuple[Sidecar, FakeClock]
) -> None:
    """Two RAG requests (an embeddings and a chat call each, under an application span) and,
    between them, 3 bare chat calls and 1 bare embeddings call of the same service: tokens and
    cost count all 8 calls once each; requests, latency and per-request cost only the 2 RAG
    traces, whose per-request cost is their own 2 calls."""
    car, clock = sidecar
    app = _App(car, fake_openai, "rag-api")
    try:
        app.rag_request()
        app.chat()
        app.embed()
        app.chat()
        app.rag_request()
        app.chat()
    finally:
        app.close()
    v = _settle(car, clock, spans=2 * 4 + 4, traces=6)

    chat = {"service": "rag-api", "model": CHAT}
    assert value(v, "ragmon_tokens_total", **chat, token_type="input") == 5 * CHAT_IN
    assert value(v, "ragmon_tokens_total", **chat, token_type="output") == 5 * CHAT_OUT
    assert value(v, "ragmon_cost_usd_total", **chat) == pytest.approx(5 * CHAT_USD, rel=1e-12)
    embed = {"service": "rag-api", "model": EMBED}
    assert value(v, "ragmon_tokens_total", **embed, token_type="input") == 3 * EMBED_IN
    assert value(v, "ragmon_cost_usd_total", **embed) == pytest.approx(3 * EMBED_USD, rel=1e-12)

    request = {"service": "rag-api", "variant": "default"}
    assert value(v, "ragmon_traces_total", **request) == 2
    assert value(v, "ragmon_request_duration_seconds_count", **request, stage="total") == 2
    assert value(v, "ragmon_request_duration_seconds_count", **request, stage="generation") == 2
    assert value(v, "ragmon_cost_usd_per_request", **request, window="5m") == pytest.approx(CHAT_USD + EMBED_USD, rel=1e-12)
    assert value(v, "ragmon_traces_ignored_total") == 4
    assert (car.pipeline.stats().records, car.pipeline.stats().model_call_traces) == (2, 4)
