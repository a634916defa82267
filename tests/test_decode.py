"""``ragmon.otlp.decode``: OTLP protobuf and JSON bodies made by the real OpenTelemetry SDK."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from otel_helpers import record_spans, to_otlp_json, to_protobuf

from ragmon.errors import DecodeError
from ragmon.otlp.decode import SpanSelection, count_spans, decode_json, decode_protobuf
from ragmon.model import AttributeFilter

SELECTION = SpanSelection(
    attributes=AttributeFilter(frozenset({"openinference.span.kind"}), ("retrieval.documents.", "ragmon.")),
    resource=AttributeFilter(frozenset({"ragmon.variant"})),
    events=frozenset({"gen_ai.evaluation.result"}),
)
REMOTE_TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
REMOTE_SPAN_ID = 0xB7AD6B7169203331


def _rag_trace(tracer: otel_trace.Tracer) -> None:
    parent = SpanContext(REMOTE_TRACE_ID, REMOTE_SPAN_ID, is_remote=True, trace_flags=TraceFlags(1))
    ctx = otel_trace.set_span_in_context(NonRecordingSpan(parent))
    with tracer.start_as_current_span("ask", context=ctx) as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("http.route", "/ask")  # not wanted: must not be decoded
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", "d1")
            span.set_attribute("retrieval.documents.0.document.score", 0.9)
            span.set_attribute("ragmon.relevant_document_ids", ["d1", "d7"])
            span.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.5})
            span.add_event("other.event", {"x": 1})
            span.set_status(Status(StatusCode.ERROR, "boom"))


@pytest.fixture(scope="module")
def spans():  # type: ignore[no-untyped-def]
    return record_spans(_rag_trace, service="rag-api", **{"ragmon.variant": "B", "host.name": "h"})


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_decodes_what_ragmon_reads_and_nothing_else(spans, encoding: str) -> None:  # type: ignore[no-untyped-def]
    decoded = decode_protobuf(to_protobuf(spans), SELECTION) if encoding == "protobuf" else decode_json(to_otlp_json(spans), SELECTION)
    assert decoded.rejected == 0
    by_name = {s.name: s for s in decoded.spans}
    root, retrieve = by_name["ask"], by_name["retrieve"]
    assert root.trace_id == REMOTE_TRACE_ID.to_bytes(16, "big")
    assert root.parent_span_id == REMOTE_SPAN_ID.to_bytes(8, "big")
    assert root.flags & 0x300 == 0x300 and root.has_remote_parent
    assert retrieve.parent_span_id == root.span_id and not retrieve.has_remote_parent
    assert root.attributes == {"openinference.span.kind": "CHAIN"}
    assert retrieve.attributes == {
        "openinference.span.kind": "RETRIEVER",
        "retrieval.documents.0.document.id": "d1",
        "retrieval.documents.0.document.score": 0.9,
        "ragmon.relevant_document_ids": ("d1", "d7"),
    }
    assert retrieve.error and not root.error
    assert [e.name for e in retrieve.events] == ["gen_ai.evaluation.result"]
    assert retrieve.events[0].attributes == {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.5}
    assert root.service == "rag-api" and root.resource == {"ragmon.variant": "B"}
    original = {s.name: s for s in spans}
    assert root.start_ns == original["ask"].start_time and root.end_ns == original["ask"].end_time


def test_bad_ids_are_rejected_per_span_and_the_rest_kept(spans) -> None:  # type: ignore[no-untyped-def]
    request = ExportTraceServiceRequest.FromString(to_protobuf(spans))
    bad = request.resource_spans[0].scope_spans[0].spans[0]
    bad.trace_id = b"\x01\x02"
    decoded = decode_protobuf(request.SerializeToString(), SELECTION)
    assert decoded.rejected == 1 and decoded.reason == "invalid_trace_id"
    assert len(decoded.spans) == len(spans) - 1
    assert count_spans(request.SerializeToString()) == len(spans)


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05abc"])
def test_undecodable_protobuf_raises(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_protobuf(body, SELECTION)
    assert count_spans(body) is None


@pytest.mark.parametrize("body", [b"{", b"[1]", b'{"resourceSpans": 3}'])
def test_undecodable_json_raises(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(body, SELECTION)


def test_empty_bodies_decode_to_nothing() -> None:
    assert decode_protobuf(b"", SELECTION).spans == []
    assert decode_json(b"{}", SELECTION).spans == []


def test_json_ids_in_base64_are_accepted(spans) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(to_otlp_json(spans))
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    import base64

    span["traceId"] = base64.b64encode(bytes.fromhex(span["traceId"])).decode()
    decoded = decode_json(json.dumps(data).encode(), SELECTION)
    assert decoded.rejected == 0 and len(decoded.spans) == len(spans)


def test_malformed_json_span_is_rejected_alone(spans) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(to_otlp_json(spans))
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "soon"
    decoded = decode_json(json.dumps(data).encode(), SELECTION)
    assert decoded.rejected == 1 and decoded.reason == "malformed_span"
    assert len(decoded.spans) == len(spans) - 1


@pytest.mark.parametrize(("kind", "flags", "remote"), [(2, 0, True), (5, 0, True), (1, 0, False), (3, 0, False), (2, 0x100, False), (1, 0x300, True)])
def test_remote_parent_from_flags_else_from_span_kind(spans, kind: int, flags: int, remote: bool) -> None:  # type: ignore[no-untyped-def]
    """Producers that do not set flag 0x100: a SERVER or CONSUMER span's parent is remote."""
    request = ExportTraceServiceRequest.FromString(to_protobuf(spans))
    span = next(s for s in request.resource_spans[0].scope_spans[0].spans if s.name == "retrieve")
    span.kind, span.flags = kind, flags
    decoded = {s.name: s for s in decode_protobuf(request.SerializeToString(), SELECTION).spans}
    assert decoded["retrieve"].kind == kind
    assert decoded["retrieve"].has_remote_parent is remote


def test_all_zero_parent_id_means_no_parent(spans) -> None:  # type: ignore[no-untyped-def]
    request = ExportTraceServiceRequest.FromString(to_protobuf(spans))
    span = next(s for s in request.resource_spans[0].scope_spans[0].spans if s.name == "retrieve")
    span.parent_span_id = bytes(8)
    decoded = {s.name: s for s in decode_protobuf(request.SerializeToString(), SELECTION).spans}
    assert decoded["retrieve"].parent_span_id == b""
    data = json.loads(to_otlp_json(spans))
    for s in data["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        s["parentSpanId"] = "0" * 16
    assert all(s.parent_span_id == b"" for s in decode_json(json.dumps(data).encode(), SELECTION).spans)


def test_long_strings_are_cut_and_counted_and_sized(spans) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    def build(tracer):  # type: ignore[no-untyped-def]
        with tracer.start_as_current_span("r") as s:
            s.set_attribute("openinference.span.kind", "RETRIEVER")
            s.set_attribute("retrieval.documents.0.document.content", "x" * 5000)

    small = replace(SELECTION, max_value_chars=100)
    for decoded in (decode_protobuf(to_protobuf(record_spans(build)), small), decode_json(to_otlp_json(record_spans(build)), small)):
        span = decoded.spans[0]
        assert span.attributes["retrieval.documents.0.document.content"] == "x" * 100
        assert decoded.truncated == 1
        assert span.size >= 100 + len("retrieval.documents.0.document.content")


# -- the lean wire classes read what the official classes read ---------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402

from ragmon.otlp.wire import TraceRequest  # noqa: E402

_KEYS = st.sampled_from(["openinference.span.kind", "retrieval.documents.0.document.id", "ragmon.x", "http.route", "db.system", "ragmon.variant", "service.name"])
_SCALARS = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=20)),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(double_value=v), st.floats(allow_nan=False)),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=8)),
    st.just(AnyValue()),
)


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(values)
    return value


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


_VALUES = st.one_of(_SCALARS, st.builds(_array, st.lists(_SCALARS, max_size=3)), st.builds(_kvlist, st.lists(st.tuples(st.text(max_size=5), _SCALARS), max_size=3)))
_ATTRIBUTES = st.dictionaries(_KEYS, _VALUES, max_size=6)


@st.composite
def _requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        resource_spans = request.resource_spans.add()
        for key, value in draw(_ATTRIBUTES).items():
            resource_spans.resource.attributes.add(key=key, value=value)
        resource_spans.resource.dropped_attributes_count = 3  # not declared by the lean classes
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "lib"
        for _ in range(draw(st.integers(0, 3))):
            span = scope_spans.spans.add(
                trace_id=draw(st.sampled_from([bytes(range(1, 17)), b"\x01" * 16, b"", b"\x02"])),
                span_id=draw(st.sampled_from([bytes(range(1, 9)), b"\x03" * 8, bytes(8)])),
                parent_span_id=draw(st.sampled_from([b"", bytes(8), b"\x04" * 8, b"\x05"])),
                name=draw(st.text(max_size=8)),
                kind=draw(st.integers(0, 5)),
                start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                flags=draw(st.integers(0, 2**32 - 1)),
                trace_state="k=v",
            )
            for key, value in draw(_ATTRIBUTES).items():
                span.attributes.add(key=key, value=value)
            span.status.code = draw(st.integers(0, 2))
            for name in draw(st.lists(st.sampled_from(["gen_ai.evaluation.result", "exception"]), max_size=2)):
                event = span.events.add(name=name, time_unix_nano=7)
                for key, value in draw(_ATTRIBUTES).items():
                    event.attributes.add(key=key, value=value)
            span.links.add(trace_id=b"\x09" * 16, span_id=b"\x09" * 8)
    return request


@settings(max_examples=150, deadline=None)
@given(_requests())
def test_lean_decode_equals_decode_through_the_official_classes(request: ExportTraceServiceRequest) -> None:
    """Same spans, attributes, events and rejects as the official classes read through JSON
    (an independent path: OTLP/JSON made by protobuf's own json_format)."""
    from google.protobuf import json_format

    body = request.SerializeToString()
    as_json = json_format.MessageToJson(request).encode()
    lean, reference = decode_protobuf(body, SELECTION), decode_json(as_json, SELECTION)
    assert lean.rejected == reference.rejected and lean.reasons == reference.reasons
    assert len(lean.spans) == len(reference.spans)
    for got, want in zip(lean.spans, reference.spans, strict=True):
        assert (got.trace_id, got.span_id, got.parent_span_id, got.name) == (want.trace_id, want.span_id, want.parent_span_id, want.name)
        assert (got.start_ns, got.end_ns, got.flags, got.kind, got.error) == (want.start_ns, want.end_ns, want.flags, want.kind, want.error)
        assert got.attributes == want.attributes and got.resource == want.resource and got.service == want.service
        assert got.events == want.events
    assert count_spans(body) == sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def test_lean_classes_parse_what_the_official_ones_write() -> None:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, kind=3, flags=0x301)
    span.attributes.add(key="a", value=AnyValue(string_value="first"))
    span.attributes.add(key="a", value=AnyValue(string_value="last"))  # OTLP forbids repeats; last wins
    lean = TraceRequest.FromString(request.SerializeToString())
    got = lean.resource_spans[0].scope_spans[0].spans[0]
    assert (got.trace_id, got.kind, got.flags) == (b"\x01" * 16, 3, 0x301)
    assert dict((k, v.string_value) for k, v in got.attributes.items()) == {"a": "last"}
