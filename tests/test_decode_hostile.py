"""``ragmon.otlp.decode`` against hostile bodies: nesting, size accounting, JSON numbers and text.

Every shape is decoded from protobuf and from OTLP/JSON. Memory is measured for real
(``tracemalloc``: what the decoded spans hold once the request is freed) and compared with
``Span.size``, which the byte caps downstream trust.
"""

from __future__ import annotations

import base64
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span as PbSpan
from otel_helpers import record_spans, to_otlp_json, to_protobuf

from ragmon.conventions import SELECTION as CONVENTIONS
from ragmon.errors import DecodeError
from ragmon.otlp.decode import (
    MAX_EVENTS,
    MAX_VALUE_DEPTH,
    Decoded,
    SpanSelection,
    decode_json,
    decode_protobuf,
)
from ragmon.model import AttrValue, Span

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

SELECTION = replace(CONVENTIONS, events=CONVENTIONS.events | {"gen_ai.evaluation.result"})
TRACE_ID, SPAN_ID = b"\x01" * 16, b"\x02" * 8
EVENT = "gen_ai.evaluation.result"
Decode = Callable[[bytes, SpanSelection], Decoded]

# -- building bodies ------------------------------------------------------------------------------


def request_with(spans: Iterable[PbSpan] = (), service: AnyValue | None = None) -> ExportTraceServiceRequest:
    """One resource (with ``service.name`` when given), one scope, ``spans``."""
    request = ExportTraceServiceRequest()
    resource_spans: ResourceSpans = request.resource_spans.add()
    if service is not None:
        resource_spans.resource.attributes.add(key="service.name", value=service)
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


def pb_span(n: int = 1, name: str = "s", attributes: dict[str, AnyValue] | None = None) -> PbSpan:
    span = PbSpan(trace_id=TRACE_ID, span_id=n.to_bytes(8, "big"), name=name, start_time_unix_nano=1, end_time_unix_nano=2)
    for key, value in (attributes or {}).items():
        span.attributes.add(key=key, value=value)
    return span


def text(value: str) -> AnyValue:
    return AnyValue(string_value=value)


def array(values: Iterable[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(values)
    return value


def kvlist(pairs: Iterable[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


def nested_kvlist(depth: int) -> AnyValue:
    """``{"k": {"k": … "x"}}``, ``depth`` key-value lists deep."""
    value = text("x")
    for _ in range(depth):
        value = kvlist([("k", value)])
    return value


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON for ``request``: protobuf's JSON mapping with hex ids (as exporters send it)."""
    data = MessageToDict(request)

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("traceId", "spanId", "parentSpanId"):
                if isinstance(node.get(key), str):
                    node[key] = base64.b64decode(node[key]).hex()
            for child in node.values():
                fix(child)
        elif isinstance(node, list):
            for child in node:
                fix(child)

    fix(data)
    return json.dumps(data).encode()


def encodings(request: ExportTraceServiceRequest) -> list[tuple[Decode, bytes]]:
    return [(decode_protobuf, request.SerializeToString()), (decode_json, otlp_json(request))]


BOTH = pytest.mark.parametrize("fmt", ["protobuf", "json"])


def decode(request: ExportTraceServiceRequest, fmt: str, selection: SpanSelection = SELECTION) -> Decoded:
    if fmt == "protobuf":
        return decode_protobuf(request.SerializeToString(), selection)
    return decode_json(otlp_json(request), selection)


# -- measuring ------------------------------------------------------------------------------------


def traced(decoder: Decode, body: bytes, selection: SpanSelection) -> tuple[Decoded, int]:
    """Decode ``body``; the bytes its spans hold once everything else is freed (tracemalloc).

    The least of two decodes: a cache that outlives the request (upb's, grown now and then
    by a few KB) is not the spans' memory."""
    decoder(body, selection)  # warm caches, so only the spans are measured
    held: list[int] = []
    for _ in range(2):  # (no collection before: what it would free was never traced)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            decoded = decoder(body, selection)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        container = sys.getsizeof(decoded) + sys.getsizeof(decoded.spans) + sys.getsizeof(decoded.reasons)
        held.append(after - before - container)
        del decoded
    return decoder(body, selection), min(held)


def deep_size(spans: Iterable[Span]) -> int:
    """``sys.getsizeof`` of every distinct object the spans hold (shared ones once)."""
    seen: set[int] = set()
    total = 0
    stack: list[object] = []
    for span in spans:
        stack.append(span)
        stack.extend(getattr(span, f.name) for f in fields(Span) if f.name not in ("error", "size"))
        for event in span.events:
            stack.extend((event, event.name, event.time_ns, event.attributes))
    while stack:
        obj = stack.pop()
        if obj is None or obj is True or obj is False or id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, tuple):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
    return total


# -- 1. nesting -------------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """Levels of JSON objects and arrays."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _with_peak(call: Callable[[], Decoded]) -> tuple[Decoded, int]:
    """What ``call`` returns and the peak of Python memory it took (tracemalloc)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@BOTH
def test_a_deep_kvlist_is_cut_at_the_depth_cap_in_one_serialization(fmt: str) -> None:
    """28 levels (a body of a few hundred bytes) once took 2.66 GB and 5 s: each level was
    serialized and then escaped again by its parent. Bounded by memory (tracemalloc sees the
    objects the compiled decoder makes too), not by wall time."""
    request = request_with([pb_span(attributes={"input.value": nested_kvlist(28)})])
    decoded, peak = _with_peak(lambda: decode(request, fmt))
    assert peak < 1 << 20  # each level once kept its own serialization
    value = decoded.spans[0].attributes["input.value"]
    assert isinstance(value, str) and len(value) < 300
    tree = json.loads(value)
    assert _depth(tree) == MAX_VALUE_DEPTH  # nested lists are nested objects, not JSON strings
    innermost = tree
    for _ in range(MAX_VALUE_DEPTH - 1):
        innermost = innermost["k"]
    assert innermost == {"k": None}
    assert decoded.truncated == 1


def test_a_json_kvlist_nested_100_deep_answers_at_once() -> None:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range(100):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    span = {"traceId": TRACE_ID.hex(), "spanId": SPAN_ID.hex(), "attributes": [{"key": "input.value", "value": value}]}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    decoded, peak = _with_peak(lambda: decode_json(body, SELECTION))
    assert peak < 1 << 20
    assert _depth(json.loads(str(decoded.spans[0].attributes["input.value"]))) == MAX_VALUE_DEPTH
    assert decoded.truncated == 1


@BOTH
def test_arrays_nest_to_the_cap_too(fmt: str) -> None:
    value = text("x")
    for _ in range(MAX_VALUE_DEPTH + 5):
        value = array([value])
    decoded = decode(request_with([pb_span(attributes={"ragmon.a": value})]), fmt)
    kept: Any = decoded.spans[0].attributes["ragmon.a"]
    for _ in range(MAX_VALUE_DEPTH - 1):
        assert isinstance(kept, tuple) and len(kept) == 1
        kept = kept[0]
    assert kept == (None,) and decoded.truncated == 1


@BOTH
def test_structured_values_keep_their_shapes(fmt: str) -> None:
    """A key-value list is a JSON object string (arrays in it are lists, bytes hex), an array a
    tuple (a key-value list in it a JSON string)."""
    request = request_with([pb_span(attributes={
        "ragmon.kv": kvlist([("a", AnyValue(int_value=1)), ("b", array([text("x"), AnyValue(bool_value=True)])),
                             ("c", AnyValue(bytes_value=b"\x01\xff")), ("d", kvlist([("e", AnyValue())]))]),
        "ragmon.arr": array([text("x"), AnyValue(double_value=0.5), kvlist([("f", text("g"))]), array([AnyValue(int_value=7)])]),
        "ragmon.ids": array([text("d1"), text("d7")]),
    })])
    attributes = decode(request, fmt).spans[0].attributes
    assert json.loads(str(attributes["ragmon.kv"])) == {"a": 1, "b": ["x", True], "c": "01ff", "d": {"e": None}}
    assert attributes["ragmon.arr"] == ("x", 0.5, '{"f": "g"}', (7,))
    assert attributes["ragmon.ids"] == ("d1", "d7")


# -- 2. bounds: every kept value, name and event list ---------------------------------------------

LIMIT = 64
SMALL = replace(SELECTION, max_value_chars=LIMIT)


def _leaves(value: AttrValue) -> Iterable[str | bytes]:
    if isinstance(value, (str, bytes)):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _leaves(item)


@BOTH
@pytest.mark.parametrize(
    ("shape", "value"),
    [
        ("string", text("x" * 1000)),
        ("bytes", AnyValue(bytes_value=b"\xfe" * 1000)),
        ("array of strings", array([text("abc")] * 1000)),
        ("array of long strings", array([text("y" * 1000)] * 3)),
        ("array of numbers", array([AnyValue(int_value=2**62)] * 1000)),
        ("array of empty values", array([AnyValue()] * 1000)),
        ("array of arrays", array([array([AnyValue()])] * 1000)),
        ("array of bytes", array([AnyValue(bytes_value=b"\x00" * 40)] * 1000)),
        ("wide kvlist", kvlist([(f"k{i}", AnyValue(int_value=i)) for i in range(1000)])),
        ("kvlist of escapes", kvlist([("a", text("\x00\"\\" * 1000))])),
        ("kvlist of long keys", kvlist([("k" * 1000, text("v"))])),
        ("kvlist of bytes", kvlist([("b", AnyValue(bytes_value=b"\x01" * 1000))])),
        ("kvlist of non-ASCII", kvlist([("é", text("😀" * 1000))])),
    ],
)
def test_every_value_shape_is_cut_to_max_value_chars(fmt: str, shape: str, value: AnyValue) -> None:
    decoded = decode(request_with([pb_span(attributes={"ragmon.v": value, "ragmon.short": text("ok")})]), fmt, SMALL)
    kept = decoded.spans[0].attributes["ragmon.v"]
    assert decoded.truncated == 1, shape
    assert decoded.spans[0].attributes["ragmon.short"] == "ok"
    if isinstance(value, AnyValue) and value.HasField("kvlist_value"):
        assert isinstance(kept, str) and len(kept) <= LIMIT
        json.loads(kept)  # still JSON
    elif isinstance(kept, tuple):
        leaves = list(_leaves(kept))
        assert sum(len(leaf) for leaf in leaves) <= LIMIT and len(kept) <= LIMIT // 2
    else:
        assert isinstance(kept, (str, bytes)) and len(kept) == LIMIT


@BOTH
def test_an_array_is_cut_at_the_first_element_that_does_not_fit(fmt: str) -> None:
    """Elements after it are dropped even when a smaller one would fit: a prefix, in bounded time."""
    value = array([text("y" * 55), AnyValue(int_value=2**62), text(""), *[text("")] * 100_000])
    decoded = decode(request_with([pb_span(attributes={"ragmon.a": value})]), fmt, SMALL)
    assert decoded.spans[0].attributes["ragmon.a"] == ("y" * 55,) and decoded.truncated == 1


@BOTH
def test_values_within_the_limit_are_not_cut(fmt: str) -> None:
    exact = {
        "ragmon.s": text("x" * LIMIT),
        "ragmon.b": AnyValue(bytes_value=b"\x01" * LIMIT),
        "ragmon.kv": kvlist([("k", text("v" * (LIMIT - 9)))]),  # {"k": "v…"} is exactly LIMIT
        "ragmon.a": array([text("abc")] * (LIMIT // 7)),  # ["abc", …] fits
    }
    decoded = decode(request_with([pb_span(attributes=exact)]), fmt, SMALL)
    assert decoded.truncated == 0
    attributes = decoded.spans[0].attributes
    assert len(str(attributes["ragmon.kv"])) == LIMIT and attributes["ragmon.a"] == ("abc",) * (LIMIT // 7)


@BOTH
def test_an_attribute_with_a_key_longer_than_the_limit_is_dropped(fmt: str) -> None:
    decoded = decode(request_with([pb_span(attributes={"ragmon." + "k" * LIMIT: text("v"), "ragmon.k": AnyValue(int_value=3)})]), fmt, SMALL)
    assert decoded.spans[0].attributes == {"ragmon.k": 3} and decoded.truncated == 1


@BOTH
def test_span_name_and_service_name_are_cut_and_counted(fmt: str) -> None:
    request = request_with([pb_span(1, "n" * 1000), pb_span(2, "short")], service=text("s" * 1000))
    decoded = decode(request, fmt, SMALL)
    names = sorted(s.name for s in decoded.spans)
    assert names == ["n" * LIMIT, "short"]
    assert {s.service for s in decoded.spans} == {"s" * LIMIT}
    assert decoded.truncated == 2  # one name, one service.name (cut once for its resource)


@BOTH
def test_events_are_capped_per_span(fmt: str) -> None:
    span = pb_span()
    for i in range(MAX_EVENTS + 10):
        span.events.add(name="exception", time_unix_nano=i)  # not selected: not counted
        event = span.events.add(name=EVENT, time_unix_nano=i)
        event.attributes.add(key="gen_ai.evaluation.name", value=text("x" * 1000))
    decoded = decode(request_with([span]), fmt, SMALL)
    events = decoded.spans[0].events
    assert len(events) == MAX_EVENTS and [e.time_ns for e in events] == list(range(MAX_EVENTS))
    assert all(e.attributes["gen_ai.evaluation.name"] == "x" * LIMIT for e in events)
    assert decoded.truncated == MAX_EVENTS + 1  # every event attribute cut, and the event list once


# -- 2. size: everything counted, measured memory covered -------------------------------------------


@BOTH
@pytest.mark.parametrize(
    ("part", "grow"),
    [
        ("name", lambda r: setattr(r.resource_spans[0].scope_spans[0].spans[0], "name", "n" * 5000)),
        ("service", lambda r: r.resource_spans[0].resource.attributes.add(key="service.name", value=text("s" * 5000))),
        ("resource", lambda r: r.resource_spans[0].resource.attributes.add(key="ragmon.variant", value=text("v" * 5000))),
        ("bytes", lambda r: r.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="ragmon.b", value=AnyValue(bytes_value=b"b" * 5000))),
        ("array", lambda r: r.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="ragmon.a", value=array([text("a" * 100)] * 50))),
        ("kvlist", lambda r: r.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="ragmon.k", value=kvlist([("k", text("k" * 5000))]))),
        ("event", lambda r: r.resource_spans[0].scope_spans[0].spans[0].events.add(name=EVENT).attributes.add(key="e", value=text("e" * 5000))),
        ("number", lambda r: r.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="ragmon.n", value=AnyValue(int_value=2**62))),
        ("non-ASCII", lambda r: r.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="ragmon.u", value=text("😀" * 1250))),
    ],
)
def test_size_counts_every_kept_part(fmt: str, part: str, grow: Callable[[ExportTraceServiceRequest], None]) -> None:
    base = request_with([pb_span()])
    grown = request_with([pb_span()])
    grow(grown)
    small, large = decode(base, fmt).spans[0], decode(grown, fmt).spans[0]
    extra = deep_size([large]) - deep_size([small])
    assert extra > 0, part
    assert large.size - small.size >= extra, part


def _hostile() -> dict[str, ExportTraceServiceRequest]:
    """Shapes that cost far more memory than their kept text (the old ``Span.size`` missed them)."""
    shapes: dict[str, ExportTraceServiceRequest] = {}
    shapes["many tiny attributes"] = request_with([pb_span(attributes={f"ragmon.{i}": text("") for i in range(3000)})])
    shapes["many tiny numbers"] = request_with([pb_span(attributes={f"ragmon.{i}": AnyValue(int_value=2**62 + i) for i in range(3000)})])
    shapes["long names"] = request_with([pb_span(i, "n" * 200_000) for i in range(1, 6)])
    shapes["long bytes"] = request_with([pb_span(attributes={f"ragmon.b{i}": AnyValue(bytes_value=b"\xff" * 200_000) for i in range(5)})])
    shapes["big arrays"] = request_with([pb_span(attributes={
        "ragmon.ints": array([AnyValue(int_value=2**62)] * 20_000),
        "ragmon.empty": array([AnyValue()] * 20_000),
        "ragmon.nested": array([array([AnyValue()])] * 20_000),
        "ragmon.strings": array([text("ab")] * 20_000),
        "ragmon.kvlists": array([kvlist([("a", AnyValue())])] * 20_000),
    })])
    shapes["nested kvlists"] = request_with([pb_span(attributes={
        "input.value": nested_kvlist(30),
        "ragmon.wide": kvlist([(f"k{i}", text("\x00" * 10)) for i in range(20_000)]),
    })])
    span = pb_span()
    for i in range(300):
        event = span.events.add(name=EVENT, time_unix_nano=i)
        for j in range(5):
            event.attributes.add(key=f"a{j}", value=text("v" * 3000))
        for j in range(50):
            event.attributes.add(key=f"t{j}", value=AnyValue())
    shapes["many events with big attributes"] = request_with([span])
    shapes["long service.name"] = request_with([pb_span()], service=text("s" * 1_000_000))
    shapes["many minimal spans"] = request_with([pb_span(i, "") for i in range(1, 5001)])
    shapes["non-ASCII everywhere"] = request_with(
        [pb_span(1, "😀" * 50_000, {**{f"ragmon.😀{i}": text("😀" * 20) for i in range(500)}, "ragmon.big": text("😀" * 50_000),
                                     "ragmon.array": array([text("😀" * 50)] * 300)})],
        service=text("é" * 50_000),
    )
    return shapes


HOSTILE = _hostile()
AMPLIFICATION = 12
"""Memory the decoded spans of one body hold, at most, per byte of the body (many minimal spans
are the worst: ~11 on protobuf, ~30 bytes each on the wire, ~330 in Python objects)."""


@pytest.mark.parametrize("fmt", ["protobuf", "json"])
@pytest.mark.parametrize("shape", list(HOSTILE))
def test_size_covers_the_measured_memory_of_hostile_shapes(shape: str, fmt: str) -> None:
    decoder, body = encodings(HOSTILE[shape])[0 if fmt == "protobuf" else 1]
    decoded, held = traced(decoder, body, SELECTION)
    size = sum(span.size for span in decoded.spans)
    assert size >= held, f"{shape}: Span.size {size} < measured {held}"
    assert size >= deep_size(decoded.spans)
    assert held <= AMPLIFICATION * len(body) + 4096, f"{shape}: {held} bytes held for a {len(body)}-byte body"


def _rag(tracer: Any) -> None:
    with tracer.start_as_current_span("query") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "What is the refund window for annual plans?")
        root.set_attribute("output.value", "Annual plans can be refunded within 30 days. " * 6)
        root.set_attribute("ragmon.variant", "B")
        root.set_attribute("http.route", "/v1/ask")
        with tracer.start_as_current_span("embedding") as span:
            span.set_attribute("openinference.span.kind", "EMBEDDING")
            span.set_attribute("embedding.model_name", "text-embedding-3-small")
            span.set_attribute("llm.token_count.prompt", 11)
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("input.value", "refund window annual plans")
            for i in range(8):
                span.set_attribute(f"retrieval.documents.{i}.document.id", f"kb-{i:06d}#chunk-{i}")
                span.set_attribute(f"retrieval.documents.{i}.document.score", 0.9 - i / 20)
                span.set_attribute(f"retrieval.documents.{i}.document.content", "Refunds are issued to the original payment method. " * 6)
                span.set_attribute(f"retrieval.documents.{i}.document.metadata", json.dumps({"source": f"kb/{i}.md", "lang": "en"}))
            span.set_attribute("ragmon.relevant_document_ids", ["kb-000001#chunk-1", "kb-000004#chunk-4"])
            span.add_event(EVENT, {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.5})
            with tracer.start_as_current_span("qdrant.search") as db:
                db.set_attribute("db.system.name", "qdrant")
        with tracer.start_as_current_span("ChatOpenAI") as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("llm.model_name", "gpt-4o-mini")
            span.set_attribute("llm.input_messages.0.message.role", "user")
            span.set_attribute("llm.input_messages.0.message.content", "Context: ... " * 40)
            span.set_attribute("llm.token_count.prompt", 900)
            span.set_attribute("llm.token_count.completion", 60)
            with tracer.start_as_current_span("POST /v1/chat/completions") as http:
                http.set_attribute("http.request.method", "POST")


@pytest.mark.parametrize("fmt", ["protobuf", "json"])
def test_size_stays_close_to_the_memory_of_real_sdk_spans(fmt: str) -> None:
    """Conservative, but not so much that the byte caps stop being useful."""
    spans = [s for _ in range(20) for s in record_spans(_rag, service="rag-api", **{"ragmon.variant": "B", "host.name": "h"})]
    body = to_protobuf(spans) if fmt == "protobuf" else to_otlp_json(spans)
    decoder = decode_protobuf if fmt == "protobuf" else decode_json
    decoded, held = traced(decoder, body, SELECTION)
    assert len(decoded.spans) == len(spans) and decoded.truncated == 0
    size = sum(span.size for span in decoded.spans)
    assert held <= size <= 3 * held


# -- 3. JSON numbers, text and ids --------------------------------------------------------------------


def _json_body(span: dict[str, Any], resource: Any = None) -> bytes:
    full = {"traceId": TRACE_ID.hex(), "spanId": SPAN_ID.hex(), **span}
    resource_spans: dict[str, Any] = {"scopeSpans": [{"spans": [full]}]}
    if resource is not None:
        resource_spans["resource"] = resource
    return json.dumps({"resourceSpans": [resource_spans]}).encode()


def _attr(value: Any) -> dict[str, Any]:
    return {"attributes": [{"key": "ragmon.x", "value": value}]}


INTEGER_FIELDS = ["startTimeUnixNano", "endTimeUnixNano", "flags", "kind"]
BAD_NUMBERS = [float("inf"), float("-inf"), float("nan"), 1e400, -1, 2**70, "12abc", 1.5, True, "", " 12", "1_000", "0x10", [1], {"a": 1}]


def _bad_numbers() -> Iterable[tuple[str, Any]]:
    for where in [*INTEGER_FIELDS, "status.code", "event.timeUnixNano", "intValue"]:
        for number in BAD_NUMBERS:
            if where in ("kind", "status.code", "intValue") and number == -1:
                continue  # signed fields: -1 is a valid number
            if where in ("kind", "status.code") and isinstance(number, str):
                continue  # enums: a string is a name (an unknown name reads as 0)
            yield where, number


@pytest.mark.parametrize(("where", "number"), list(_bad_numbers()), ids=repr)
def test_json_numbers_out_of_range_or_not_integers_reject_the_span(where: str, number: Any) -> None:
    if where == "status.code":
        span: dict[str, Any] = {"status": {"code": number}}
    elif where == "event.timeUnixNano":
        span = {"events": [{"name": EVENT, "timeUnixNano": number}]}
    elif where == "intValue":
        span = _attr({"intValue": number})
    else:
        span = {where: number}
    good = {"traceId": "03" * 16, "spanId": "04" * 8}
    body = json.loads(_json_body(span))
    body["resourceSpans"][0]["scopeSpans"][0]["spans"].append(good)
    decoded = decode_json(json.dumps(body).encode(), SELECTION)
    assert decoded.reasons == {"malformed_span": 1}, (where, number)
    assert [s.span_id for s in decoded.spans] == [b"\x04" * 8]


@pytest.mark.parametrize(
    ("span", "want"),
    [
        ({"startTimeUnixNano": "1700000000000000001", "endTimeUnixNano": 2**64 - 1}, {"start_ns": 1700000000000000001, "end_ns": 2**64 - 1}),
        ({"startTimeUnixNano": 1.7e18, "flags": "768"}, {"start_ns": 1_700_000_000_000_000_000, "flags": 768}),
        ({"kind": "SPAN_KIND_SERVER", "status": {"code": "STATUS_CODE_ERROR"}}, {"kind": 2, "error": True}),
        ({"kind": 3, "status": {"code": 2}}, {"kind": 3, "error": True}),
        ({"kind": "SPAN_KIND_FUTURE"}, {"kind": 0}),
    ],
)
def test_json_integers_as_strings_or_integral_numbers(span: dict[str, Any], want: dict[str, Any]) -> None:
    decoded = decode_json(_json_body(span), SELECTION)
    assert decoded.rejected == 0
    got = decoded.spans[0]
    assert {k: getattr(got, k) for k in want} == want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ({"intValue": "-9223372036854775808"}, -(2**63)),
        ({"intValue": 9223372036854775807}, 2**63 - 1),
        ({"doubleValue": "Infinity"}, float("inf")),
        ({"doubleValue": "1.5"}, 1.5),
        ({"doubleValue": 3}, 3.0),
        ({"boolValue": False}, False),
        ({"bytesValue": "AQI="}, b"\x01\x02"),
        ({}, None),
        ({"intValue": "5", "doubleValue": 1.5}, 5),  # several fields (OTLP sends one): the first in
        ({"doubleValue": 1.5, "stringValue": "s"}, "s"),  # stringValue, intValue, doubleValue, … order
        ({"intValue": None, "doubleValue": 1.5}, 1.5),
    ],
)
def test_json_attribute_values(value: dict[str, Any], want: Any) -> None:
    decoded = decode_json(_json_body(_attr(value)), SELECTION)
    assert decoded.rejected == 0 and decoded.spans[0].attributes["ragmon.x"] == want


@pytest.mark.parametrize(
    "value",
    [{"intValue": "9223372036854775808"}, {"doubleValue": 10**400}, {"doubleValue": True}, {"doubleValue": "x"},
     {"boolValue": 1}, {"stringValue": 5}, {"stringValue": [[["deep"]]]}, {"bytesValue": "a"}, {"bytesValue": 5},
     {"arrayValue": [1]}, {"arrayValue": {"values": {"a": 1}}}, {"kvlistValue": {"values": [5]}},
     {"kvlistValue": {"values": [{"key": 5}]}}, [1], "text"],
    ids=repr,
)
def test_json_attribute_values_of_the_wrong_type_reject_the_span(value: Any) -> None:
    decoded = decode_json(_json_body(_attr(value)), SELECTION)
    assert decoded.reasons == {"malformed_span": 1} and decoded.spans == []


@pytest.mark.parametrize(
    "span",
    [{"name": ["a"]}, {"name": {"a": [[[[]]]]}}, {"attributes": {"a": 1}}, {"attributes": [1]}, {"events": {}},
     {"events": [{"name": 5}]}, {"status": []}],
    ids=repr,
)
def test_json_wrong_types_in_a_span_reject_it(span: dict[str, Any]) -> None:
    decoded = decode_json(_json_body(span), SELECTION)
    assert decoded.reasons == {"malformed_span": 1} and decoded.spans == []


@pytest.mark.parametrize("resource", [{"attributes": {"a": 1}}, [], {"attributes": [{"key": "service.name", "value": {"stringValue": 3}}]}], ids=repr)
def test_json_wrong_types_in_a_resource_reject_its_spans(resource: Any) -> None:
    decoded = decode_json(_json_body({}, resource), SELECTION)
    assert decoded.reasons == {"malformed_span": 1} and decoded.spans == []


@pytest.mark.parametrize(
    "body",
    [b'{"resourceSpans": {}}', b'{"resourceSpans": [[]]}', b'{"resourceSpans": [{"scopeSpans": {}}]}',
     b'{"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}', b'{"resourceSpans": [{"scopeSpans": [3]}]}',
     b"\xff{}", b'{"a": "\xed\xa0\x80"}', '{"resourceSpans": []}'.encode("utf-16"), b"[" * 100_000],
    ids=repr,
)
def test_json_bodies_that_are_not_otlp_raise_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(body, SELECTION)


def test_json_body_may_start_with_a_bom() -> None:
    assert len(decode_json(b"\xef\xbb\xbf" + _json_body({}), SELECTION).spans) == 1


def test_lone_surrogates_become_replacement_characters() -> None:
    body = (
        b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"s\\udc00"}}]},'
        b'"scopeSpans":[{"spans":[{"traceId":"%s","spanId":"%s","name":"a\\ud800b","attributes":['
        b'{"key":"ragmon.\\ud800","value":{"stringValue":"\\udfff \\ud83d\\ude00"}},'
        b'{"key":"ragmon.kv","value":{"kvlistValue":{"values":[{"key":"\\udbff","value":{"arrayValue":{"values":[{"stringValue":"\\ud800"}]}}}]}}}]}]}]}]}'
    ) % (TRACE_ID.hex().encode(), SPAN_ID.hex().encode())
    span = decode_json(body, SELECTION).spans[0]
    assert (span.name, span.service) == ("a\ufffdb", "s\ufffd")
    assert span.attributes == {"ragmon.\ufffd": "\ufffd 😀", "ragmon.kv": '{"\ufffd": ["\ufffd"]}'}
    for value in (span.name, span.service, *span.attributes, *map(str, span.attributes.values())):
        value.encode("utf-8")  # label values and judge prompts are encoded later


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF", "\\uda12", "x\\\\ud800"])
def test_every_lone_surrogate_escape_is_replaced(escape: str) -> None:
    """High and low surrogates, either case; an escaped backslash before ``ud800`` is no escape."""
    body = _json_body({"name": "NAME"}).replace(b"NAME", escape.encode())
    name = decode_json(body, SELECTION).spans[0].name
    name.encode("utf-8")
    assert name == ("x\\ud800" if escape.startswith("x") else "\ufffd")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [("trace_id", bytes(16), "invalid_trace_id"), ("trace_id", b"\x01" * 15, "invalid_trace_id"), ("trace_id", b"", "invalid_trace_id"),
     ("span_id", bytes(8), "invalid_span_id"), ("span_id", b"\x01" * 9, "invalid_span_id"), ("parent_span_id", b"\x01" * 7, "invalid_parent_span_id")],
)
def test_protobuf_ids_of_the_wrong_length_or_zero_are_rejected(field: str, value: bytes, reason: str) -> None:
    bad = pb_span(1)
    setattr(bad, field, value)
    decoded = decode_protobuf(request_with([bad, pb_span(2)]).SerializeToString(), SELECTION)
    assert decoded.reasons == {reason: 1} and [s.span_id for s in decoded.spans] == [(2).to_bytes(8, "big")]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("traceId", "0102", "invalid_trace_id"), ("traceId", "00" * 16, "invalid_trace_id"), ("traceId", "zz" * 16, "invalid_trace_id"),
        ("traceId", "01" * 17, "invalid_trace_id"), ("traceId", 5, "invalid_trace_id"), ("traceId", ["01" * 16], "invalid_trace_id"),
        ("spanId", "01" * 7, "invalid_span_id"), ("spanId", "00" * 8, "invalid_span_id"), ("spanId", "AQIDBAUGBwg=x", "invalid_span_id"),
        ("spanId", None, "invalid_span_id"), ("parentSpanId", "01" * 9, "invalid_parent_span_id"), ("parentSpanId", "g" * 16, "invalid_parent_span_id"),
        ("parentSpanId", {}, "invalid_parent_span_id"),
    ],
)
def test_json_ids_of_the_wrong_length_zero_or_not_hex_are_rejected(field: str, value: Any, reason: str) -> None:
    decoded = decode_json(_json_body({field: value}), SELECTION)
    assert decoded.reasons == {reason: 1}


def test_json_repeated_keys_keep_the_last_value() -> None:
    body = _json_body({"name": "first"}).replace(b'"name": "first"', b'"name": "first", "name": "last"')
    attrs = _json_body(_attr({"stringValue": "a"})).replace(b'"attributes": [', b'"attributes": [{"key": "ragmon.x", "value": {"stringValue": "b"}}, ')
    assert decode_json(body, SELECTION).spans[0].name == "last"
    assert decode_json(attrs, SELECTION).spans[0].attributes == {"ragmon.x": "a"}


@pytest.mark.parametrize("target", [b"NAME", b"VALUE", b"ragmon.key", b"EVNT"])
@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\xc0\x80"])
def test_protobuf_strings_that_are_not_utf8_raise_decode_error(target: bytes, bad: bytes) -> None:
    span = pb_span(name="NAME", attributes={"ragmon.key": text("VALUE")})
    span.events.add(name="EVNT")
    body = request_with([span]).SerializeToString()
    assert decode_protobuf(body, SELECTION).spans
    with pytest.raises(DecodeError):
        decode_protobuf(body.replace(target, bad + target[len(bad):]), SELECTION)
