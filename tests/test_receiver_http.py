"""The OTLP/HTTP receiver on 127.0.0.1, fed by the real OpenTelemetry SDK HTTP exporter."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import socket
import time
import tracemalloc
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp.http_parser
import aiohttp.web_protocol
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
from net_helpers import exchange, has_traceback, problem_lines, read_all, status, wait_until
from server_helpers import LoopThread, post

from ragmon.otlp.decode import SpanSelection
from ragmon.model import AttributeFilter, Offer, Span
from ragmon.net.listeners import ListenerLimits
from ragmon.net.ratelog import RateLimitedLog
from ragmon.receivers import otlp_http
from ragmon.errors import BodyTooLargeError
from ragmon.receivers import gunzip as gunzip_module
from ragmon.receivers.gunzip import gunzip
from ragmon.receivers.ingest import IngestGate, IngestStats, ReceiverSettings

SELECTION = SpanSelection(attributes=AttributeFilter(frozenset({"openinference.span.kind"})))
PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


@dataclass
class Sink:
    spans: list[Span] = field(default_factory=list)
    refuse: int = 0
    offers: int = 0
    refusal: Offer = Offer.OVERLOADED

    def offer(self, spans: Sequence[Span]) -> Offer:
        self.offers += 1
        if self.refuse > 0:
            self.refuse -= 1
            return self.refusal
        self.spans.extend(spans)
        return Offer.ACCEPTED


@dataclass
class Receiver:
    url: str
    sink: Sink
    stats: IngestStats
    server: Any
    """The running server: an ``otlp_http.HttpReceiver``, or the gRPC module's server."""


def _build(tracer):  # type: ignore[no-untyped-def]
    with tracer.start_as_current_span("ask") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        with tracer.start_as_current_span("retrieve") as child:
            child.set_attribute("openinference.span.kind", "RETRIEVER")


SPANS = record_spans(_build)


def _start(loop: LoopThread, token: str = "", max_body: int = 4 << 20, limits: ListenerLimits | None = None,
           gate: IngestGate | None = None) -> Iterator[Receiver]:
    sink, stats = Sink(), IngestStats()
    settings = ReceiverSettings(SELECTION, max_body, token)
    server = loop.run(otlp_http.start("127.0.0.1", 0, settings, sink, stats, limits=limits, gate=gate))
    try:
        yield Receiver(f"http://127.0.0.1:{server.port}/v1/traces", sink, stats, server)
    finally:
        loop.run(server.close())


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
    answer = Status.FromString(body)
    assert answer.code == 3 and "invalid OTLP protobuf" in answer.message  # INVALID_ARGUMENT
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


def _port(receiver: Receiver) -> int:
    return int(receiver.url.split(":")[2].split("/")[0])


def _head(length: int | None = None, extra: bytes = b"", media: bytes = b"application/x-protobuf") -> bytes:
    framing = b"Transfer-Encoding: chunked\r\n" if length is None else b"Content-Length: %d\r\n" % length
    return b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: " + media + b"\r\n" + framing + extra + b"\r\n"


def test_concatenated_gzip_members_are_all_decompressed(receiver: Receiver) -> None:
    body = to_protobuf(SPANS)
    half = len(body) // 2
    members = gzip.compress(body[:half]) + gzip.compress(body[half:])
    status_, _, _ = post(receiver.url, members, {**PB, "Content-Encoding": "gzip"})
    assert status_ == 200
    assert sorted(s.name for s in receiver.sink.spans) == ["ask", "retrieve"]


def test_gzip_members_together_past_the_limit_get_413(loop: LoopThread) -> None:
    for receiver in _start(loop, max_body=4096):
        each = gzip.compress(b"\x00" * 3000)
        status_, _, body = post(receiver.url, each + each, {**PB, "Content-Encoding": "gzip"})
        assert status_ == 413 and "decompressed" in Status.FromString(body).message


def test_bytes_after_the_last_gzip_member_get_400(receiver: Receiver) -> None:
    status_, _, body = post(receiver.url, gzip.compress(to_protobuf(SPANS)) + b"trailing", {**PB, "Content-Encoding": "gzip"})
    assert status_ == 400 and "after the last gzip member" in Status.FromString(body).message
    assert receiver.sink.offers == 0


def test_a_truncated_gzip_member_is_an_error() -> None:
    whole = gzip.compress(b"a" * 1000) + gzip.compress(b"b" * 1000)
    assert gunzip(whole, 2000) == b"a" * 1000 + b"b" * 1000
    for cut in (1, 5, len(whole) // 2 + 3):
        try:
            gunzip(whole[:-cut], 2000)
        except zlib.error:
            continue
        raise AssertionError(f"cut {cut} accepted")


def _bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\x00" * (1 << 20)
    return b"".join([packer.compress(zeros) for _ in range(megabytes)] + [packer.flush()])


def test_a_gzip_bomb_is_refused_without_inflating_past_the_limit(loop: LoopThread) -> None:
    bomb = _bomb(256)  # 256 MB of zeros in ~250 KB
    limit = 1 << 20
    tracemalloc.start()
    try:
        gunzip(bomb, limit)
    except BodyTooLargeError:
        peak = tracemalloc.get_traced_memory()[1]
    else:
        raise AssertionError("the bomb was not refused")
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, peak
    for receiver in _start(loop, max_body=limit):
        status_, _, body = post(receiver.url, bomb, {**PB, "Content-Encoding": "gzip"})
        assert status_ == 413 and "decompressed" in Status.FromString(body).message


class _FedZlib:
    """``zlib`` as ``gunzip`` sees it, counting the compressed bytes it hands the inflaters."""

    error = zlib.error
    MAX_WBITS = zlib.MAX_WBITS

    def __init__(self) -> None:
        self.fed = 0

    def decompressobj(self, wbits: int) -> Any:
        inflater = zlib.decompressobj(wbits)
        outer = self

        class Counted:
            def decompress(self, data: Any, max_length: int = 0) -> bytes:
                outer.fed += len(data)
                return inflater.decompress(data, max_length)

            def __getattr__(self, name: str) -> Any:
                return getattr(inflater, name)

        return Counted()


def test_many_tiny_gzip_members_take_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """40,000 empty members (800 KB): handing each member the rest of the body (copied again
    by zlib as ``unused_data``) took seconds here, and minutes for a 16 MB body. The bytes fed
    to the inflaters stay a small multiple of the body's (a count, not a timing)."""
    body = gzip.compress(b"") * 40_000
    fed = _FedZlib()
    monkeypatch.setattr(gunzip_module, "zlib", fed)
    assert gunzip(body, 1 << 20) == b""
    assert len(body) <= fed.fed < 20 * len(body), fed.fed


def test_non_utf8_authorization_header_gets_401_and_the_scheme_ignores_case(loop: LoopThread) -> None:
    payload = to_protobuf(SPANS)
    for receiver in _start(loop, token="s3cret"):
        answer = exchange(_port(receiver), _head(0, b"Authorization: Bearer \xff\xfes3cret\r\nConnection: close\r\n"))
        assert status(answer) == 401, answer[:200]
        assert post(receiver.url, payload, {**PB, "Authorization": "bearer s3cret"})[0] == 200
        assert post(receiver.url, payload, {**PB, "Authorization": "BEARER  s3cret "})[0] == 200
        assert post(receiver.url, payload, {**PB, "Authorization": "Basic s3cret"})[0] == 401
        assert receiver.stats.requests_rejected[("http", "unauthorized")] == 2


def test_a_body_slower_than_body_timeout_gets_408(loop: LoopThread) -> None:
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=0.5)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(100) + b"\x0a")
            began = time.monotonic()
            sock.settimeout(5.0)
            answer = sock.recv(65536)
            waited = time.monotonic() - began
        assert status(answer) == 408, answer[:200]
        assert b"\r\nconnection: close\r\n" in answer.lower()
        assert 0.4 < waited < 2.0
        assert receiver.stats.requests_rejected[("http", "timeout")] == 1


def _post_kept(conn: http.client.HTTPConnection, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes, bool]:
    """POST on a keep-alive connection: status, headers, body, and whether the server closes it."""
    conn.request("POST", "/v1/traces", body, headers)
    response = conn.getresponse()
    return response.status, dict(response.headers), response.read(), response.will_close


def test_in_flight_bytes_past_the_limit_get_503_with_retry_after(loop: LoopThread) -> None:
    payload = to_protobuf(SPANS)
    for receiver in _start(loop, limits=ListenerLimits(max_inflight_bytes=1000)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as slow:
            slow.sendall(_head(950) + b"\x0a" * 900)  # 900 of 950 bytes sent: 900 held
            wait_until(lambda: receiver.server.budget.used == 900)
            conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
            code, headers, body, closes = _post_kept(conn, to_otlp_json(SPANS), JS)
            conn.close()
            assert code == 503 and headers["Retry-After"] == "1" and closes
            assert headers["Content-Type"].startswith("application/json")
            assert json.loads(body) == {"code": 14, "message": "too many request bytes in flight; retry later"}
            assert receiver.stats.requests_rejected[("http", "inflight_bytes")] == 1
        time.sleep(0.2)  # the slow request is gone: its bytes are given back
        assert post(receiver.url, payload, PB)[0] == 200


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_a_client_that_declares_much_and_sends_little_holds_only_what_it_sent(loop: LoopThread) -> None:
    """Issue 23: four connections declaring 16 MiB bodies and sending one byte each made every
    real export 503 for up to ``body_timeout`` (the budget was reserved by declared size). Bodies
    are charged as their bytes arrive: they hold 4 bytes, and a real export goes through."""
    payload = to_protobuf(SPANS)
    limits = ListenerLimits(max_inflight_bytes=64 << 20, body_timeout=30.0)
    for receiver in _start(loop, max_body=16 << 20, limits=limits):
        slow = [socket.create_connection(("127.0.0.1", _port(receiver))) for _ in range(4)]
        try:
            for sock in slow:
                sock.sendall(_head(16 << 20) + b"\x0a")
            wait_until(lambda: receiver.server.budget.used == 4)
            began = time.monotonic()
            assert post(receiver.url, payload, PB)[0] == 200
            assert time.monotonic() - began < 2.0
            assert receiver.stats.requests_rejected[("http", "inflight_bytes")] == 0
            assert len(receiver.sink.spans) == 2 and receiver.server.budget.used == 4
        finally:
            for sock in slow:
                sock.close()
        wait_until(lambda: receiver.server.budget.used == 0)


def test_a_decompressed_body_is_charged_to_the_in_flight_bytes(loop: LoopThread) -> None:
    """A gzip body holds its compressed bytes and its decompressed bytes: with another request
    holding the rest of the budget, it is refused (503) though its compressed bytes alone fit."""
    plain = to_protobuf(SPANS)
    zipped = gzip.compress(plain)
    held = 900
    limit = held + len(zipped) + len(plain) - 1
    for receiver in _start(loop, limits=ListenerLimits(max_inflight_bytes=limit)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as slow:
            slow.sendall(_head(held + 50) + b"\x0a" * held)
            wait_until(lambda: receiver.server.budget.used == held)
            code, _, _ = post(receiver.url, zipped, {**PB, "Content-Encoding": "gzip"})
            assert code == 503 and receiver.stats.requests_rejected[("http", "inflight_bytes")] == 1
        wait_until(lambda: receiver.server.budget.used == 0)
        assert post(receiver.url, zipped, {**PB, "Content-Encoding": "gzip"})[0] == 200


def test_expect_100_continue_past_the_size_limit_gets_413_before_the_body(loop: LoopThread) -> None:
    """A client asking ``Expect: 100-continue`` for a body past ``max_body_bytes`` is refused at
    once (413, counted), never told to send it; one within the limit gets ``100 Continue``."""
    expect = b"Expect: 100-continue\r\n"
    for receiver in _start(loop, max_body=4096):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(100 << 20, expect))
            answer = _read_answer(sock)
        assert status(answer) == 413 and b"100 Continue" not in answer, answer[:300]
        assert receiver.stats.requests_rejected[("http", "too_large")] == 1
        payload = to_protobuf(SPANS)
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(len(payload), expect))
            sock.settimeout(5)
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            sock.sendall(payload)
            assert status(_read_answer(sock)) == 200


def _send_bad_chunks(receiver: Receiver) -> bytes:
    """A chunked request whose second chunk size is not hex, sent once the handler reads the
    body; returns everything the server answered."""
    with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
        sock.sendall(_head(None) + b"5\r\nabcde\r\n")
        time.sleep(0.2)  # the handler is reading the body
        sock.sendall(b"ZZZ\r\nxyz\r\n0\r\n\r\n")
        return read_all(sock, 5.0)


def test_bad_chunked_encoding_after_the_headers_is_refused_without_a_traceback(
    loop: LoopThread, caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp's C parser leaves the body waiting (408 at body_timeout), its Python parser
    fails it (400); neither may log a traceback or answer 500."""
    caplog.set_level(logging.INFO)
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=1.0)):
        answer = _send_bad_chunks(receiver)
        assert status(answer) in (400, 408), answer[:200]
        assert receiver.sink.offers == 0
        # a client that leaves mid-body is no server error either
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(None) + b"5\r\nabcde\r\n")
            time.sleep(0.2)
        wait_until(lambda: receiver.stats.requests_rejected[("http", "aborted")] == 1)
    assert not has_traceback(caplog.records), [r.getMessage() for r in caplog.records]


HOSTILE = {
    "bad request line": b"GARBAGE\r\n\r\n",
    "tls": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(200)),
    "nul bytes": b"\x00" * 64,
    "bad chunk size": _head(None) + b"ZZZ\r\nabc\r\n0\r\n\r\n",
    "oversized header": b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    "bad content length": b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    "header without colon": b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n",
}


def test_a_flood_of_hostile_framing_and_rejected_requests_logs_a_few_lines(
    loop: LoopThread, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    rounds = 20
    for receiver in _start(loop, token="s3cret", max_body=4096):
        port = _port(receiver)
        for _ in range(rounds):
            for data in HOSTILE.values():
                assert status(exchange(port, data)) in (0, 400, 413, 431)
            for body, headers in (
                (b"x", {**PB, "Authorization": "Bearer wrong-token-value"}),
                (b"x", {"Content-Type": "text/plain", "Authorization": "Bearer s3cret"}),
                (b"\x00" * 5000, {**PB, "Authorization": "Bearer s3cret"}),
                (b"\xff\xff", {**PB, "Authorization": "Bearer s3cret"}),
            ):
                assert post(receiver.url, body, headers)[0] in (400, 401, 413, 415)
        assert receiver.stats.requests_rejected[("http", "unauthorized")] == rounds
    lines = problem_lines(caplog.records)
    assert not has_traceback(caplog.records)
    # one line per reason within the interval: malformed, unauthorized, content type, too large, decode
    assert 1 <= len(lines) <= 6, [r.getMessage() for r in lines]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "127.0.0.1" in text and "malformed" in text and "unauthorized" in text
    assert "wrong-token-value" not in text and "GARBAGE" not in text and "aaaa" not in text


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_with_every_turn_taken_a_request_waits_then_gets_503_busy_with_retry_after(loop: LoopThread) -> None:
    payload = to_protobuf(SPANS)
    gate = IngestGate(slots=1, wait=0.3)
    for receiver in _start(loop, gate=gate):
        assert loop.run(gate.enter())  # the only turn is taken
        began = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
        code, headers, body, closes = _post_kept(conn, payload, PB)
        conn.close()
        assert code == 503 and headers["Retry-After"] == "1" and 0.25 < time.monotonic() - began < 2.0
        assert closes and headers["Connection"] == "close"
        answer = Status.FromString(body)
        assert (answer.code, answer.message) == (14, "every ingest turn is taken; retry later")
        assert receiver.stats.requests_rejected[("http", "busy")] == 1 and not receiver.sink.spans
        loop.loop.call_soon_threadsafe(gate.leave)
        assert post(receiver.url, payload, PB)[0] == 200 and len(receiver.sink.spans) == 2


def test_a_slow_body_holds_no_turn(loop: LoopThread) -> None:
    """Turns are taken once a body is read: a client sending slowly cannot starve the others."""
    payload = to_protobuf(SPANS)
    for receiver in _start(loop, gate=IngestGate(slots=1, wait=0.3)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as slow:
            slow.sendall(_head(900) + b"\x0a")  # headers and one byte of 900
            time.sleep(0.2)
            assert post(receiver.url, payload, PB)[0] == 200
        assert receiver.stats.requests_rejected[("http", "busy")] == 0


def test_an_ingest_gate_gives_its_slots_and_then_makes_callers_wait() -> None:
    import asyncio

    async def run() -> list[bool]:
        gate = IngestGate(slots=2, wait=0.05)
        got = [await gate.enter(), await gate.enter(), await gate.enter()]
        gate.leave()
        got.append(await gate.enter())
        return got

    assert asyncio.run(run()) == [True, True, False, True]
    with pytest.raises(ValueError):
        IngestGate(slots=0)


def test_a_refused_request_keeps_the_connection_and_is_logged_with_its_peer(
    loop: LoopThread, caplog: pytest.LogCaptureFixture,
) -> None:
    """A 401 is an answer, not a broken connection: the exporter's next request on it is served;
    the rejection's log line names the client's address and port."""
    caplog.set_level(logging.INFO)
    payload = to_protobuf(SPANS)
    for receiver in _start(loop, token="s3cret"):
        conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
        try:
            code, _, body, closes = _post_kept(conn, payload, PB)
            assert code == 401 and not closes
            assert Status.FromString(body) == Status(code=16, message="missing or wrong bearer token")
            assert conn.sock is not None
            client = conn.sock.getsockname()
            assert _post_kept(conn, payload, {**PB, "Authorization": "Bearer s3cret"})[0] == 200
            assert conn.sock is not None and conn.sock.getsockname() == client  # the same connection
        finally:
            conn.close()
        assert len(receiver.sink.spans) == 2
    lines = [r.getMessage() for r in problem_lines(caplog.records)]
    assert len(lines) == 1 and "OTLP/HTTP unauthorized" in lines[0] and f" 127.0.0.1:{client[1]}:" in lines[0], lines


def test_malformed_body_framing_gets_400_and_the_connection_closed(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp's pure-Python parser (used where its C extension is missing) fails bad chunk
    framing mid-body: 400 ``malformed``, and the connection, out of step, is closed."""
    monkeypatch.setattr(aiohttp.web_protocol, "HttpRequestParser", aiohttp.http_parser.HttpRequestParserPy)
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=5.0)):
        answer = _send_bad_chunks(receiver)
        assert status(answer) == 400 and b"\r\nconnection: close\r\n" in answer.lower(), answer[:300]
        assert b"\r\ncontent-type: application/x-protobuf\r\n" in answer.lower()
        assert Status.FromString(answer.split(b"\r\n\r\n", 1)[1]) == Status(code=3, message="malformed body framing")
        assert receiver.stats.requests_rejected[("http", "malformed")] == 1 and receiver.sink.offers == 0


JSON_HEAD = b"application/json"


def _begin_shutdown(loop: LoopThread, receiver: Receiver, grace: float) -> None:
    async def begin() -> None:
        receiver.server.begin_shutdown(grace)

    loop.run(begin())


def _read_answer(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """One whole HTTP response (headers and ``Content-Length`` body), without waiting for the
    server to close (it lingers, reading what the client still sends)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = [int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                return data
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _json_answer(answer: bytes) -> dict[str, object]:
    """The JSON body of a raw HTTP response (after checking its content type)."""
    head, body = answer.split(b"\r\n\r\n", 1)
    assert b"\r\ncontent-type: application/json" in head.lower(), head
    parsed = json.loads(body)
    assert isinstance(parsed, dict)
    return parsed


def test_after_begin_shutdown_a_new_request_gets_503_shutting_down_and_the_connection_closed(loop: LoopThread) -> None:
    for receiver in _start(loop):
        _begin_shutdown(loop, receiver, 5.0)
        conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
        code, headers, body, closes = _post_kept(conn, to_otlp_json(SPANS), JS)
        conn.close()
        assert code == 503 and headers["Retry-After"] == "1" and closes
        assert headers["Content-Type"].startswith("application/json")
        assert body == b'{"code": 14, "message": "ragmon is shutting down; retry later"}'  # compact JSON
        assert receiver.stats.requests_rejected[("http", "shutting_down")] == 1 and receiver.sink.offers == 0


def test_a_body_still_arriving_at_shutdown_gets_the_grace_then_503_shutting_down(loop: LoopThread) -> None:
    """``begin_shutdown(grace)`` brings a later body deadline forward to ``grace`` seconds."""
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=20.0)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(100, media=JSON_HEAD) + b"{")
            wait_until(lambda: receiver.server.budget.used == 1)  # the handler reads the body
            began = time.monotonic()
            _begin_shutdown(loop, receiver, 0.3)
            answer = _read_answer(sock)
            waited = time.monotonic() - began
        assert status(answer) == 503 and 0.25 < waited < 2.0, (answer[:200], waited)
        assert b"\r\nretry-after: 1\r\n" in answer.lower() and b"\r\nconnection: close\r\n" in answer.lower()
        assert _json_answer(answer) == {"code": 14, "message": "ragmon is shutting down; retry later"}
        assert receiver.stats.requests_rejected[("http", "shutting_down")] == 1
        assert receiver.stats.requests_rejected[("http", "timeout")] == 0


def test_shutdown_never_extends_an_earlier_body_deadline(loop: LoopThread) -> None:
    """A body due before the grace ends keeps its own deadline (answered 503 shutting_down)."""
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=0.3)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(100) + b"\x0a")
            wait_until(lambda: receiver.server.budget.used == 1)
            _begin_shutdown(loop, receiver, 30.0)
            began = time.monotonic()
            answer = _read_answer(sock)
            waited = time.monotonic() - began
        assert status(answer) == 503 and waited < 2.0, (answer[:200], waited)
        assert receiver.stats.requests_rejected[("http", "shutting_down")] == 1


@pytest.mark.parametrize("refusal", ["overloaded", "shutting_down"])
def test_spans_the_pipeline_refuses_get_503_naming_why(
    loop: LoopThread, caplog: pytest.LogCaptureFixture, refusal: str,
) -> None:
    """A full pipeline keeps the connection; one shutting down closes it. Both are counted per
    span and logged (by the ``ragmon`` logger) with the client's address."""
    caplog.set_level(logging.INFO)
    for receiver in _start(loop):
        receiver.sink.refuse, receiver.sink.refusal = 2, Offer(refusal)
        conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
        try:
            code, headers, body, closes = _post_kept(conn, to_otlp_json(SPANS), JS)
            assert code == 503 and headers["Retry-After"] == "1" and headers["Content-Type"].startswith("application/json")
            assert json.loads(body) == {"code": 14, "message": f"ragmon is {refusal.replace('_', ' ')}; retry later"}
            assert closes == (refusal == "shutting_down")
            if not closes:
                assert _post_kept(conn, to_protobuf(SPANS), PB)[0] == 503
        finally:
            conn.close()
        assert receiver.stats.spans_rejected[("http", refusal)] == (2 if refusal == "overloaded" else 1) * 2
    lines = problem_lines(caplog.records)
    assert len(lines) == 1 and lines[0].name == "ragmon", [(r.name, r.getMessage()) for r in lines]
    assert f"OTLP/HTTP {refusal}" in lines[0].getMessage() and " 127.0.0.1:" in lines[0].getMessage()


REFUSALS = {
    "unauthorized": (b"{}", {**JS}, 401, {"code": 16, "message": "missing or wrong bearer token"}),
    "content_encoding": (b"{}", {**JS, "Content-Encoding": "br"}, 415,
                         {"code": 12, "message": "unsupported content encoding; use gzip or none"}),
    "too_large": (b" " * 4097, {**JS}, 413, {"code": 8, "message": "body larger than 4096 bytes"}),
    "decompressed": (gzip.compress(b" " * 5000), {**JS, "Content-Encoding": "gzip"}, 413,
                     {"code": 8, "message": "decompressed body larger than 4096 bytes"}),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refused_json_request_gets_a_json_status_and_is_counted_under_its_reason(loop: LoopThread, case: str) -> None:
    body, headers, code, answer = REFUSALS[case]
    for receiver in _start(loop, token="s3cret", max_body=4096):
        if case != "unauthorized":
            headers = {**headers, "Authorization": "Bearer s3cret"}
        got, got_headers, got_body = post(receiver.url, body, headers)
        assert got == code and got_headers["Content-Type"].startswith("application/json")
        assert json.loads(got_body) == answer
        reason = "too_large" if case == "decompressed" else case
        assert receiver.stats.requests_rejected == {("http", reason): 1}


def test_an_unknown_content_type_gets_a_protobuf_415(receiver: Receiver) -> None:
    code, headers, body = post(receiver.url, b"hello", {"Content-Type": "text/plain"})
    assert code == 415 and headers["Content-Type"] == "application/x-protobuf"
    assert Status.FromString(body) == Status(
        code=12, message="unsupported content type; use application/x-protobuf or application/json")
    assert receiver.stats.requests_rejected == {("http", "content_type"): 1}


def test_an_invalid_gzip_json_body_gets_a_json_400_counted_as_decode(receiver: Receiver) -> None:
    code, headers, body = post(receiver.url, b"\x1f\x8b\x08\x00garbage", {**JS, "Content-Encoding": "gzip"})
    answer = json.loads(body)
    assert code == 400 and headers["Content-Type"].startswith("application/json")
    assert answer["code"] == 3 and answer["message"].startswith("invalid gzip body: ")
    assert receiver.stats.requests_rejected == {("http", "decode"): 1}


def test_an_empty_content_encoding_means_identity(receiver: Receiver) -> None:
    assert post(receiver.url, to_protobuf(SPANS), {**PB, "Content-Encoding": ""})[0] == 200
    assert post(receiver.url, to_protobuf(SPANS), {**PB, "Content-Encoding": " Identity "})[0] == 200
    assert len(receiver.sink.spans) == 4


def test_a_body_of_exactly_max_body_bytes_is_accepted_in_either_framing(loop: LoopThread) -> None:
    """The limit is inclusive, declared (Content-Length) or counted (chunked); every byte
    reserved for a body is given back."""
    payload = to_protobuf(SPANS)
    for receiver in _start(loop, max_body=len(payload)):
        assert post(receiver.url, payload, PB)[0] == 200
        conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
        try:
            half = len(payload) // 2
            conn.request("POST", "/v1/traces", iter([payload[:half], payload[half:]]), PB)  # chunked
            assert conn.getresponse().status == 200
        finally:
            conn.close()
        assert len(receiver.sink.spans) == 4 and receiver.server.budget.used == 0


def test_a_chunked_body_growing_past_max_body_gets_413(loop: LoopThread) -> None:
    """Counted over all chunks, none of which alone is too large."""
    for receiver in _start(loop, max_body=4096):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(None, media=JSON_HEAD) + b"BB8\r\n" + b" " * 3000 + b"\r\n")
            wait_until(lambda: receiver.server.budget.used == 3000)
            sock.sendall(b"BB8\r\n" + b" " * 3000 + b"\r\n0\r\n\r\n")
            answer = _read_answer(sock)
        assert status(answer) == 413, answer[:200]
        assert _json_answer(answer) == {"code": 8, "message": "body larger than 4096 bytes"}
        assert receiver.stats.requests_rejected == {("http", "too_large"): 1}
        assert receiver.server.budget.used == 0


def test_a_chunked_body_past_the_in_flight_bytes_gets_503_with_retry_after(loop: LoopThread) -> None:
    for receiver in _start(loop, limits=ListenerLimits(max_inflight_bytes=1000)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as slow:
            slow.sendall(_head(950) + b"\x0a" * 900)  # 900 of 950 bytes sent: 900 held
            wait_until(lambda: receiver.server.budget.used == 900)
            conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=10)
            try:
                conn.request("POST", "/v1/traces", iter([b" " * 500]), JS)  # chunked: no size declared
                response = conn.getresponse()
                assert response.status == 503 and response.headers["Retry-After"] == "1"
                assert response.headers["Content-Type"].startswith("application/json")
                assert json.loads(response.read()) == {"code": 14, "message": "too many request bytes in flight; retry later"}
            finally:
                conn.close()
        assert receiver.stats.requests_rejected[("http", "inflight_bytes")] == 1
        wait_until(lambda: receiver.server.budget.used == 0)


def test_a_slow_json_body_gets_a_json_408(loop: LoopThread) -> None:
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=0.2)):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(100, media=JSON_HEAD) + b"{")
            answer = _read_answer(sock)
        assert status(answer) == 408, answer[:200]
        assert _json_answer(answer) == {"code": 4, "message": "body not received within 0.2s"}


def test_a_client_leaving_mid_body_is_counted_as_aborted_and_logged_without_traceback(
    loop: LoopThread, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    for receiver in _start(loop):
        with socket.create_connection(("127.0.0.1", _port(receiver))) as sock:
            sock.sendall(_head(None) + b"5\r\nabcde\r\n")
            wait_until(lambda: receiver.server.budget.used == 5)
        wait_until(lambda: receiver.stats.requests_rejected[("http", "aborted")] == 1)
        wait_until(lambda: receiver.server.budget.used == 0)
        assert receiver.sink.offers == 0
    assert not has_traceback(caplog.records), [r.getMessage() for r in caplog.records]
    assert any("OTLP/HTTP aborted" in r.getMessage() for r in problem_lines(caplog.records))


def test_a_json_request_waiting_too_long_for_a_turn_gets_a_json_503_busy(loop: LoopThread) -> None:
    gate = IngestGate(slots=1, wait=0.05)
    for receiver in _start(loop, gate=gate):
        assert loop.run(gate.enter())
        try:
            code, headers, body = post(receiver.url, to_otlp_json(SPANS), JS)
        finally:
            loop.loop.call_soon_threadsafe(gate.leave)
        assert code == 503 and headers["Retry-After"] == "1" and headers["Content-Type"].startswith("application/json")
        assert json.loads(body) == {"code": 14, "message": "every ingest turn is taken; retry later"}
        assert receiver.stats.requests_rejected == {("http", "busy"): 1} and receiver.server.budget.used == 0


def test_a_large_gzip_body_is_decompressed_off_the_loop_and_delivered(receiver: Receiver) -> None:
    """At least ``GUNZIP_IN_THREAD_BYTES`` compressed (here mostly empty gzip members)."""
    body = gzip.compress(b"") * (otlp_http.GUNZIP_IN_THREAD_BYTES // 20) + gzip.compress(to_protobuf(SPANS))
    assert len(body) >= otlp_http.GUNZIP_IN_THREAD_BYTES
    assert post(receiver.url, body, {**PB, "Content-Encoding": "gzip"})[0] == 200
    assert sorted(s.name for s in receiver.sink.spans) == ["ask", "retrieve"]


def test_the_receiver_listens_on_the_given_host_and_port_only_and_close_stops_it(loop: LoopThread) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        wanted = probe.getsockname()[1]
    settings = ReceiverSettings(SELECTION, 1 << 20)
    server = loop.run(otlp_http.start("127.0.0.1", wanted, settings, Sink(), IngestStats()))
    try:
        assert server.port == wanted
        socket.create_connection(("127.0.0.1", wanted), timeout=2).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", wanted), timeout=2).close()
    finally:
        loop.run(server.close())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", wanted), timeout=2).close()


def test_closing_a_receiver_that_never_started_does_nothing(loop: LoopThread) -> None:
    receiver = otlp_http.HttpReceiver(ReceiverSettings(SELECTION, 1 << 20), Sink(), IngestStats(), ListenerLimits(),
                                      RateLimitedLog(logging.getLogger("ragmon")))
    loop.run(receiver.close())


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_close_gives_a_request_stuck_in_the_handler_only_the_shutdown_timeout(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(otlp_http, "SHUTDOWN_TIMEOUT", 0.1)
    gate = IngestGate(slots=1, wait=30.0)
    payload = to_protobuf(SPANS)
    settings = ReceiverSettings(SELECTION, 1 << 20)
    server = loop.run(otlp_http.start("127.0.0.1", 0, settings, Sink(), IngestStats(), gate=gate))
    assert loop.run(gate.enter())  # the request will wait for a turn
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(_head(len(payload)) + payload)
        wait_until(lambda: server.budget.used == len(payload))
        began = time.monotonic()
        loop.run(server.close(), timeout=5)
        assert time.monotonic() - began < 1.5
    assert server.budget.used == 0


def test_one_request_alone_may_exceed_the_in_flight_bytes(loop: LoopThread) -> None:
    """The byte budget limits bodies read at once, never a single body (``max_body_bytes`` does)."""
    payload = to_protobuf(SPANS)
    assert len(payload) > 100
    for receiver in _start(loop, limits=ListenerLimits(max_inflight_bytes=100)):
        assert post(receiver.url, payload, PB)[0] == 200
        assert len(receiver.sink.spans) == 2 and receiver.server.budget.used == 0
