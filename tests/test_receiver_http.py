"""The OTLP/HTTP receiver on 127.0.0.1, fed by the real OpenTelemetry SDK HTTP exporter."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult
from otel_helpers import record_spans, to_otlp_json, to_protobuf
from server_helpers import LoopThread, post

from ragmon.decode import SpanSelection
from ragmon.model import AttributeFilter, Span
from ragmon.receivers import otlp_http
from ragmon.receivers.ingest import IngestStats, ReceiverSettings

SELECTION = SpanSelection(attributes=AttributeFilter(frozenset({"openinference.span.kind"})))
PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


@dataclass
class Sink:
    spans: list[Span] = field(default_factory=list)
    refuse: int = 0
    offers: int = 0
    refusal: str = "overloaded"

    def offer(self, spans: Sequence[Span]) -> bool:
        self.offers += 1
        if self.refuse > 0:
            self.refuse -= 1
            return False
        self.spans.extend(spans)
        return True


@dataclass
class Receiver:
    url: str
    sink: Sink
    stats: IngestStats


def _build(tracer):  # type: ignore[no-untyped-def]
    with tracer.start_as_current_span("ask") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        with tracer.start_as_current_span("retrieve") as child:
            child.set_attribute("openinference.span.kind", "RETRIEVER")


SPANS = record_spans(_build)


def _start(loop: LoopThread, token: str = "", max_body: int = 4 << 20) -> Iterator[Receiver]:
    sink, stats = Sink(), IngestStats()
    settings = ReceiverSettings(SELECTION, max_body, token)
    runner, port = loop.run(otlp_http.start("127.0.0.1", 0, settings, sink, stats))
    try:
        yield Receiver(f"http://127.0.0.1:{port}/v1/traces", sink, stats)
    finally:
        loop.run(runner.cleanup())


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def receiver(loop: LoopThread) -> Iterator[Receiver]:
    yield from _start(loop)


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_real_sdk_exporter_delivers_spans(receiver: Receiver, compression: Compression) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver.url, compression=compression, timeout=10)
    assert exporter.export(SPANS) == SpanExportResult.SUCCESS
    exporter.shutdown()
    assert sorted(s.name for s in receiver.sink.spans) == ["ask", "retrieve"]
    kinds = {s.name: s.attributes["openinference.span.kind"] for s in receiver.sink.spans}
    assert kinds == {"ask": "CHAIN", "retrieve": "RETRIEVER"}
    assert receiver.stats.spans_received["http"] == 2


def test_json_body_gets_a_json_response(receiver: Receiver) -> None:
    status, headers, body = post(receiver.url, to_otlp_json(SPANS), JS)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {}
    assert len(receiver.sink.spans) == 2


@pytest.mark.parametrize("as_json", [False, True])
def test_partial_success_reports_rejected_spans(receiver: Receiver, as_json: bool) -> None:
    request = ExportTraceServiceRequest.FromString(to_protobuf(SPANS))
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x00" * 8
    if as_json:
        data = json.loads(to_otlp_json(SPANS))
        data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "00" * 8
        status, _, body = post(receiver.url, json.dumps(data).encode(), JS)
        partial = json.loads(body)["partialSuccess"]
        assert partial["rejectedSpans"] == "1" and "invalid_span_id" in partial["errorMessage"]
    else:
        status, _, body = post(receiver.url, request.SerializeToString(), PB)
        partial = ExportTraceServiceResponse.FromString(body).partial_success
        assert partial.rejected_spans == 1 and "invalid_span_id" in partial.error_message
    assert status == 200
    assert len(receiver.sink.spans) == 1
    assert receiver.stats.spans_rejected[("http", "invalid_span_id")] == 1
    assert receiver.stats.spans_received["http"] == 2


def test_undecodable_protobuf_gets_400_with_status(receiver: Receiver) -> None:
    status, headers, body = post(receiver.url, b"\xff\xff\xff\xff", PB)
    assert status == 400 and headers["Content-Type"] == "application/x-protobuf"
    assert "invalid OTLP protobuf" in Status.FromString(body).message
    assert receiver.stats.requests_rejected[("http", "decode")] == 1
    assert receiver.sink.offers == 0


def test_undecodable_json_gets_400_with_json_status(receiver: Receiver) -> None:
    status, _, body = post(receiver.url, b"{nope", JS)
    assert status == 400 and "invalid JSON" in json.loads(body)["message"]


def test_corrupt_gzip_gets_400(receiver: Receiver) -> None:
    status, _, body = post(receiver.url, b"\x1f\x8b\x08\x00garbage", {**PB, "Content-Encoding": "gzip"})
    assert status == 400 and "gzip" in Status.FromString(body).message


def test_unknown_content_type_gets_415(receiver: Receiver) -> None:
    status, _, body = post(receiver.url, b"hello", {"Content-Type": "text/plain"})
    assert status == 415 and "unsupported content type" in Status.FromString(body).message


def test_unknown_content_encoding_gets_415(receiver: Receiver) -> None:
    status, _, _ = post(receiver.url, to_protobuf(SPANS), {**PB, "Content-Encoding": "br"})
    assert status == 415


def test_too_large_compressed_and_decompressed_get_413(loop: LoopThread) -> None:
    for receiver in _start(loop, max_body=4096):
        status, _, _ = post(receiver.url, b"\x00" * 5000, PB)
        assert status == 413
        bomb = gzip.compress(b"\x00" * 100_000)
        assert len(bomb) < 4096
        status, _, body = post(receiver.url, bomb, {**PB, "Content-Encoding": "gzip"})
        assert status == 413 and "decompressed" in Status.FromString(body).message
        assert receiver.stats.requests_rejected[("http", "too_large")] == 2


def test_bearer_token(loop: LoopThread) -> None:
    for receiver in _start(loop, token="s3cret"):
        assert post(receiver.url, to_protobuf(SPANS), PB)[0] == 401
        assert post(receiver.url, to_protobuf(SPANS), {**PB, "Authorization": "Bearer nope"})[0] == 401
        exporter = OTLPSpanExporter(endpoint=receiver.url, headers={"Authorization": "Bearer s3cret"}, timeout=10)
        assert exporter.export(SPANS) == SpanExportResult.SUCCESS
        assert receiver.stats.requests_rejected[("http", "unauthorized")] == 2


def test_overload_gets_503_with_retry_after_and_the_exporter_retries(receiver: Receiver) -> None:
    receiver.sink.refuse = 1
    status, headers, _ = post(receiver.url, to_protobuf(SPANS), PB)
    assert status == 503 and headers["Retry-After"] == "1"
    assert receiver.stats.spans_rejected[("http", "overloaded")] == 2
    receiver.sink.refuse = 1
    exporter = OTLPSpanExporter(endpoint=receiver.url, timeout=30)
    assert exporter.export(SPANS) == SpanExportResult.SUCCESS  # retried after the 503
    assert receiver.sink.offers == 3 and len(receiver.sink.spans) == 2


def test_large_body_over_real_tcp_is_read_whole(receiver: Receiver) -> None:
    """A body far beyond one socket read (here ~1 MB) arrives in many chunks and is accepted."""
    many = record_spans(lambda tracer: [tracer.start_span(f"s{i}", attributes={"blob": "x" * 2000}).end() for i in range(500)])
    body = to_protobuf(many)
    assert len(body) > 1_000_000
    status, _, _ = post(receiver.url, body, PB)
    assert status == 200
    assert len(receiver.sink.spans) == 500
