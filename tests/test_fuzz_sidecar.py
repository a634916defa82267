"""Hostile bodies through the whole sidecar, over OTLP/HTTP and OTLP/gRPC on 127.0.0.1.

Every answer is a 2xx or a 4xx/429/503 (gRPC: OK or a status the OTLP specification names),
never a 500 or a crash; afterwards the sidecar still scores good traffic exactly, and
``/metrics`` accounts for every span it acknowledged:

    spans received = rejected (partial success) + queued + assembled + late + dropped

(refused spans, answered 503/UNAVAILABLE, are not received: the exporter sends them again).
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_helpers import record_spans, to_protobuf
from net_helpers import wait_until
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, ReceiverConfig

FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
HTTP_OK = {200, 400, 401, 408, 413, 415, 429, 503}
GRPC_OK = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BODY = 1 << 20


def _rag_spans(service: str, ranking: list[str], relevant: list[str]) -> bytes:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the refund window?")
            root.set_attribute("output.value", "30 days")
            root.set_attribute("ragmon.variant", "v")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(ranking):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
                    span.set_attribute(f"retrieval.documents.{i}.document.content", f"text of {doc}")
                span.set_attribute("ragmon.relevant_document_ids", relevant)
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "m")
                span.set_attribute("llm.token_count.prompt", 10)
                span.set_attribute("llm.token_count.completion", 2)

    return to_protobuf(record_spans(build, service=service))


SEED = _rag_spans("seed", ["d1", "d2", "d3"], ["d2"])


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 flip, 1 insert, 2 delete, 3 truncate."""
    out = bytearray(data)
    for kind, pos, byte in edits:
        if not out:
            break
        i = pos % len(out)
        if kind == 0:
            out[i] ^= byte or 1
        elif kind == 1:
            out.insert(i, byte)
        elif kind == 2:
            del out[i]
        else:
            del out[i:]
    return bytes(out)


_edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6)
_protobuf = st.one_of(
    st.builds(_mutate, st.just(SEED), _edits),
    st.binary(max_size=200),
    st.builds(lambda n: b"\x0a" * n + b"\x00", st.integers(1, 3000)),  # nested length prefixes
)


def _nested_kvlist(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "leaf\"\\"}
    for _ in range(depth):
        value = {"kvlistValue": {"values": [{"key": "k\"", "value": value}]}}
    return value


_numbers = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1e400", "-1", "12abc", "", "NaN", "Infinity", "0x10", " 5", "1.5"]),
)
_ids = st.one_of(
    st.binary(min_size=0, max_size=20).map(bytes.hex), st.just("0" * 32), st.just("0" * 16),
    st.binary(min_size=16, max_size=16).map(lambda b: base64.b64encode(b).decode()), st.text(max_size=40),
    st.integers(), st.none(),
)
_any_values = st.recursive(
    st.one_of(
        st.builds(lambda s: {"stringValue": s}, st.text(max_size=50)),
        st.builds(lambda n: {"intValue": n}, _numbers),
        st.builds(lambda n: {"doubleValue": n}, _numbers),
        st.builds(lambda b: {"boolValue": b}, st.one_of(st.booleans(), st.text(max_size=3))),
        st.builds(lambda b: {"bytesValue": b}, st.one_of(st.binary(max_size=20).map(lambda x: base64.b64encode(x).decode()), st.text(max_size=9))),
        st.none(), st.integers(), st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.builds(lambda v: {"arrayValue": {"values": v}}, st.lists(inner, max_size=4)),
        st.builds(lambda kv: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kv]}},
                  st.lists(st.tuples(st.text(max_size=8), inner), max_size=4)),
        st.builds(lambda v: {"arrayValue": v}, inner),
    ),
    max_leaves=12,
)
_keys = st.sampled_from([
    "input.value", "output.value", "openinference.span.kind", "retrieval.documents.0.document.id",
    "retrieval.documents.0.document.content", "retrieval.documents.0.document.metadata", "ragmon.relevance",
    "ragmon.relevant_document_ids", "llm.token_count.prompt", "gen_ai.usage.input_tokens", "gen_ai.input.messages",
    "llm.model_name", "service.name", "ragmon.variant",
]) | st.text(max_size=10)
_attributes = st.lists(st.fixed_dictionaries({"key": _keys, "value": _any_values}), max_size=6)
_span = st.fixed_dictionaries(
    {"traceId": _ids, "spanId": _ids},
    optional={
        "parentSpanId": _ids, "name": st.one_of(st.text(max_size=20), st.integers()),
        "startTimeUnixNano": _numbers, "endTimeUnixNano": _numbers, "flags": _numbers,
        "kind": st.one_of(_numbers, st.sampled_from(["SPAN_KIND_SERVER", "BOGUS"])),
        "attributes": st.one_of(_attributes, st.integers(), st.text(max_size=3)),
        "status": st.one_of(st.fixed_dictionaries({"code": st.one_of(_numbers, st.just("STATUS_CODE_ERROR"))}), st.integers()),
        "events": st.lists(st.fixed_dictionaries({}, optional={"name": st.sampled_from(["gen_ai.evaluation.result", "x"]),
                                                               "timeUnixNano": _numbers, "attributes": _attributes}), max_size=3),
    },
)
_json_request = st.builds(
    lambda resource, spans: {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]},
    _attributes, st.lists(_span, max_size=4),
)
_json_body = st.one_of(
    _json_request.map(lambda doc: json.dumps(doc).encode()),
    st.builds(lambda d: json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "ab" * 16, "spanId": "cd" * 8, "attributes": [{"key": "input.value", "value": _nested_kvlist(d)}]}]}]}]}).encode(),
        st.integers(1, 200)),
    st.binary(max_size=100),
    st.sampled_from([b"[]", b"null", b'{"resourceSpans": 5}', b'{"resourceSpans": [5]}', b'"\\ud800"',
                     b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + b"ab" * 16 + b'", "spanId": "' + b"cd" * 8
                     + b'", "name": "\\ud800\\udfff\\udc00", "startTimeUnixNano": 1e400}]}]}]}',
                     b"[" * 100_000, b'{"a": ' * 5000]),
)


def _encoded(body: bytes, how: int) -> tuple[bytes, str]:
    """(body, Content-Encoding): identity, gzip, two gzip members, a bomb, a cut stream, garbage."""
    if how == 0:
        return body, ""
    if how == 1:
        return gzip.compress(body), "gzip"
    if how == 2:
        half = len(body) // 2
        return gzip.compress(body[:half]) + gzip.compress(body[half:]), "gzip"
    if how == 3:
        return gzip.compress(b"\x00" * (MAX_BODY * 4)), "gzip"
    if how == 4:
        return gzip.compress(body)[:-5], "gzip"
    if how == 5:
        return gzip.compress(body) + b"trailing garbage", "gzip"
    return zlib.compress(body), "deflate"


_headers = st.fixed_dictionaries({
    "Content-Type": st.sampled_from(["application/x-protobuf", "application/json", "text/plain",
                                      "application/json; charset=utf-8", "application/x-protobuf; x=y", ""]),
}, optional={"Authorization": st.sampled_from(["Bearer nope", "", "Basic x"])})


@pytest.fixture(scope="module")
def sidecar() -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc="127.0.0.1:0", max_body_bytes=MAX_BODY),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


def _accounted(v: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> tuple[float, float]:
    """(spans received, spans accounted for) over both protocols."""
    def total(name: str, **match: str) -> float:
        return sum(val for (n, labels), val in v.items() if n == name and match.items() <= dict(labels).items())

    partial = sum(
        val for (n, labels), val in v.items()
        if n == "ragmon_spans_rejected_total" and dict(labels)["reason"] not in ("overloaded", "shutting_down")
    )
    accounted = (partial + total("ragmon_queue_spans") + total("ragmon_spans_assembled_total")
                 + total("ragmon_spans_late_total") + total("ragmon_spans_dropped_total"))
    return total("ragmon_spans_received_total"), accounted


def _finish_good_traffic(car: Sidecar, clock: FakeClock, service: str, protocol: str) -> None:
    """Three good traces after the hostile ones: scored exactly (reciprocal ranks 1, 1/2, 0)."""
    bodies = [_rag_spans(service, r, rel) for r, rel in ((["d1", "d2"], ["d1"]), (["x", "d5"], ["d5"]), (["a"], ["z"]))]
    for body in bodies:
        if protocol == "http":
            status, _, _ = post(f"http://127.0.0.1:{car.ports.http}/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            assert status == 200
        else:
            with grpc.insecure_channel(f"127.0.0.1:{car.ports.grpc}") as channel:
                channel.unary_unary(EXPORT)(body, timeout=10)
    wait_until(lambda: car.pipeline.stats().queued_spans == 0)
    clock.now += 120.0  # past max_wait: every trace held is finished, the good ones complete
    wait_until(lambda: car.assembler.stats().traces_pending == 0)
    v = samples(scrape(car.ports.metrics))
    src = {"service": service, "variant": "v", "source": "label"}
    assert value(v, "ragmon_traces_total", service=service, variant="v") == 3
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **src) == pytest.approx(1.5, abs=1e-12)
    assert value(v, "ragmon_retrieval_hits_total", **src, k="1") == 1
    received, accounted = _accounted(v)
    assert received == accounted and received > 0


def test_hostile_http_bodies_get_an_answer_never_a_500(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    statuses: Counter[int] = Counter()
    url = f"http://127.0.0.1:{car.ports.http}/v1/traces"

    @FUZZ
    @given(body=st.one_of(_protobuf, _json_body), how=st.integers(0, 6), headers=_headers)
    def one(body: bytes, how: int, headers: dict[str, str]) -> None:
        data, encoding = _encoded(body, how)
        if encoding:
            headers = {**headers, "Content-Encoding": encoding}
        status, _, _ = post(url, data, headers)
        statuses[status] += 1
        assert status in HTTP_OK, (status, body[:200])

    one()
    assert car.worker is not None and not car.worker.done()
    assert statuses[200] and statuses[400] and statuses[413] and statuses[415], statuses
    _finish_good_traffic(car, clock, "after-http", "http")


def test_hostile_grpc_requests_get_a_status_never_an_internal_error(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    codes: Counter[grpc.StatusCode] = Counter()
    with grpc.insecure_channel(f"127.0.0.1:{car.ports.grpc}") as channel:
        export = channel.unary_unary(EXPORT)

        @FUZZ
        @given(body=st.one_of(_protobuf, _json_request.map(lambda d: to_protobuf_json(d))), gzip_it=st.booleans())
        def one(body: bytes, gzip_it: bool) -> None:
            try:
                export(body, timeout=10, compression=grpc.Compression.Gzip if gzip_it else None)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()  # type: ignore[attr-defined]
            codes[code] += 1
            assert code in GRPC_OK, (code, body[:200])

        one()
    assert car.worker is not None and not car.worker.done()
    assert codes[grpc.StatusCode.OK] and codes[grpc.StatusCode.INVALID_ARGUMENT], codes
    _finish_good_traffic(car, clock, "after-grpc", "grpc")


def to_protobuf_json(doc: dict[str, Any]) -> bytes:
    """A JSON-shaped request sent as protobuf bytes by mistake: whatever upb makes of it."""
    return random.Random(len(json.dumps(doc))).randbytes(8) + json.dumps(doc).encode()[:300]
