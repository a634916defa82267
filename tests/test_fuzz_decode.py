"""The decoder's contract, fuzzed: for ANY bytes, ``decode_protobuf``, ``decode_json`` and
``count_spans`` raise nothing but ``DecodeError``, and what they return is bounded.

Inputs: real OTLP bodies (made by the OpenTelemetry SDK) mutated byte by byte, random bytes,
hand-built protobuf (wrong wire types, unknown fields, deep nesting) and generated OTLP/JSON
with hostile values (huge and non-finite numbers, deep nesting, invalid UTF-8, lone
surrogates, ids of the wrong length or zero, wrong JSON types everywhere). Invariants of every
decoded body: valid non-zero ids, every kept string within ``max_value_chars``, no lone
surrogate, ``Span.size`` at least the spans' measured memory, decode time bounded.

The profile is derandomized with no example database: every run tries the same examples.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from otel_helpers import record_spans, to_protobuf
from test_decode_hostile import EVENT, SELECTION, _rag, deep_size, otlp_json

from ragmon.errors import DecodeError
from ragmon.otlp.decode import MAX_EVENTS, MAX_VALUE_DEPTH, Decoded, SpanSelection, count_spans, decode_json, decode_protobuf
from ragmon.model import AttrValue

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
MORE = settings(FUZZ, max_examples=500)
"""For byte-level mutations, which mostly end in a ``DecodeError`` (framing, UTF-8)."""
LIMITS = st.sampled_from([1, 2, 3, 7, 16, 64, 16_384])
SECONDS_PER_BYTE = 2e-5
"""Decode time allowed per body byte (plus half a second): linear, not exponential."""


def _fixed(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``request`` with the SDK's random ids, times and instance id made fixed, so that every
    run mutates the same bytes."""
    ids: dict[bytes, bytes] = {}

    def same(raw: bytes) -> bytes:
        return ids.setdefault(raw, (len(ids) + 1).to_bytes(len(raw), "big")) if raw else raw

    for resource_spans in request.resource_spans:
        attributes = [kv for kv in resource_spans.resource.attributes if kv.key != "service.instance.id"]
        del resource_spans.resource.attributes[:]
        resource_spans.resource.attributes.extend(attributes)
        for scope_spans in resource_spans.scope_spans:
            for n, span in enumerate(scope_spans.spans):
                span.trace_id, span.span_id, span.parent_span_id = same(span.trace_id), same(span.span_id), same(span.parent_span_id)
                span.start_time_unix_nano, span.end_time_unix_nano = 1_700_000_000 * 10**9 + n, 1_700_000_001 * 10**9 + n
                for event in span.events:
                    event.time_unix_nano = 1_700_000_000 * 10**9
    return request


def _seeds() -> tuple[list[bytes], list[bytes]]:
    request = _fixed(ExportTraceServiceRequest.FromString(to_protobuf(record_spans(_rag, service="rag-api", **{"ragmon.variant": "B"}))))
    plain = ExportTraceServiceRequest()
    plain.CopyFrom(request)
    value = AnyValue(string_value="x")
    for i in range(12):
        outer = AnyValue()
        outer.kvlist_value.values.add(key=f"k{i}", value=value)
        outer.kvlist_value.values.add(key="b", value=AnyValue(bytes_value=b"\x00\xff"))
        value = outer
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="ragmon.nested", value=value)
    array = AnyValue()
    array.array_value.values.extend([AnyValue(int_value=-5), AnyValue(double_value=1.5), value])
    span.attributes.add(key="ragmon.array", value=array)
    return [plain.SerializeToString(), request.SerializeToString()], [otlp_json(plain), otlp_json(request)]


PROTOBUF_SEEDS, JSON_SEEDS = _seeds()


# -- invariants -------------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """Levels of tuples, lists and dicts (a key-value list's JSON text is parsed)."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return 0
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _check_value(value: AttrValue, limit: int) -> None:
    leaves: list[str | bytes] = []
    stack: list[AttrValue] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, (str, bytes)):
            leaves.append(item)
            if isinstance(item, str):
                item.encode("utf-8")  # no lone surrogate
    assert sum(len(leaf) for leaf in leaves) <= limit, (limit, value)
    assert _depth(value) <= MAX_VALUE_DEPTH


def _check_attributes(attributes: Any, limit: int) -> None:
    for key, value in attributes.items():
        assert len(key) <= limit
        key.encode("utf-8")
        _check_value(value, limit)


def check(decoder: Callable[[bytes, SpanSelection], Decoded], body: bytes, selection: SpanSelection) -> Decoded | None:
    """Decode ``body`` and check every invariant; None when it raised ``DecodeError``."""
    started = time.perf_counter()
    try:
        decoded = decoder(body, selection)
    except DecodeError:
        event("DecodeError")
        return None
    event(f"decoded: {'spans' if decoded.spans else 'no span'}, {'rejects' if decoded.rejected else 'no reject'}, {'cuts' if decoded.truncated else 'no cut'}")
    assert time.perf_counter() - started < 0.5 + SECONDS_PER_BYTE * len(body)
    limit = selection.max_value_chars
    assert decoded.rejected == sum(decoded.reasons.values()) and set(decoded.reasons) <= {
        "invalid_trace_id", "invalid_span_id", "invalid_parent_span_id", "malformed_span"}
    for span in decoded.spans:
        assert len(span.trace_id) == 16 and any(span.trace_id)
        assert len(span.span_id) == 8 and any(span.span_id)
        assert span.parent_span_id == b"" or (len(span.parent_span_id) == 8 and any(span.parent_span_id))
        assert 0 <= span.start_ns < 2**64 and 0 <= span.end_ns < 2**64 and 0 <= span.flags < 2**32
        for text in (span.name, span.service):
            assert len(text) <= limit
            text.encode("utf-8")
        _check_attributes(span.attributes, limit)
        _check_attributes(span.resource, limit)
        assert len(span.events) <= MAX_EVENTS
        for kept in span.events:
            assert kept.name in selection.events
            _check_attributes(kept.attributes, limit)
    assert sum(span.size for span in decoded.spans) >= deep_size(decoded.spans)
    return decoded


def check_protobuf(body: bytes, selection: SpanSelection) -> None:
    decoded = check(decode_protobuf, body, selection)
    counted = count_spans(body)
    if decoded is None:
        assert counted is None
    else:
        assert counted == len(decoded.spans) + decoded.rejected


# -- mutated real payloads --------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed body with 1-6 edits (mostly one): flip, insert, delete, truncate, splice, change a
    wire type."""
    body = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 6]))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice", "wire type", "byte"]))
        at = draw(st.integers(0, max(len(body) - 1, 0)))
        if op == "flip":
            if body:
                body[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            if body:
                body[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x22, 0x5C, 0x7B, 0x5B, 0xED]))
        elif op == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del body[at : at + draw(st.integers(1, 64))]
        elif op == "truncate":
            del body[at:]
        elif op == "splice":
            other = draw(st.sampled_from(seeds))
            start = draw(st.integers(0, len(other) - 1))
            body[at:at] = other[start : start + draw(st.integers(1, 400))]
        elif body:  # wire type: the low 3 bits of a tag byte
            body[at] = (body[at] & ~7) | draw(st.integers(0, 7))
    return bytes(body)


@MORE
@given(mutated(PROTOBUF_SEEDS), LIMITS)
def test_mutated_protobuf_bodies(body: bytes, limit: int) -> None:
    check_protobuf(body, replace(SELECTION, max_value_chars=limit))
    check(decode_json, body, SELECTION)


@MORE
@given(mutated(JSON_SEEDS), LIMITS)
def test_mutated_json_bodies(body: bytes, limit: int) -> None:
    check(decode_json, body, replace(SELECTION, max_value_chars=limit))
    check_protobuf(body, SELECTION)


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(body: bytes) -> None:
    check_protobuf(body, SELECTION)
    check(decode_json, body, SELECTION)


# -- hand-built protobuf ----------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    if wire == 2:
        payload = _varint(len(payload)) + payload
    return _varint(number << 3 | wire) + payload


_PAYLOADS = {
    0: st.integers(0, 2**64 - 1).map(_varint),
    1: st.binary(min_size=8, max_size=8),
    3: st.just(b""),  # start group (deprecated)
    4: st.just(b""),  # end group, unmatched
    5: st.binary(min_size=4, max_size=4),
    6: st.binary(max_size=4),  # not a wire type
    7: st.binary(max_size=4),
}
_SCALAR_FIELDS = st.sampled_from(sorted(_PAYLOADS)).flatmap(
    lambda wire: st.builds(lambda n, p: _field(n, wire, p), st.integers(1, 16), _PAYLOADS[wire])
)
"""A field of any wire type but 2: on a declared message field it is the wrong wire type."""


def _message(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A message: length-delimited fields holding ``children``, and fields of other wire types."""
    field = st.one_of(st.builds(_field, st.integers(1, 16), st.just(2), children), _SCALAR_FIELDS)
    return st.lists(field, max_size=4).map(b"".join)


_LEAVES = st.one_of(st.binary(max_size=24), st.sampled_from([b"\x01" * 16, b"\x02" * 8, bytes(16), bytes(8), b"ragmon.x", EVENT.encode()]))
_TREES = st.recursive(_LEAVES, _message, max_leaves=40)


@st.composite
def _deep(draw: st.DrawFn) -> bytes:
    """A valid span whose attribute is an array/kvlist chain up to 150 deep (past upb's limit),
    encoded by hand (the protobuf classes refuse to copy so deep a message)."""
    value = _field(1, 2, b"x")  # AnyValue.string_value
    for kind in draw(st.integers(0, 150).flatmap(lambda n: st.lists(st.booleans(), min_size=n, max_size=n))):
        if kind:  # AnyValue.kvlist_value: KeyValueList.values: KeyValue{key, value}
            value = _field(6, 2, _field(1, 2, _field(1, 2, b"k") + _field(2, 2, value)))
        else:  # AnyValue.array_value: ArrayValue.values
            value = _field(5, 2, _field(1, 2, value))
    attribute = _field(1, 2, b"ragmon.deep") + _field(2, 2, value)
    span = _field(1, 2, b"\x01" * 16) + _field(2, 2, b"\x02" * 8) + _field(9, 2, attribute)
    return _field(1, 2, _field(2, 2, _field(2, 2, span)))  # request > resource spans > scope spans > span


@FUZZ
@given(st.one_of(_TREES, _deep()), LIMITS)
def test_hand_built_protobuf(body: bytes, limit: int) -> None:
    check_protobuf(body, replace(SELECTION, max_value_chars=limit))


# -- generated OTLP/JSON with hostile values ---------------------------------------------------------

def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], one_in: int) -> st.SearchStrategy[Any]:
    """``bad`` once in ``one_in`` draws, else ``good`` (``one_of`` cannot weigh its branches)."""
    return st.integers(0, one_in - 1).flatmap(lambda n: bad if n == one_in // 2 else good)  # not 0: hypothesis favours bounds


_PLAIN = st.text(max_size=12)
_TEXT = _mostly(
    st.one_of(_PLAIN, st.text(max_size=40).map(lambda t: t * 7)),
    st.builds(lambda a, b: a + b, _PLAIN, st.text(st.characters(codec=None, categories=["Cs"]), min_size=1, max_size=2)),
    4,
)
"""Text, a quarter of it with lone surrogates (``"\\ud800"`` escapes in the body)."""
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e400, -1e400, 1.5, 2**63, 2**64, -1, 0, 10**400]),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["12abc", "", " 7", "1_0", "0x1", "NaN", "Infinity", "-0", "1e3", "١٢"]),
)
_ANYTHING = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8,
)
"""Any JSON value: what a hostile producer puts where OTLP expects something else."""


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON tree, parents first."""
    found: list[tuple[Any, Any]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            found.append((item, key))
            stack.append(child)
    return found


@st.composite
def json_replaced(draw: st.DrawFn) -> bytes:
    """A real OTLP/JSON body with 1-3 of its values (anywhere: ids, times, attributes, the
    structure itself) replaced by hostile JSON values."""
    tree = json.loads(draw(st.sampled_from(JSON_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(tree)
        container, key = slots[draw(st.integers(0, len(slots) - 1))]
        container[key] = draw(_ANYTHING)
    return json.dumps(tree).encode("utf-8", "surrogatepass")


@FUZZ
@given(json_replaced(), LIMITS)
def test_real_json_with_values_replaced(body: bytes, limit: int) -> None:
    check(decode_json, body, replace(SELECTION, max_value_chars=limit))

_KEYS = st.one_of(st.sampled_from(["ragmon.x", "ragmon.relevant_document_ids", "input.value", "ragmon.variant", "service.name", "http.route"]),
                  _TEXT.map(lambda t: "ragmon." + t))


def _any_values(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda v: {"arrayValue": {"values": v}}, st.lists(inner, max_size=4)),
        st.builds(lambda kv: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kv]}}, st.lists(st.tuples(_TEXT, inner), max_size=4)),
    )


_INT64 = st.integers(-(2**63), 2**63 - 1)
_GOOD_LEAF = st.one_of(
    st.builds(lambda v: {"stringValue": v}, _TEXT),
    st.builds(lambda v: {"intValue": v}, st.one_of(_INT64, _INT64.map(str))),
    st.builds(lambda v: {"doubleValue": v}, st.one_of(st.floats(), st.sampled_from(["NaN", "Infinity", "-Infinity", "2.5"]), st.integers(-9, 9))),
    st.builds(lambda v: {"boolValue": v}, st.booleans()),
    st.builds(lambda v: {"bytesValue": v}, st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())),
    st.just({}),
)
_BAD_LEAF = st.one_of(
    st.builds(lambda v: {"intValue": v}, _NUMBERS),
    st.builds(lambda v: {"doubleValue": v}, st.one_of(st.just(10**400), _NUMBERS, _ANYTHING)),
    st.builds(lambda v: {"boolValue": v}, _NUMBERS),
    st.builds(lambda v: {"bytesValue": v}, _TEXT),
    st.builds(lambda v: {"stringValue": v}, st.one_of(_NUMBERS, st.lists(_TEXT, min_size=1))),
    _ANYTHING,
)
_ANY_VALUE = st.recursive(_mostly(_GOOD_LEAF, _BAD_LEAF, 16), _any_values, max_leaves=6)
"""An OTLP/JSON ``AnyValue``, about one leaf in sixteen hostile (wrong type, out of range)."""
_ATTRIBUTES = st.one_of(st.lists(st.builds(lambda k, v: {"key": k, "value": v}, _KEYS, _ANY_VALUE), max_size=5), _ANYTHING)
_IDS = {
    n: st.one_of(
        st.binary(min_size=n, max_size=n).map(bytes.hex),
        st.binary(min_size=n, max_size=n).map(lambda b: base64.b64encode(b).decode()),
        st.just("00" * n), st.binary(max_size=2 * n).map(bytes.hex), st.just("zz" * n), st.just(""), _ANYTHING,
    )
    for n in (8, 16)
}
_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "traceId": _IDS[16], "spanId": _IDS[8], "parentSpanId": _IDS[8], "name": st.one_of(_TEXT, _ANYTHING),
    "kind": st.one_of(st.sampled_from(["SPAN_KIND_SERVER", "SPAN_KIND_X"]), _NUMBERS), "startTimeUnixNano": _NUMBERS,
    "endTimeUnixNano": _NUMBERS, "flags": _NUMBERS, "attributes": _ATTRIBUTES,
    "status": st.one_of(st.builds(lambda c: {"code": c}, st.one_of(st.just("STATUS_CODE_ERROR"), _NUMBERS)), _ANYTHING),
    "events": st.one_of(st.lists(st.builds(lambda n, t, a: {"name": n, "timeUnixNano": t, "attributes": a},
                                           st.one_of(st.just(EVENT), _TEXT), _NUMBERS, _ATTRIBUTES), max_size=3), _ANYTHING),
}


@st.composite
def _json_span(draw: st.DrawFn) -> Any:
    if draw(_mostly(st.just(False), st.just(True), 20)):
        return draw(_ANYTHING)
    span: dict[str, Any] = {  # a mostly valid span (ids valid half of the time), with 0-2 hostile fields
        "traceId": draw(_mostly(st.just("01" * 16), _IDS[16], 2)),
        "spanId": draw(_mostly(st.just("02" * 8), _IDS[8], 2)),
        "name": draw(_TEXT),
        "startTimeUnixNano": str(draw(st.integers(0, 2**64 - 1))),
        "attributes": draw(st.lists(st.builds(lambda k, v: {"key": k, "value": v}, _KEYS, _ANY_VALUE), max_size=3)),
        "events": [{"name": EVENT, "attributes": [{"key": "a", "value": {"stringValue": "x" * 20}}] if i < 2 else []}
                   for i in range(draw(st.sampled_from([0, 1, MAX_EVENTS + 1])))],
    }
    for key in draw(_mostly(st.just(0), st.integers(1, 2), 2).flatmap(lambda n: st.lists(st.sampled_from(list(_FIELDS)), min_size=n, max_size=n, unique=True))):
        span[key] = draw(_FIELDS[key])
    return span


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    resource_spans = []
    for _ in range(draw(st.integers(1, 2))):
        good = st.builds(lambda s, v: {"attributes": [{"key": "service.name", "value": {"stringValue": s}},
                                                        {"key": "ragmon.variant", "value": v}]}, _TEXT, _ANY_VALUE)
        resource = draw(_mostly(good, st.one_of(st.builds(lambda a: {"attributes": a}, _ATTRIBUTES), _ANYTHING), 6))
        spans = draw(st.lists(_json_span(), min_size=1, max_size=4))
        resource_spans.append({"resource": resource, "scopeSpans": [{"spans": spans}]})
    request: Any = {"resourceSpans": resource_spans}
    if draw(_mostly(st.just(False), st.just(True), 20)):
        request = draw(_ANYTHING)
    ascii_only = draw(_mostly(st.just(True), st.just(False), 6))  # False: surrogates become invalid UTF-8
    body = json.dumps(request, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if draw(_mostly(st.just(False), st.just(True), 8)):  # invalid UTF-8, mostly in a string (a span name)
        names = [i + len(b'"name": "') for i in range(len(body)) if body.startswith(b'"name": "', i)] or [0]
        at = draw(st.one_of(st.sampled_from(names), st.integers(0, len(body))))
        body = body[:at] + draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x80"])) + body[at:]
    return body


def _reference_integer(value: Any, low: int, high: int) -> int | None:
    """What OTLP/JSON allows in an integer field (None: the span is malformed), written apart
    from the decoder: an int (not a bool), a decimal string, an integral float; in range."""
    if value is None:
        return 0
    if type(value) is int:
        number = value
    elif type(value) is str and value[1:].isascii() and value.lstrip("-").isdigit() and len(value.lstrip("-")) <= 20 and value.count("-") <= 1 and not value.endswith("-"):
        number = int(value)
    elif type(value) is float and value == value and abs(value) != float("inf") and value == int(value):
        number = int(value)
    else:
        return None
    return number if low <= number <= high else None


_INTEGER_FIELDS = {
    "startTimeUnixNano": (0, 2**64 - 1), "endTimeUnixNano": (0, 2**64 - 1), "flags": (0, 2**32 - 1),
    "timeUnixNano": (0, 2**64 - 1), "intValue": (-(2**63), 2**63 - 1),
}


def _reference_double(value: Any) -> float | None:
    """A double: a number (not a bool) or a numeric string; an int too large for a float is
    malformed."""
    if type(value) in (int, str):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return value if type(value) is float else None


_NUMBER_VALUES = st.one_of(_NUMBERS, _ANYTHING, st.booleans(), st.integers(-(2**65), 2**65), st.just(10**400))


@FUZZ
@given(st.sampled_from([*sorted(_INTEGER_FIELDS), "doubleValue"]), _NUMBER_VALUES)
def test_json_number_fields_match_a_reference(field: str, value: Any) -> None:
    """Every integer field reads exactly the integers OTLP/JSON allows, ``doubleValue`` any
    number; anything else rejects the span as malformed, never another exception
    (``OverflowError`` was a 500)."""
    span: dict[str, Any] = {"traceId": "01" * 16, "spanId": "02" * 8}
    if field == "timeUnixNano":
        span["events"] = [{"name": EVENT, "timeUnixNano": value}]
    elif field in ("intValue", "doubleValue"):
        span["attributes"] = [{"key": "ragmon.x", "value": {field: value}}]
    else:
        span[field] = value
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    decoded = check(decode_json, body, SELECTION)
    assert decoded is not None
    if field in ("intValue", "doubleValue") and value is None:  # {"intValue": null}: an empty AnyValue
        assert decoded.spans[0].attributes == {"ragmon.x": None}
        return
    if field == "doubleValue":
        double = _reference_double(value)
        if double is None:
            assert decoded.reasons == {"malformed_span": 1}
        else:
            got = decoded.spans[0].attributes["ragmon.x"]
            assert type(got) is float and (got == double or got != got and double != double)
        return
    want = _reference_integer(value, *_INTEGER_FIELDS[field])
    if want is None:
        assert decoded.reasons == {"malformed_span": 1}
        return
    got = decoded.spans[0]
    read = {"startTimeUnixNano": got.start_ns, "endTimeUnixNano": got.end_ns, "flags": got.flags,
            "timeUnixNano": got.events[0].time_ns if got.events else None, "intValue": got.attributes.get("ragmon.x", 0)}
    assert read[field] == want and type(read[field]) is int


@FUZZ
@given(_TEXT, st.sampled_from([b"", b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\x80", b"\xf4\x90\x80\x80"]),
       st.booleans(), st.integers(0, 12))
def test_json_text_is_utf8_and_without_lone_surrogates(name: str, bad: bytes, ascii_only: bool, at: int) -> None:
    """A span name with lone surrogates (as escapes, or encoded: not UTF-8) and invalid bytes:
    the body is a ``DecodeError`` or every kept string is valid UTF-8."""
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "name": name}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    start = body.index(b'"name": "') + len(b'"name": "')
    at = min(start + at, body.index(b'"', start))
    decoded = check(decode_json, body[:at] + bad + body[at:], SELECTION)
    if decoded is not None:
        assert len(decoded.spans) == 1
    if not bad and (ascii_only or name.encode("utf-8", "surrogatepass") == name.encode("utf-8", "replace")):
        assert decoded is not None  # valid UTF-8 (escaped surrogates included) is read


@st.composite
def _deep_json(draw: st.DrawFn) -> bytes:
    value: Any = {"stringValue": "x"}
    for kind in draw(st.integers(0, 300).flatmap(lambda n: st.lists(st.booleans(), min_size=n, max_size=n))):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}} if kind else {"arrayValue": {"values": [value]}}
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "attributes": [{"key": "input.value", "value": value}]}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


@FUZZ
@given(st.one_of(json_bodies(), _deep_json()), LIMITS)
def test_generated_json_with_hostile_values(body: bytes, limit: int) -> None:
    check(decode_json, body, replace(SELECTION, max_value_chars=limit))


# -- both formats bound values the same way -------------------------------------------------------

_SCALARS = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.one_of(st.text(max_size=8), st.text(max_size=4).map(lambda t: t * 30))),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(double_value=v), st.floats(allow_nan=False)),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=30)),
    st.just(AnyValue()),
)


def _pb_containers(inner: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
    def array(values: list[AnyValue]) -> AnyValue:
        value = AnyValue()
        value.array_value.values.extend(values)
        return value

    def kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
        value = AnyValue()
        value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
        return value

    return st.one_of(st.builds(array, st.lists(inner, max_size=5)), st.builds(kvlist, st.lists(st.tuples(st.text(max_size=6), inner), max_size=5)))


_PB_VALUES = st.recursive(_SCALARS, _pb_containers, max_leaves=30)
_PB_KEYS = st.one_of(st.sampled_from(["ragmon.x", "input.value", "ragmon.variant", "http.route"]), st.text(max_size=8).map(lambda t: "ragmon." + t))


@st.composite
def _requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name", value=draw(_SCALARS))
    resource_spans.resource.attributes.add(key="ragmon.variant", value=draw(_PB_VALUES))
    for n in range(1, draw(st.integers(1, 3)) + 1):
        trace_id = draw(st.sampled_from([b"\x01" * 16, b"\x01" * 16, bytes(16), b"\x01" * 15]))
        span_id = draw(st.sampled_from([n.to_bytes(8, "big")] * 2 + [bytes(8), b"\x01" * 9]))
        span = resource_spans.scope_spans.add().spans.add(trace_id=trace_id, span_id=span_id, name=draw(st.text(max_size=20)))
        for key in draw(st.lists(_PB_KEYS, max_size=4, unique=True)):
            span.attributes.add(key=key, value=draw(st.one_of(_SCALARS, _PB_VALUES)))
        for i in range(draw(st.sampled_from([0, 1, 2, MAX_EVENTS + 2]))):
            event = span.events.add(name=EVENT)
            if i < 2:
                event.attributes.add(key=draw(st.text(max_size=6)), value=draw(_PB_VALUES))
    return request


@FUZZ
@given(_requests(), LIMITS)
def test_protobuf_and_json_keep_the_same_bounded_values(request: ExportTraceServiceRequest, limit: int) -> None:
    selection = replace(SELECTION, max_value_chars=limit)
    body = request.SerializeToString()
    check_protobuf(body, selection)
    got, want = decode_protobuf(body, selection), check(decode_json, otlp_json(request), selection)
    assert want is not None and (got.truncated, got.reasons) == (want.truncated, want.reasons)
    for a, b in zip(got.spans, want.spans, strict=True):
        assert (a.name, a.service, a.attributes, a.resource, a.events) == (b.name, b.service, b.attributes, b.resource, b.events)
