"""The compiled protobuf decoder (``ragmon/otlp/_walker.pyx``) against the pure-Python one: for
every body, the same spans (every field), the same rejects, cuts and counts, or the same
``DecodeError`` with the same message.

Bodies: valid requests from the official protobuf classes (random attribute kinds, nested
arrays and key-value lists, the fields ragmon does not declare), bodies built field by field
from ragmon's wire schema (repeated and merged messages, ``oneof`` members replacing each other,
repeated map keys, unknown fields and wrong wire types everywhere, groups, overlong varints,
invalid UTF-8, nesting at upb's depth limit), those bodies and real SDK ones truncated and
mutated byte by byte, and payloads of the real OpenInference LangChain and OpenAI
instrumentations. Skipped when the extension is not built, except under CI (``CI=true``), where
a missing extension fails.
"""

from __future__ import annotations

import math
import os
import struct
import sys
from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from otel_helpers import to_protobuf
from test_conventions_real import instrumented_openai, langchain, openai_server  # noqa: F401 (fixtures)
from test_decode_hostile import EVENT, SELECTION
from test_fuzz_decode import _TREES, PROTOBUF_SEEDS, _deep, mutated
from test_fuzz_decode import _pb_containers as _containers

from ragmon.compiled import use_compiled_decoder
from ragmon.conventions import ConventionOptions
from ragmon.conventions.content import document_text
from ragmon.errors import DecodeError
from ragmon.model import AttributeFilter
from ragmon.otlp import decode
from ragmon.otlp.decode import MAX_EVENTS, Decoded, SpanSelection, python_decode_protobuf

try:
    from ragmon.otlp._walker import decode_protobuf as compiled_decode_protobuf
except ImportError as exc:  # not built: pip install . (or python setup.py build_ext --inplace)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise RuntimeError("the compiled decoder is not built (CI builds it: pip install -e .)") from exc
    pytest.skip(f"the compiled decoder is not built ({exc})", allow_module_level=True)

# openinference-instrumentation-langchain 0.1.80 calls a LangChain API that langchain-core 1.x deprecates
pytestmark = pytest.mark.filterwarnings(r"ignore:Calling \.text\(\) as a method is deprecated")
DIFF = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
WIDE = SpanSelection(
    attributes=AttributeFilter(keys=frozenset({"k", "", "service.name", "ragmon.x", "\ud800"}), prefixes=("ragmon.", "é")),
    resource=AttributeFilter(keys=frozenset({"service.name", "ragmon.variant", "k"}), prefixes=("x",)),
    events=frozenset({EVENT, "ev", ""}),
)
"""A selection with odd keys: empty, non-ASCII, a lone surrogate (matches nothing)."""
LEFT_OUT = replace(SELECTION, document_text=document_text(ConventionOptions(), lambda trace_id: trace_id[-1] % 2 == 0))
"""Documents' text left out of the traces whose id ends with an odd byte."""
SELECTIONS = st.sampled_from([SELECTION, WIDE, replace(SELECTION, events=frozenset()), LEFT_OUT,
                              SpanSelection(attributes=AttributeFilter(prefixes=("",)), events=frozenset({EVENT}))])
LIMITS = st.sampled_from([1, 2, 3, 7, 16, 64, 16_384])


def _canonical(value: Any) -> Any:
    """``value`` comparable with ``==`` (a float by its bits: NaN equals itself; a dict sorted)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return ("dict", sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_canonical(v) for v in value])
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [(f.name, _canonical(getattr(value, f.name))) for f in fields(value)])
    return (type(value).__name__, value)


def _outcome(decoder: Any, body: bytes, selection: SpanSelection) -> Any:
    try:
        decoded: Decoded = decoder(body, selection)
    except DecodeError as exc:
        return ("DecodeError", str(exc))
    return _canonical(decoded)


_FAULTS = ("Wire format was corrupt", "String field had bad UTF-8", "Exceeded upb_DecodeOptions_MaxDepth")


def same(body: bytes, selection: SpanSelection = SELECTION, message: bool = True) -> Any:
    """Both decoders' outcome for ``body``, asserted equal; returns it. ``message=False``: of a
    body with several faults, upb may name another one first (it checks a string's UTF-8 before
    finding that its length runs past the enclosing message), so only the error is compared."""
    want = _outcome(python_decode_protobuf, body, selection)
    got = _outcome(compiled_decode_protobuf, body, selection)
    if not message and want[0] == "DecodeError" and got[0] == "DecodeError":
        assert got[1].endswith(_FAULTS)
        return got
    assert got == want
    return got


def test_the_compiled_decoder_runs_unless_python_is_asked_for() -> None:
    wanted = "compiled" if use_compiled_decoder() else "python"
    assert decode.DECODER == wanted
    assert decode.decode_protobuf is (compiled_decode_protobuf if wanted == "compiled" else python_decode_protobuf)


# -- the wire, by hand --------------------------------------------------------------------------


def varint(n: int, pad: int = 0) -> bytes:
    """``n`` as a varint, with ``pad`` extra (overlong) bytes."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            break
    if pad:
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    return varint(number << 3 | wire) + (varint(len(payload)) + payload if wire == 2 else payload)


def ld(number: int, payload: bytes) -> bytes:
    return field(number, 2, payload)


def body_of(*spans: bytes, resource: bytes = b"") -> bytes:
    """A request: one resource (``resource``: its fields), one scope, ``spans`` (their fields)."""
    scope = b"".join(ld(2, s) for s in spans)
    return ld(1, ld(1, resource) + ld(2, scope))


IDS = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8)


def entry(key: bytes, value: bytes) -> bytes:
    return ld(1, key) + ld(2, value)


@pytest.mark.parametrize("span", [
    IDS + ld(9, entry(b"k", ld(1, b"a"))) + ld(9, entry(b"k", ld(1, b"b"))),  # repeated key: the last
    IDS + ld(9, entry(b"k", ld(1, b"a"))) + ld(9, entry(b"k", ld(1, b"b")) + field(9, 0, b"\x01")),  # unknown field: not in the map
    IDS + ld(9, entry(b"k", ld(1, b"a")) + ld(1, b"ragmon.x")),  # the key sent twice: the last
    IDS + ld(9, ld(2, ld(5, ld(1, ld(3, b"") + field(3, 0, b"\x05")))) + ld(1, b"k") + ld(2, ld(5, ld(1, ld(1, b"z"))))),  # merged array
    IDS + ld(9, entry(b"k", ld(5, ld(1, field(3, 0, b"\x07"))) + ld(1, b"s") + ld(5, ld(1, field(2, 0, b"\x02"))))),  # oneof: a new array
    IDS + ld(9, entry(b"k", ld(6, ld(1, entry(b"a", ld(1, b"1")))) + ld(6, ld(1, entry(b"a", ld(1, b"2")) + field(7, 0, b"\x00"))))),
    IDS + ld(9, entry(b"k", field(2, 0, varint(256)))) + ld(9, entry(b"ragmon.y", field(3, 0, varint(2**64 - 1)))),
    IDS + ld(9, entry(b"k", field(4, 1, struct.pack("<d", math.nan)))) + ld(9, entry(b"ragmon.z", field(4, 1, struct.pack("<d", -0.0)))),
    IDS + ld(9, entry(b"k", field(1, 0, b"\x01"))),  # a string field as a varint: unknown, not in the map
    IDS + ld(9, entry(b"k", field(3, 2, b"\x01"))),  # int as LEN: unknown inside the value: kept, null
    IDS + ld(9, entry(b"k", field(7, 3, b"") + field(7, 4, b""))),  # a group in the value
    IDS + ld(9, entry("é".encode(), ld(1, "ü".encode()))) + ld(9, entry(b"ragmon.\xc3\xa9", ld(7, b"\xff"))),
    IDS + ld(5, b"first") + ld(5, "nämé".encode()) + field(6, 0, varint(2**32 + 3)) + field(16, 5, b"\x01\x02\x03\x04"),
    IDS + ld(15, field(3, 0, b"\x02")) + ld(15, field(1, 2, b"x")),  # status merged: code 2 stays
    IDS + ld(15, field(3, 0, b"\x02")) + ld(15, field(3, 0, b"\x00")),  # the last code
    IDS + ld(15, field(3, 0, varint(2**32 + 2))),  # an int32: the low 32 bits, 2
    IDS + field(6, 0, varint(2**64 - 1)) + field(7, 1, b"\xff" * 8) + field(8, 0, b"\x01"),  # kind -1; end as a varint: unknown
    ld(9, entry(b"k", ld(1, b"a"))) + IDS,  # ids after the attributes
    IDS + ld(1, b"\x00" * 16),  # the last trace id: zero
    IDS + ld(4, bytes(8)),  # an all-zero parent: none
    IDS + ld(4, b"\x01" * 7),
    ld(1, b"\x01" * 16),
    IDS + ld(11, ld(2, EVENT.encode()) + field(1, 1, b"\x01" * 8) + ld(3, entry(b"a", ld(1, b"x")) + field(5, 0, b"\x01"))),
    IDS + ld(11, ld(3, entry(b"a", ld(1, b"x"))) + ld(2, b"other") + ld(2, EVENT.encode())),  # the event's last name
    IDS + b"".join(ld(11, ld(2, EVENT.encode()) + ld(3, entry(b"n", field(3, 0, varint(i))))) for i in range(MAX_EVENTS + 3)),
    IDS + ld(3, b"\xff") + field(12, 2, b"\xff") + field(10, 0, b"\x01"),  # undeclared: no UTF-8 check
])
def test_wire_corners(span: bytes) -> None:
    for selection in (SELECTION, WIDE):
        for limit in (3, 16_384):
            same(body_of(span, resource=ld(1, entry(b"service.name", ld(1, b"svc")))), replace(selection, max_value_chars=limit))


def test_flat_arrays_at_every_limit() -> None:
    """An array of ASCII strings and numbers is kept inline while its JSON width fits, else by
    the bounded walk (other sizes, cuts): the same choice at every limit around the widths."""
    arrays = [
        ld(1, ld(1, b"a" * 35)) + ld(1, field(3, 0, b"\x05")),
        ld(1, ld(1, b"abcdef")) + ld(1, ld(1, b"ghi")) + ld(1, field(2, 0, b"\x01")),
        ld(1, field(4, 1, struct.pack("<d", 0.5))) * 3 + ld(1, ld(1, b"")),
        ld(1, ld(1, "é".encode())) + ld(1, field(3, 0, b"\x05")),
        ld(1, ld(7, b"x")),
    ]
    span = IDS + b"".join(ld(9, entry(f"ragmon.a{i}".encode(), ld(5, array))) for i, array in enumerate(arrays))
    for limit in range(1, 100):
        same(body_of(span), replace(SELECTION, max_value_chars=limit))


@pytest.mark.parametrize("body", [
    b"", b"\x00", b"\x0a\x05", field(0, 0, b"\x01"), field(5, 4, b""), field(5, 3, b""), field(5, 3, b"") + field(6, 4, b""),
    field(5, 6, b""), field(5, 7, b""), field(5, 0, b"\xff" * 10 + b"\x01"), field(5, 0, b"\xff" * 9 + b"\x7f"),
    b"\xff\xff\xff\xff\x7f\x00", b"\x88\x80\x80\x80\x80\x00\x00", b"\x88\x80\x80\x80\x00\x00",  # tags: too large, 6 bytes, 5 bytes
    field(2**29 - 1, 0, b"\x00"), b"\x0b\x00\x01\x0c", b"\x0b\x03\x00\x00\x04\x0c", b"\x0b\x04\x0c",  # field 0 in a group: upb skips it
    b"\x0b\x0e\x0c", b"\x0b\x80\x80\x80\x80\x10\x00\x0c", b"\x0a" + b"\xff\xff\xff\xff\x0f", b"\x0a" + varint(0, pad=9),  # an overlong length
    b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", b"\x0a\x80\x80\x80\x80\x00", b"\x0a\x80\x80\x80\x80\x80\x00",
    field(5, 0, b"\x80" * 9 + b"\x02") + field(6, 1, b"\x01" * 8),
    field(7, 3, b"") * 100 + field(7, 4, b"") * 100, field(7, 3, b"") * 101 + field(7, 4, b"") * 101,
    ld(1, field(7, 3, b"") * 99 + field(7, 4, b"") * 99), ld(1, field(7, 3, b"") * 100 + field(7, 4, b"") * 100),
    body_of(IDS + ld(5, b"\xed\xa0\x80")), body_of(IDS + ld(5, b"\xc0\x80")), body_of(IDS + ld(5, b"\xf4\x90\x80\x80")),
    body_of(IDS + ld(5, b"\xe0\x80")), body_of(IDS + ld(5, "\U0010ffff".encode())), body_of(IDS + ld(9, entry(b"\xff", b""))),
    body_of(IDS, resource=ld(1, entry(b"k", ld(6, ld(1, ld(1, b"\xff")))))),
    body_of(IDS + ld(5, b"\xff"), resource=field(1, 3, b"") + field(1, 4, b"")),
    body_of(IDS + field(5, 0, b"\x01")),
])
def test_malformed_and_odd_bodies(body: bytes) -> None:
    same(body)
    same(body, WIDE)


@pytest.mark.parametrize("levels", [46, 47, 48])
@pytest.mark.parametrize("leaf", [ld(1, b"x"), b""])
def test_nesting_at_the_depth_limit(levels: int, leaf: bytes) -> None:
    value = leaf
    for _ in range(levels):  # the innermost value is 5 + 2 * levels deep
        value = ld(5, ld(1, value))
    outcome = same(body_of(IDS + ld(9, entry(b"ragmon.deep", value))))
    assert (outcome[0] == "DecodeError") == (levels == 48)
    value = leaf
    for n in range(levels * 2 // 3):
        value = ld(5, ld(1, value)) if n % 3 else ld(6, ld(1, entry(b"k", value)))
    same(body_of(IDS + ld(9, entry(b"ragmon.deep", value))))


# -- generated bodies ---------------------------------------------------------------------------

_SCHEMA: dict[str, list[tuple[int, str]]] = {
    "request": [(1, "resource_spans")],
    "resource_spans": [(1, "resource"), (2, "scope_spans")],
    "resource": [(1, "entry")],
    "entry": [(1, "key"), (2, "any")],
    "scope_spans": [(2, "span")],
    "span": [(1, "trace_id"), (2, "span_id"), (4, "parent"), (5, "name"), (6, "varint"), (7, "fixed64"), (8, "fixed64"),
             (9, "entry"), (11, "event"), (15, "status"), (16, "fixed32"), (3, "string")],
    "event": [(1, "fixed64"), (2, "event_name"), (3, "key_value")],
    "status": [(3, "varint"), (2, "string")],
    "key_value": [(1, "key"), (2, "any")],
    "any": [(1, "string"), (2, "varint"), (3, "varint"), (4, "fixed64"), (5, "array"), (6, "kvlist"), (7, "bytes")],
    "array": [(1, "any")],
    "kvlist": [(1, "key_value")],
}
"""ragmon's wire schema (``ragmon/otlp/wire.py``), with what a generated field holds."""
_WIRE = {"varint": 0, "fixed64": 1, "fixed32": 5}
_KEYS = st.one_of(
    st.sampled_from([b"service.name", b"ragmon.variant", b"input.value", b"output.value", b"k", b"", b"ragmon.x",
                     b"retrieval.documents.0.document.content", b"llm.token_count.prompt", "é".encode(), b"x",
                     b"retrieval.documents.0.document.id", b"retrieval.documents.0.document.metadata"]),
    st.text(max_size=6).map(str.encode),
)
_TEXT = st.one_of(st.text(max_size=10).map(str.encode), st.sampled_from([b"a" * 40, "é".encode() * 9, b"\xff", b"ab\xed\xa0\x80"]))
_LEAVES: dict[str, st.SearchStrategy[bytes]] = {
    "key": _KEYS,
    "string": _TEXT,
    "name": _TEXT,
    "event_name": st.one_of(st.sampled_from([EVENT.encode(), b"ev", b""]), _TEXT),
    "bytes": st.binary(max_size=12),
    "trace_id": st.sampled_from([b"\x01" * 16, b"\x01" * 16, bytes(16), b"\x01" * 15, b""]),
    "span_id": st.sampled_from([b"\x02" * 8, b"\x03" * 8, bytes(8), b"\x01" * 9]),
    "parent": st.sampled_from([b"\x04" * 8, bytes(8), b"", b"\x01" * 3]),
    "varint": st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2, 256, 2**31, 2**32 + 2, 2**63])).map(varint),
    "fixed64": st.binary(min_size=8, max_size=8),
    "fixed32": st.binary(min_size=4, max_size=4),
}


def _unknown(number: int) -> st.SearchStrategy[bytes]:
    """A field the message does not declare, or a declared one with another wire type."""
    return st.one_of(
        st.sampled_from([field(number, 0, varint(3)), field(number, 0, varint(1, pad=9)), field(number, 1, b"\x01" * 8),
                         field(number, 5, b"\x01" * 4)]),
        st.builds(lambda p: field(number + 16, 2, p), st.binary(max_size=6)),  # undeclared in every message
        st.just(field(number, 3, field(1, 0, b"\x01")) + field(number, 4, b"")),
    )


def message(kind: str, depth: int = 0) -> st.SearchStrategy[bytes]:
    """A ``kind`` message of ragmon's schema: declared fields in any order and number, some
    unknown or of another wire type; nested messages up to a few levels."""
    declared = _SCHEMA[kind]

    def one(choice: tuple[int, str]) -> st.SearchStrategy[bytes]:
        number, holds = choice
        if holds in _SCHEMA:
            if depth >= (7 if kind in ("any", "array", "kvlist", "key_value") else 8):
                return st.just(ld(number, b""))
            return message(holds, depth + 1).map(lambda b: ld(number, b))
        wire = _WIRE.get(holds, 2)
        return _LEAVES.get(holds, _TEXT).map(lambda b: field(number, wire, b))

    many = {"request": (1, 3), "resource_spans": (1, 4), "scope_spans": (1, 4), "span": (2, 12), "entry": (0, 3),
            "key_value": (0, 3), "resource": (0, 5), "event": (0, 4), "status": (0, 2), "any": (0, 2),
            "array": (0, 4), "kvlist": (0, 3)}[kind]
    fields_ = st.one_of(
        st.sampled_from(declared).flatmap(one),
        st.sampled_from(declared).flatmap(one),
        st.sampled_from(declared).flatmap(one),
        st.integers(1, 20).flatmap(_unknown),
    )
    prefix = st.just(IDS) if kind == "span" else st.just(b"")
    return st.tuples(prefix, st.lists(fields_, min_size=many[0], max_size=many[1])).map(lambda t: t[0] + b"".join(t[1]))


@pytest.mark.same_in_both_builds  # both decoders called by name
@DIFF
@given(message("request"), SELECTIONS, LIMITS)
def test_generated_wire_bodies(body: bytes, selection: SpanSelection, limit: int) -> None:
    same(body, replace(selection, max_value_chars=limit), message=False)


@pytest.mark.same_in_both_builds  # both decoders called by name
@DIFF
@given(message("request"), st.data())
def test_generated_bodies_cut_and_corrupted(body: bytes, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, max(len(body) - 1, 0)))
    same(body[:at], message=False)
    if body:
        broken = bytearray(body)
        broken[at] = data.draw(st.integers(0, 255))
        same(bytes(broken), data.draw(SELECTIONS), message=False)


_SCALARS = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.one_of(st.text(max_size=8), st.text(max_size=4).map(lambda t: t * 30))),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(double_value=v), st.floats()),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=30)),
    st.just(AnyValue()),
)


_VALUES = st.recursive(_SCALARS, _containers, max_leaves=30)
_ATTRIBUTE_KEYS = st.one_of(
    st.sampled_from(["ragmon.x", "input.value", "output.value", "ragmon.variant", "http.route", "openinference.span.kind",
                     "retrieval.documents.0.document.content", "retrieval.documents.1.document.id", "llm.model_name",
                     "retrieval.documents.0.document.id", "retrieval.documents.1.document.content",
                     "retrieval.documents.1.document.metadata", "reranker.output_documents.0.document.id",
                     "reranker.output_documents.0.document.content",
                     "gen_ai.usage.input_tokens", "k", "", "é", "service.name"]),
    st.text(max_size=8).map(lambda t: "ragmon." + t),
)


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    """A valid request from the official classes, with the fields ragmon does not declare set."""
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        resource_spans = request.resource_spans.add(schema_url=draw(st.sampled_from(["", "https://x"])))
        for key in draw(st.lists(st.sampled_from(["service.name", "ragmon.variant", "k", "x.y", "host"]), max_size=4)):
            resource_spans.resource.attributes.add(key=key, value=draw(st.one_of(_SCALARS, _VALUES)))
        resource_spans.resource.dropped_attributes_count = draw(st.integers(0, 3))
        for n in range(1, draw(st.integers(1, 4)) + 1):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(st.sampled_from(["", "openinference.instrumentation.langchain"]))
            span = scope_spans.spans.add(
                trace_id=draw(st.sampled_from([b"\x01" * 16, b"\x05" * 16, bytes(16)])),
                span_id=draw(st.sampled_from([n.to_bytes(8, "big")] * 3 + [bytes(8)])),
                parent_span_id=draw(st.sampled_from([b"", b"\x09" * 8, bytes(8), b"\x01"])),
                name=draw(st.text(max_size=20)), trace_state=draw(st.sampled_from(["", "a=b"])),
                kind=draw(st.integers(0, 5)), start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                end_time_unix_nano=draw(st.integers(0, 2**64 - 1)), flags=draw(st.integers(0, 2**32 - 1)),
                dropped_attributes_count=draw(st.integers(0, 2)),
            )
            span.status.code = draw(st.integers(0, 2))
            span.status.message = draw(st.sampled_from(["", "boom"]))
            for key in draw(st.lists(_ATTRIBUTE_KEYS, max_size=8)):
                span.attributes.add(key=key, value=draw(st.one_of(_SCALARS, _VALUES)))
            for _ in range(draw(st.sampled_from([0, 0, 1, 3, MAX_EVENTS + 1]))):
                event = span.events.add(name=draw(st.sampled_from([EVENT, EVENT, "ev", "other"])), time_unix_nano=draw(st.integers(0, 2**64 - 1)))
                for key in draw(st.lists(st.sampled_from(["a", "b", "é", ""]), max_size=3)):
                    event.attributes.add(key=key, value=draw(_VALUES))
            if draw(st.booleans()):
                span.links.add(trace_id=b"\x07" * 16, span_id=b"\x08" * 8)
    return request


@pytest.mark.same_in_both_builds  # both decoders called by name
@DIFF
@given(requests(), SELECTIONS, LIMITS)
def test_valid_requests_from_the_protobuf_classes(request: ExportTraceServiceRequest, selection: SpanSelection, limit: int) -> None:
    same(request.SerializeToString(), replace(selection, max_value_chars=limit))


@pytest.mark.same_in_both_builds  # both decoders called by name
@DIFF
@given(st.one_of(mutated(PROTOBUF_SEEDS), _TREES, _deep()), SELECTIONS, LIMITS)
@example(PROTOBUF_SEEDS[1], SELECTION, 16_384)
def test_real_payloads_mutated_and_hand_built_trees(body: bytes, selection: SpanSelection, limit: int) -> None:
    same(body, replace(selection, max_value_chars=limit), message=False)


# -- real instrumentations ------------------------------------------------------------------------


def test_openinference_langchain_payload(langchain: Any) -> None:  # noqa: F811 (the fixture)
    """A retrieval chain under OpenInference's LangChain instrumentor: documents, messages, JSON."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnablePassthrough
    from test_conventions_real import _PROMPT, QUESTION, _format, _store

    retriever = _store().as_retriever(search_kwargs={"k": 3})
    chain = {"context": retriever | _format, "question": RunnablePassthrough()} | _PROMPT | FakeListChatModel(responses=["Zzz."]) | StrOutputParser()
    chain.invoke(QUESTION)
    body = to_protobuf(langchain.spans())
    outcome = same(body)
    assert len(outcome[1][0][1][1]) == len(langchain.spans()) >= 4  # every span kept
    for limit in (7, 64):
        same(body, replace(SELECTION, max_value_chars=limit))


@pytest.mark.parametrize("instrumented_openai", [None, "SPAN_AND_EVENT"], indirect=True)
def test_openai_v2_payload(openai_server: str, instrumented_openai: Any) -> None:  # noqa: F811 (the fixtures)
    """The OpenTelemetry openai-v2 instrumentation through the real client (GenAI attributes,
    a retrieval span, with and without message content on spans and events)."""
    from test_conventions_real import _ask

    _ask(instrumented_openai, openai_server)
    body = to_protobuf(instrumented_openai.spans())
    same(body)
    same(body, WIDE)
    same(body, replace(SELECTION, max_value_chars=5, events=frozenset({"gen_ai.client.inference.operation.details", EVENT})))


def _keyed_body(keys: list[str]) -> bytes:
    """A request of one span carrying a string attribute under each of ``keys``."""
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span as PbSpan

    span = PbSpan(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="retrieve",
                  attributes=[KeyValue(key=k, value=AnyValue(string_value="v")) for k in keys])
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    return request.SerializeToString()


def test_prefix_matched_keys_are_one_object_for_every_span_up_to_a_bound() -> None:
    """Spans share one str for a prefix-matched key (``retrieval.documents.3.document.content``):
    memory held once, lookups compare pointers. At most 4096 such keys of at most 256 bytes are
    kept per selection (a stream of made-up or long keys cannot grow it); past that each span
    has its own copy. Values and sizes are the Python decoder's either way."""
    selection = replace(SELECTION, max_value_chars=12_345)  # a plan of its own: nothing kept yet
    keys = [f"retrieval.documents.{i}.document.id" for i in range(4_200)]
    body = _keyed_body(keys)
    first, second = (compiled_decode_protobuf(body, selection).spans[0] for _ in range(2))
    assert first == second == python_decode_protobuf(body, selection).spans[0]
    shared = [a is b for a, b in zip(first.attributes, second.attributes)]
    assert list(first.attributes) == keys
    assert shared == [True] * 4_096 + [False] * 104
    assert all(key is sys.intern(key) for key in list(first.attributes)[:4_096])  # as the key tables'
    long_key = "retrieval.documents.0.document." + "x" * 300  # past 256 bytes: never kept
    fresh = replace(SELECTION, max_value_chars=12_346)  # a table with room left
    long_spans = [compiled_decode_protobuf(_keyed_body([long_key, keys[0]]), fresh).spans[0] for _ in range(2)]
    assert next(reversed(long_spans[0].attributes)) is next(reversed(long_spans[1].attributes))  # room: shared
    assert [next(iter(s.attributes)) for s in long_spans] == [long_key, long_key]
    assert next(iter(long_spans[0].attributes)) is not next(iter(long_spans[1].attributes))
    exact = "openinference.span.kind"  # an exact key is the filter's own str, always
    again = compiled_decode_protobuf(_keyed_body([exact]), selection).spans[0]
    assert next(iter(again.attributes)) is next(k for k in SELECTION.attributes.keys if k == exact)
