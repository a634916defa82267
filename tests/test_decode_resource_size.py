"""A resource's shared bytes (its kept attributes' dict and ``service.name``, one of each for
all its spans) are counted once per trace and body, not once per span: by both protobuf
decoders, the JSON decoder and in-process (once per trace and hand-over). Exact sizes; and per
trace, what the trace's spans hold (shared objects included) stays within the sizes it counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from otel_helpers import record_spans, to_otlp_json, to_protobuf
from prometheus_client import CollectorRegistry
from test_decode_hostile import SELECTION, Decode, _rag, deep_size, otlp_json, text
from test_sidecar import FakeClock

from ragmon.config import Config, MetricsConfig, ReceiverConfig
from ragmon.model import Span
from ragmon.otlp import decode
from ragmon.otlp.decode import decode_json, kept_resource, python_decode_protobuf
from ragmon.sidecar import inprocess
from ragmon.sidecar.inprocess import RagmonSpanProcessor

SERVICE, VARIANT = "rag-api", "v" * 500
SHARED = (decode._DICT + decode._ENTRY + len("ragmon.variant") + len(VARIANT)  # the kept attributes' dict
          + decode._STR + len(SERVICE))  # and service.name
"""The bytes a resource's spans share: one dict holding ``ragmon.variant`` and one
``service.name`` string (ASCII)."""
NAME = "retrieve"
PER_SPAN = decode._SPAN_BASE + decode._STR + len(NAME) + decode._EMPTY_DICT
"""A span of the bodies below beyond the shared bytes: the span, its ids and numbers, its name,
its (empty) attribute dict."""

Encode = Callable[[ExportTraceServiceRequest], bytes]
PROTOBUF: dict[str, Decode] = {"python": python_decode_protobuf}
if decode.DECODER == "compiled":
    PROTOBUF["compiled"] = decode.decode_protobuf
DECODERS = pytest.mark.parametrize(
    ("decoder", "encode"),
    [*((d, ExportTraceServiceRequest.SerializeToString) for d in PROTOBUF.values()), (decode_json, otlp_json)],
    ids=[*(f"protobuf-{name}" for name in PROTOBUF), "json"],
)


def body(traces: Sequence[int], *, kept: bool = True) -> ExportTraceServiceRequest:
    """One resource (``service.name``, ``ragmon.variant``, an attribute not kept) and a span per
    item of ``traces`` (its trace, numbered), all alike but their ids."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    if kept:
        resource_spans.resource.attributes.add(key="service.name", value=text(SERVICE))
        resource_spans.resource.attributes.add(key="ragmon.variant", value=text(VARIANT))
    resource_spans.resource.attributes.add(key="host.name", value=text("h" * 300))
    resource_spans.scope_spans.add().spans.extend(
        PbSpan(trace_id=trace.to_bytes(16, "big"), span_id=(n + 1).to_bytes(8, "big"), name=NAME,
               start_time_unix_nano=1, end_time_unix_nano=2)
        for n, trace in enumerate(traces)
    )
    return request


def _firsts(spans: Sequence[Span]) -> list[bool]:
    """Whether each span is the first of its trace."""
    seen: set[bytes] = set()
    out = []
    for span in spans:
        out.append(span.trace_id not in seen)
        seen.add(span.trace_id)
    return out


@DECODERS
def test_a_body_of_spans_of_one_trace_counts_the_resource_once(decoder: Decode, encode: Encode) -> None:
    spans = decoder(encode(body([7] * 1000)), SELECTION).spans
    assert len(spans) == 1000
    assert spans[0].resource == {"ragmon.variant": VARIANT} and spans[0].service == SERVICE
    assert all(span.resource is spans[0].resource and span.service is spans[0].service for span in spans)
    assert [span.size for span in spans] == [PER_SPAN + SHARED] + [PER_SPAN] * 999
    assert sum(span.size for span in spans) == 1000 * PER_SPAN + SHARED  # was 1000 * (PER_SPAN + SHARED)


@DECODERS
def test_each_trace_of_a_body_counts_the_resource_once(decoder: Decode, encode: Encode) -> None:
    traces = [n % 7 + 1 for n in range(700)]  # 7 traces, interleaved
    spans = decoder(encode(body(traces)), SELECTION).spans
    assert [span.size for span in spans] == [PER_SPAN + SHARED if first else PER_SPAN for first in _firsts(spans)]
    assert sum(span.size for span in spans) == 700 * PER_SPAN + 7 * SHARED


@DECODERS
def test_each_resource_of_a_body_counts_its_own_bytes_once_per_trace(decoder: Decode, encode: Encode) -> None:
    request = body([1, 2, 1])
    request.resource_spans.append(body([1, 1, 2]).resource_spans[0])  # a second resource, the same traces
    spans = decoder(encode(request), SELECTION).spans
    assert spans[0].resource is not spans[3].resource  # a dict of its own
    assert [span.size for span in spans] == [PER_SPAN + SHARED, PER_SPAN + SHARED, PER_SPAN,
                                             PER_SPAN + SHARED, PER_SPAN, PER_SPAN + SHARED]


@DECODERS
def test_a_resource_without_kept_attributes_shares_an_empty_dict(decoder: Decode, encode: Encode) -> None:
    spans = decoder(encode(body([1, 1, 2], kept=False)), SELECTION).spans
    shared = decode._EMPTY_DICT + decode._STR  # {} and ""
    assert [span.size for span in spans] == [PER_SPAN + shared, PER_SPAN, PER_SPAN + shared]


def test_json_counts_the_resource_on_a_traces_first_span_it_keeps() -> None:
    """A span rejected (malformed) does not count the resource for its trace: the next one does."""
    request = body([3, 3, 3])
    raw = otlp_json(request).replace(b'"startTimeUnixNano": "1"', b'"startTimeUnixNano": "x"', 1)
    decoded = decode_json(raw, SELECTION)
    assert decoded.reasons == {"malformed_span": 1}
    assert [span.size for span in decoded.spans] == [PER_SPAN + SHARED, PER_SPAN]


def _traces(spans: Sequence[Span]) -> Iterator[list[Span]]:
    by_trace: dict[bytes, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    return iter(by_trace.values())


@pytest.mark.parametrize("fmt", ["protobuf", "json"])
def test_every_trace_counts_at_least_what_its_spans_hold(fmt: str) -> None:
    """Real SDK spans, 20 traces in one body: whichever traces are let go, each one still held
    counts every object its spans hold, the shared resource included."""
    spans = [s for _ in range(20) for s in record_spans(_rag, service="rag-api", **{"ragmon.variant": "B" * 200})]
    raw = to_protobuf(spans) if fmt == "protobuf" else to_otlp_json(spans)
    decoded = (decode.decode_protobuf if fmt == "protobuf" else decode_json)(raw, SELECTION)
    traces = list(_traces(decoded.spans))
    assert len(traces) == 20
    for trace in traces:
        assert sum(span.size for span in trace) >= deep_size(trace)


# -- in-process: once per trace and hand-over ----------------------------------------------------


def _processor() -> RagmonSpanProcessor:
    config = Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen=""))
    return RagmonSpanProcessor(config, registry=CollectorRegistry(), clock=FakeClock(), environ={})


def _spans(provider: TracerProvider, traces: int, spans: int) -> None:
    tracer = provider.get_tracer("app")
    for _ in range(traces):
        with tracer.start_as_current_span("rag"):
            for _ in range(spans - 1):
                tracer.start_span(NAME).end()


def test_in_process_counts_the_resource_once_per_trace_and_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inprocess, "HAND_OVER", 60.0)  # the spans stay in the buffer until handed over
    proc = _processor()
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE, "ragmon.variant": VARIANT}))
        provider.add_span_processor(proc)
        resource = kept_resource(provider.resource.attributes, proc.sidecar.receiver_settings.selection)
        assert resource.size == SHARED
        _spans(provider, 1, 1000)  # one trace of 1000 spans
        buffered = list(proc._buffer)
        assert len(buffered) == 1000 and buffered[0].resource == resource.attributes
        assert all(span.resource is buffered[0].resource for span in buffered)  # one dict for all
        assert [span.size for span in buffered] == [_bare_size(buffered[0]) + SHARED] + [_bare_size(s) for s in buffered[1:]]
        assert proc._buffer_bytes == sum(_bare_size(span) for span in buffered) + SHARED
        _spans(provider, 4, 5)  # four more traces: each counts it once
        buffered = list(proc._buffer)
        assert [span.size for span in buffered] == [_bare_size(s) + (SHARED if first else 0) for s, first in zip(buffered, _firsts(buffered))]
        assert proc._buffer_bytes == sum(_bare_size(span) for span in buffered) + 5 * SHARED
        asyncio.run_coroutine_threadsafe(_hand_over(proc), proc._loop).result(10)
        assert proc._buffer == [] and proc._buffer_bytes == 0
        tracer = provider.get_tracer("app")
        with tracer.start_as_current_span("rag"):  # a trace whose spans straddle a hand-over
            tracer.start_span(NAME).end()
            asyncio.run_coroutine_threadsafe(_hand_over(proc), proc._loop).result(10)
            tracer.start_span(NAME).end()  # the first of its trace in this hand-over: counts it again
        assert [span.size for span in proc._buffer] == [_bare_size(proc._buffer[0]) + SHARED, _bare_size(proc._buffer[1])]
    finally:
        proc.shutdown()


async def _hand_over(proc: RagmonSpanProcessor) -> None:
    proc._hand_over()


def _bare_size(span: Span) -> int:
    """A buffered span's size without the resource's bytes: what the decoders count for it."""
    return decode._SPAN_BASE + decode._text_size(span.name) + decode._EMPTY_DICT
