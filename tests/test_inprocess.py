"""In-process mode: the same RAG traces through the real SDK into the sidecar (OTLP/HTTP) and
into ``RagmonSpanProcessor`` give the same numbers; registry and serve modes; the drain at
shutdown; a full buffer drops and counts without blocking the application."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from net_helpers import wait_until
from judge_server import judge_server_thread, verdict_for
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from otel_helpers import record_spans, to_protobuf
from prometheus_client import CollectorRegistry, generate_latest
from server_helpers import sidecar_thread
from strategies import SETTINGS
from test_sidecar import PRICE, TRACES, FakeClock, make_rag_traces, samples, scrape, value
from test_sidecar_judge import exporter, finish, judged, running, send_traces

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, JudgeConfig, MetricsConfig, ReceiverConfig
from ragmon.conventions import SELECTION
from ragmon.model import AttributeFilter
from ragmon.otlp.decode import SpanSelection, decode_protobuf, kept_resource
from ragmon.sidecar import inprocess
from ragmon.receivers.inprocess import to_span
from ragmon.sidecar.inprocess import RagmonSpanProcessor

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
SV = {"service": "rag-api", "variant": "B"}


def send(*processors: SpanProcessor, traces: list[tuple[list[str], list[str]]] = TRACES, flush: bool = True) -> None:
    """The RAG traces of test_sidecar (OpenInference, real SDK), through each of ``processors``."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    for processor in processors:
        provider.add_span_processor(processor)
    make_rag_traces(provider.get_tracer("app"), traces)
    if flush:
        provider.force_flush()


def config(**receiver: int) -> Config:
    return Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc="", **receiver),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        pricing={"gpt-4o-mini": PRICE},
    )


def scored(car: Sidecar, clock: FakeClock, spans: int, records: int) -> None:
    """Wait until ``spans`` are held, step past the grace, wait for ``records`` scored."""
    wait_until(lambda: car.assembler.stats().spans_held == spans)
    clock.now += 3.0
    wait_until(lambda: car.pipeline.stats().records == records)


INGEST = ("ragmon_spans_", "ragmon_requests_rejected", "ragmon_attributes_truncated", "ragmon_connections",
          "ragmon_queue", "ragmon_process", "ragmon_listener")


def rag_series(values: Samples) -> Samples:
    """ragmon's series but the ingest counters (they differ by protocol) and ``_created`` (wall clock)."""
    return {key: v for key, v in values.items()
            if key[0].startswith("ragmon_") and not key[0].startswith(INGEST) and not key[0].endswith("_created")}


@pytest.fixture
def processor() -> Iterator[tuple[RagmonSpanProcessor, FakeClock, CollectorRegistry]]:
    clock, registry = FakeClock(), CollectorRegistry()
    proc = RagmonSpanProcessor(config(), registry=registry, serve="127.0.0.1:0", clock=clock, environ={})
    try:
        yield proc, clock, registry
    finally:
        proc.shutdown()


def test_the_same_numbers_as_the_sidecar(processor: tuple[RagmonSpanProcessor, FakeClock, CollectorRegistry]) -> None:
    proc, clock, registry = processor
    sidecar_clock = FakeClock()
    with sidecar_thread(config(), sidecar_clock) as (car, _):
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
        send(SimpleSpanProcessor(exporter), proc)  # the same spans to both
        scored(car, sidecar_clock, 9, 3)
        assert car.ports.metrics is not None
        wire = samples(scrape(car.ports.metrics))
    clock.now += 3.0  # the sidecar's clock stepped as much
    assert proc.force_flush()  # finishes and scores the rooted traces: no need to wait out the grace
    assert proc.sidecar.pipeline.stats().records == 3
    assert proc.port is not None
    served = samples(scrape(proc.port))
    registered = samples(generate_latest(registry).decode())
    expected = rag_series(wire)
    assert len(expected) > 100
    assert value(expected, "ragmon_traces_total", **SV) == 3
    assert value(expected, "ragmon_retrieval_mrr", **SV, source="label", window="5m") == pytest.approx(0.5)
    assert rag_series(served) == expected
    assert rag_series(registered) == expected
    assert value(registered, "ragmon_spans_received_total", protocol="inprocess") == 9
    assert value(wire, "ragmon_spans_received_total", protocol="http") == 9


def test_the_compared_series_cover_the_rag_families(processor: tuple[RagmonSpanProcessor, FakeClock, CollectorRegistry]) -> None:
    proc, _, registry = processor
    send(proc)  # ends with provider.force_flush(): every trace is scored when it returns
    assert proc.sidecar.pipeline.stats().records == 3
    names = {name for name, _ in rag_series(samples(generate_latest(registry).decode()))}
    for family in ("ragmon_traces_total", "ragmon_retrieval_hit_rate", "ragmon_retrieval_mrr", "ragmon_retrieval_recall_bucket",
                   "ragmon_retrieval_ndcg_bucket", "ragmon_request_duration_seconds_bucket", "ragmon_latency_seconds", "ragmon_tokens_total", "ragmon_cost_usd_total"):
        assert family in names, family


def test_shutdown_scores_every_trace_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inprocess, "HAND_OVER", 60.0)  # the spans stay in the buffer until shutdown
    registry = CollectorRegistry()
    proc = RagmonSpanProcessor(config(), registry=registry, clock=FakeClock(), environ={})
    assert proc.port is None  # registry mode only: nothing served
    send(proc, flush=False)
    before = samples(generate_latest(registry).decode())
    assert ("ragmon_spans_received_total", frozenset({("protocol", "inprocess")})) not in before
    proc.shutdown()  # the clock never moved past the grace: only the drain finishes them
    after = samples(generate_latest(registry).decode())
    assert value(after, "ragmon_traces_total", **SV) == 3
    assert value(after, "ragmon_spans_received_total", protocol="inprocess") == 9


def test_a_full_buffer_drops_and_counts_without_blocking() -> None:
    registry = CollectorRegistry()
    proc = RagmonSpanProcessor(config(max_queued_spans=4), registry=registry, clock=FakeClock(), environ={})
    release = threading.Event()

    async def stall() -> None:
        release.wait(30)  # blocks ragmon's loop: nothing is handed over meanwhile

    future = inprocess.asyncio.run_coroutine_threadsafe(stall(), proc._loop)
    try:
        started = time.perf_counter()
        send(proc, traces=TRACES * 3, flush=False)  # 27 spans into a buffer of 4: on_end only
        assert time.perf_counter() - started < 2.0
        assert not proc.force_flush(timeout_millis=100)  # the loop is stalled: flush times out
    finally:
        release.set()
        future.result(10)
    proc.shutdown()
    after = samples(generate_latest(registry).decode())
    assert value(after, "ragmon_spans_received_total", protocol="inprocess") == 4
    assert value(after, "ragmon_spans_rejected_total", protocol="inprocess", reason="overloaded") == 23


def _varied(tracer: otel_trace.Tracer) -> None:
    """Spans of every kind, a remote parent, an error, events, every attribute value type, long
    and non-ASCII values, attributes ragmon does not read."""
    parent = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True, trace_flags=TraceFlags(1))
    context = otel_trace.set_span_in_context(NonRecordingSpan(parent))
    with tracer.start_as_current_span("ask", context=context, kind=SpanKind.SERVER) as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "qué ventana de reembolso? " * 3)
        root.set_attribute("output.value", "x" * 100)  # past the bound: cut and counted
        root.set_attribute("http.route", "/ask")
        with tracer.start_as_current_span("retrieve", kind=SpanKind.CLIENT) as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", "d1")
            span.set_attribute("retrieval.documents.0.document.score", 0.9)
            span.set_attribute("retrieval.documents.1.document.id", "dö2")
            span.set_attribute("ragmon.relevant_document_ids", ["d1", "d7"])
            span.set_attribute("ragmon.grades", [2, 1])
            span.set_attribute("ragmon.flag", True)
            span.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.5})
            span.add_event("db.query.result", {"db.query.result.id": "d1", "db.query.result.rank": 1})
            span.add_event("other.event", {"x": 1})
            span.set_status(Status(StatusCode.ERROR, "boom"))
        for kind in (SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER):
            with tracer.start_as_current_span(f"step-{kind.name}-" + "n" * 60, kind=kind) as span:
                span.set_attribute("llm.token_count.prompt", 100)
                span.set_attribute("llm.model_name", "gpt-4o-mini")


@pytest.mark.parametrize("limit", [16_384, 40])
def test_spans_from_the_sdk_equal_the_decoders_reading_of_the_sdks_otlp(limit: int) -> None:
    """``to_span`` on SDK spans gives the ``Span`` values ``decode_protobuf`` gives for the
    body the SDK's OTLP exporter makes of them: every field and the same cuts; sizes within 5%
    (arrays of numbers are counted a little differently). Converted before they are encoded:
    encoding caches a UTF-8 copy in the SDK's non-ASCII strings, which ``getsizeof`` then
    counts. The resource's bytes count on the first span of each trace, as the decoder counts them."""
    selection = SpanSelection(SELECTION.attributes, AttributeFilter(frozenset({"ragmon.variant"})), SELECTION.events, limit)
    spans = record_spans(_varied, **{"ragmon.variant": "B"})
    resource = kept_resource(spans[0].resource.attributes, selection)
    firsts = {span.context.trace_id: span for span in reversed(spans)}  # each trace's first span
    converted = [to_span(span, selection, resource, count_resource=firsts[span.context.trace_id] is span) for span in spans]
    decoded = decode_protobuf(to_protobuf(spans), selection)
    for (kept, _), wire in zip(converted, decoded.spans, strict=True):
        assert kept is not None
        assert dataclasses.replace(kept, size=wire.size) == wire
        assert kept.size == pytest.approx(wire.size, rel=0.05)
    assert sum(cuts for _, cuts in converted) + resource.truncated == decoded.truncated
    assert (decoded.truncated > 0) == (limit < 100)  # the small bound cuts


def test_force_flush_scores_the_finished_traces_and_keeps_open_ones(
    processor: tuple[RagmonSpanProcessor, FakeClock, CollectorRegistry],
) -> None:
    proc, _, registry = processor
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("app")
    root = tracer.start_span("rag", attributes={"openinference.span.kind": "CHAIN"})  # open during the flush
    child = tracer.start_span("retrieve", context=otel_trace.set_span_in_context(root),
                              attributes={"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "d1"})
    child.end()
    send(proc)  # three finished traces, flushed at the end (the clock never moves)
    assert proc.sidecar.pipeline.stats().records == 3
    assert proc.sidecar.assembler.stats().spans_held == 1  # the open trace's child waits for its root
    assert value(samples(generate_latest(registry).decode()), "ragmon_traces_total", **SV) == 3
    root.end()
    assert proc.force_flush()
    assert proc.sidecar.pipeline.stats().records == 4


class _Into(SpanExporter):
    """Hands exported spans to a processor's ``on_end`` (to reuse exporter-based trace builders)."""

    def __init__(self, processor: SpanProcessor) -> None:
        self._processor = processor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._processor.on_end(span)
        return SpanExportResult.SUCCESS


def test_the_llm_judge_runs_in_process_with_the_same_numbers() -> None:
    responder = functools.partial(verdict_for, supported=(True, False, True), relevance="partial", relevant=lambda i: i == 1)
    with judge_server_thread(responder=responder, usage=(100, 20)) as server:
        judge = JudgeConfig(base_url=server.base_url, model="judge-model", sample_rate=1.0, concurrency=2)
        with running(judge) as (car, clock, _):
            cfg = dataclasses.replace(car.config, metrics=MetricsConfig(listen=""))
            proc_clock = FakeClock()
            proc = RagmonSpanProcessor(cfg, registry=CollectorRegistry(), clock=proc_clock, environ={})
            try:
                send_traces([exporter(car), _Into(proc)], 3)
                finish(car, clock, 3)
                wait_until(lambda: judged(car) == 3)
                proc_clock.now += 3.0
                assert proc.force_flush()
                wait_until(lambda: judged(proc.sidecar) == 3)
                assert proc.force_flush()  # the registry then shows what is judged by now, however busy the loop
                assert proc.registry is not None
                in_process = rag_series(samples(generate_latest(proc.registry).decode()))
                assert car.ports.metrics is not None
                wire = rag_series(samples(scrape(car.ports.metrics)))
            finally:
                proc.shutdown()
    assert len(server.requests) == 6  # 3 traces judged by each
    gen = {**SV, "source": "judge", "judge": "llm"}
    assert value(wire, "ragmon_faithfulness_sum", **gen) == pytest.approx(2.0, abs=1e-12)
    assert value(wire, "ragmon_judge_requests_total", evaluator="faithfulness", outcome="ok") == 3
    assert in_process == wire


def test_a_span_that_cannot_be_read_is_counted_not_raised_into_the_application() -> None:
    registry = CollectorRegistry()
    proc = RagmonSpanProcessor(config(), registry=registry, clock=FakeClock(), environ={})

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    [span] = record_spans(lambda tracer: tracer.start_span("rag").end())
    broken = ReadableSpan(name="rag", context=span.context, resource=span.resource,
                          attributes={"openinference.span.kind": Unprintable()})  # type: ignore[dict-item]
    proc.on_end(broken)
    proc.on_end(span)
    proc.shutdown()
    after = samples(generate_latest(registry).decode())
    assert value(after, "ragmon_spans_rejected_total", protocol="inprocess", reason="malformed_span") == 1
    assert value(after, "ragmon_spans_received_total", protocol="inprocess") == 1


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_SCALARS = st.one_of(_TEXT, st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False))
_VALUES = st.one_of(
    _SCALARS, st.lists(_TEXT, max_size=5), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    st.lists(st.floats(allow_nan=False), max_size=5), st.lists(st.booleans(), max_size=3),
)
_KEYS = st.sampled_from([
    "openinference.span.kind", "input.value", "llm.model_name", "retrieval.documents.0.document.id",
    "ragmon.relevant_document_ids", "gen_ai.usage.input_tokens", "http.route", "x" * 40 + ".ragmon",
])


@settings(SETTINGS, max_examples=60)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6), st.dictionaries(_KEYS, _VALUES, max_size=3),
       st.text(max_size=40), st.sampled_from([8, 24, 16_384]))
def test_any_sdk_attributes_read_as_the_decoder_reads_them(
    attributes: dict[str, Any], event: dict[str, Any], name: str, limit: int,
) -> None:
    """Every attribute value type the SDK takes, any text, any bound: ``to_span`` keeps, cuts
    and counts what the decoder does for the SDK's OTLP encoding of the same span."""
    selection = SpanSelection(SELECTION.attributes, AttributeFilter(frozenset({"ragmon.variant"})), SELECTION.events, limit)

    def build(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span(name, attributes=attributes) as span:
            span.add_event("db.query.result", event)

    [span] = record_spans(build, **{"ragmon.variant": "B" * 30})
    decoded = decode_protobuf(to_protobuf([span]), selection)
    resource = kept_resource(span.resource.attributes, selection)
    kept, cuts = to_span(span, selection, resource)
    assert kept is not None
    assert dataclasses.replace(kept, size=decoded.spans[0].size) == decoded.spans[0]
    assert cuts + resource.truncated == decoded.truncated
