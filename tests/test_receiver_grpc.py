"""The OTLP/gRPC receiver on 127.0.0.1, fed by the real OpenTelemetry SDK gRPC exporter."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult
from otel_helpers import to_protobuf
from net_helpers import closed_by_peer, has_traceback, problem_lines, wait_until
from server_helpers import LoopThread
from test_receiver_http import SELECTION, SPANS, Receiver, Sink

from ragmon.errors import DecodeError
from ragmon.model import Offer
from ragmon.otlp.decode import decode_protobuf
from ragmon.net.listeners import SLOW_SENDER_SECONDS, ByteBudget, ListenerLimits
from ragmon.receivers import otlp_grpc
from ragmon.receivers.ingest import IngestGate, IngestStats
from ragmon.receivers.ingest import ReceiverSettings

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

METHOD = f"/{otlp_grpc.SERVICE}/Export"


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


def _start(loop: LoopThread, token: str = "", max_body: int = 1 << 20, limits: ListenerLimits | None = None,
           gate: IngestGate | None = None, slow_after: float = SLOW_SENDER_SECONDS) -> Iterator[Receiver]:
    sink, stats = Sink(), IngestStats()
    settings = ReceiverSettings(SELECTION, max_body, token)
    budget = ByteBudget((limits or ListenerLimits()).max_inflight_bytes, slow_after=slow_after)
    gate = gate or IngestGate()
    server, port = loop.run(otlp_grpc.start("127.0.0.1", 0, settings, sink, stats, limits=limits, gate=gate, budget=budget))
    try:
        yield Receiver(f"127.0.0.1:{port}", sink, stats, SimpleNamespace(grpc=server, budget=budget, gate=gate))
    finally:
        loop.run(server.stop(None))


@pytest.fixture
def receiver(loop: LoopThread) -> Iterator[Receiver]:
    yield from _start(loop)


def _call(address: str, body: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> bytes:
    with grpc.insecure_channel(address) as channel:
        export = channel.unary_unary(METHOD)
        return export(body, metadata=metadata, timeout=10)  # type: ignore[no-any-return]


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_real_sdk_exporter_delivers_spans(receiver: Receiver, compression: grpc.Compression) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, compression=compression, timeout=10)
    assert exporter.export(SPANS) == SpanExportResult.SUCCESS
    exporter.shutdown()
    assert sorted(s.name for s in receiver.sink.spans) == ["ask", "retrieve"]
    assert receiver.stats.spans_received["grpc"] == 2


def test_partial_success(receiver: Receiver) -> None:
    request = ExportTraceServiceRequest.FromString(to_protobuf(SPANS))
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01"
    response = ExportTraceServiceResponse.FromString(_call(receiver.url, request.SerializeToString()))
    assert response.partial_success.rejected_spans == 1
    assert "invalid_trace_id" in response.partial_success.error_message
    assert len(receiver.sink.spans) == 1


def test_undecodable_is_invalid_argument_with_the_reason(receiver: Receiver) -> None:
    with pytest.raises(DecodeError) as decoding:
        decode_protobuf(b"\xff\xff\xff", SELECTION)
    with pytest.raises(grpc.RpcError) as info:
        _call(receiver.url, b"\xff\xff\xff")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == str(decoding.value) and "invalid OTLP protobuf" in str(decoding.value)
    assert receiver.stats.requests_rejected[("grpc", "decode")] == 1


def test_too_large_is_resource_exhausted(loop: LoopThread) -> None:
    for receiver in _start(loop, max_body=1024):
        with pytest.raises(grpc.RpcError) as info:
            _call(receiver.url, b"\x00" * 4096)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_bearer_token(loop: LoopThread) -> None:
    for receiver in _start(loop, token="s3cret"):
        with pytest.raises(grpc.RpcError) as info:
            _call(receiver.url, to_protobuf(SPANS))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert info.value.details() == "missing or wrong bearer token"
        exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, headers={"authorization": "Bearer s3cret"}, timeout=10)
        assert exporter.export(SPANS) == SpanExportResult.SUCCESS
        assert receiver.stats.requests_rejected[("grpc", "unauthorized")] == 1


def _assert_unavailable_with_retry_info(error: grpc.RpcError, message: str) -> None:
    """UNAVAILABLE with ``message``, a one-second ``RetryInfo`` and the same in ``grpc-status-details-bin``."""
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == message
    trailing = dict(error.trailing_metadata())
    assert RetryInfo.FromString(trailing["google.rpc.retryinfo-bin"]).retry_delay.seconds == 1
    status = Status.FromString(trailing["grpc-status-details-bin"])
    assert (status.code, status.message) == (grpc.StatusCode.UNAVAILABLE.value[0], message)
    retry = RetryInfo()
    assert len(status.details) == 1 and status.details[0].Unpack(retry) and retry.retry_delay.seconds == 1


def test_overload_is_unavailable_with_retry_info_and_the_exporter_retries(
    receiver: Receiver, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    receiver.sink.refuse = 1
    with pytest.raises(grpc.RpcError) as info:
        _call(receiver.url, to_protobuf(SPANS))
    _assert_unavailable_with_retry_info(info.value, "ragmon is overloaded; retry later")
    lines = [r.getMessage() for r in problem_lines(caplog.records)]
    assert len(lines) == 1 and "overloaded" in lines[0] and "127.0.0.1:" in lines[0], lines
    receiver.sink.refuse = 1
    exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, timeout=30)
    assert exporter.export(SPANS) == SpanExportResult.SUCCESS
    assert receiver.sink.offers == 3 and len(receiver.sink.spans) == 2


def test_the_bearer_scheme_ignores_case_and_bad_tokens_log_one_line(loop: LoopThread, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    body = to_protobuf(SPANS)
    began = time.monotonic()
    for receiver in _start(loop, token="s3cret"):
        ExportTraceServiceResponse.FromString(_call(receiver.url, body, (("authorization", "bearer s3cret"),)))
        ExportTraceServiceResponse.FromString(_call(receiver.url, body, (("authorization", "BEARER   s3cret"),)))
        for metadata in ((("authorization", "Basic s3cret"),), (("authorization", "Bearer wrong-token-value"),), ()):
            for _ in range(10):
                with pytest.raises(grpc.RpcError) as info:
                    _call(receiver.url, body, metadata)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert receiver.stats.requests_rejected[("grpc", "unauthorized")] == 30
        assert len(receiver.sink.spans) == 4
    lines = problem_lines(caplog.records)
    windows = 1 + int((time.monotonic() - began) / 10)  # one line per reason every 10 s (a loaded machine is slow)
    assert 1 <= len(lines) <= windows and all("unauthorized" in r.getMessage() for r in lines)
    assert "127.0.0.1" in lines[0].getMessage()
    assert "wrong-token-value" not in caplog.text and not has_traceback(caplog.records)


def test_connections_past_the_cap_are_closed_at_once_and_silent_ones_at_the_handshake_timeout(loop: LoopThread) -> None:
    for receiver in _start(loop, limits=ListenerLimits(max_connections=4, header_timeout=1.0)):
        host, port = receiver.url.split(":")
        socks = [socket.create_connection((host, int(port))) for _ in range(5)]
        try:
            began = time.monotonic()
            assert closed_by_peer(socks[4], 0.5)  # past the cap
            assert not closed_by_peer(socks[0], 0.2)
            assert closed_by_peer(socks[0], 3.0)  # sent no HTTP/2 preface within header_timeout
            assert 0.8 < time.monotonic() - began < 2.5
        finally:
            for sock in socks:
                sock.close()
        exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, timeout=10)
        assert exporter.export(SPANS) == SpanExportResult.SUCCESS  # room again


def test_server_options_carry_the_limits() -> None:
    settings = ReceiverSettings(SELECTION, 1 << 20)
    limits = ListenerLimits(max_connections=7, header_timeout=2.5, idle_timeout=30.0, max_inflight_bytes=200 << 20)
    options = dict(otlp_grpc.server_options(settings, limits))
    assert options["grpc.max_allowed_incoming_connections"] == 7
    assert options["grpc.server_handshake_timeout_ms"] == 2500
    assert options["grpc.max_connection_idle_ms"] == 30000
    assert otlp_grpc.concurrent_rpcs(settings, limits) == 200
    odd = ListenerLimits(max_inflight_bytes=(200 << 20) + 12345)  # whole messages only
    assert otlp_grpc.concurrent_rpcs(settings, odd) == 200 and isinstance(otlp_grpc.concurrent_rpcs(settings, odd), int)
    assert otlp_grpc.concurrent_rpcs(ReceiverSettings(SELECTION, 16 << 20), ListenerLimits()) == 4  # 64 MiB / 16 MiB
    assert otlp_grpc.concurrent_rpcs(ReceiverSettings(SELECTION, 16 << 20), ListenerLimits(max_inflight_bytes=1)) == 1


def test_with_every_turn_taken_an_export_gets_unavailable_with_retry_info(loop: LoopThread) -> None:
    gate = IngestGate(slots=1, wait=0.3)
    for receiver in _start(loop, gate=gate):
        assert loop.run(gate.enter())
        with pytest.raises(grpc.RpcError) as info:
            _call(receiver.url, to_protobuf(SPANS))
        _assert_unavailable_with_retry_info(info.value, "ragmon is busy; retry later")
        assert receiver.stats.requests_rejected[("grpc", "busy")] == 1 and not receiver.sink.spans
        loop.loop.call_soon_threadsafe(gate.leave)
        _call(receiver.url, to_protobuf(SPANS))
        assert len(receiver.sink.spans) == 2


def test_while_shutting_down_an_export_gets_unavailable_saying_so(receiver: Receiver) -> None:
    receiver.sink.refuse, receiver.sink.refusal = 1, Offer.SHUTTING_DOWN
    with pytest.raises(grpc.RpcError) as info:
        _call(receiver.url, to_protobuf(SPANS))
    _assert_unavailable_with_retry_info(info.value, "ragmon is shutting down; retry later")
    assert receiver.stats.spans_rejected[("grpc", "shutting_down")] == 2


def test_a_port_in_use_by_another_receiver_is_an_error_not_shared(receiver: Receiver, loop: LoopThread) -> None:
    """gRPC would share a port through SO_REUSEPORT: a second ragmon would silently get half the traffic."""
    port = int(receiver.url.split(":")[1])
    settings = ReceiverSettings(SELECTION, 1 << 20)
    with pytest.raises(OSError, match=f"cannot bind the OTLP/gRPC receiver to 127.0.0.1:{port}"):
        loop.run(otlp_grpc.start("127.0.0.1", port, settings, Sink(), IngestStats()))
    exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, timeout=10)
    assert exporter.export(SPANS) == SpanExportResult.SUCCESS and len(receiver.sink.spans) == 2


def test_an_ipv6_host_is_served(loop: LoopThread) -> None:
    sink, stats = Sink(), IngestStats()
    server, port = loop.run(otlp_grpc.start("::1", 0, ReceiverSettings(SELECTION, 1 << 20), sink, stats))
    try:
        ExportTraceServiceResponse.FromString(_call(f"[::1]:{port}", to_protobuf(SPANS)))
        assert len(sink.spans) == 2
    finally:
        loop.run(server.stop(None))


class _Held:
    """Client-streaming calls that declare an export and send no message until released."""

    def __init__(self, channel: grpc.Channel, n: int) -> None:
        self._release = threading.Event()
        export = channel.stream_unary(METHOD)
        self.calls = [export.future(self._never(), timeout=30) for _ in range(n)]

    def _never(self) -> Iterator[bytes]:
        self._release.wait(30)
        return
        yield b""

    def release(self) -> None:
        self._release.set()


def test_exports_past_the_byte_budget_get_unavailable_with_retry_info_and_are_counted(loop: LoopThread) -> None:
    """Each export whose message has not arrived holds ``max_body_bytes`` of the in-flight
    budget: ``concurrent_rpcs`` of them fill it, and one more is refused at once with
    UNAVAILABLE + ``RetryInfo`` (an exporter retries it; RESOURCE_EXHAUSTED without
    ``RetryInfo`` it would drop), counted. A message that arrives holds only its own bytes.
    (Held streams are not cut as slow here: ``slow_after`` is past the test's length.)"""
    limits = ListenerLimits(max_inflight_bytes=3 << 20)
    for receiver in _start(loop, limits=limits, gate=IngestGate(slots=1, wait=30.0), slow_after=120.0):
        cap = otlp_grpc.concurrent_rpcs(ReceiverSettings(SELECTION, 1 << 20), limits)
        assert cap == 3
        with grpc.insecure_channel(receiver.url) as channel:
            held = _Held(channel, cap)
            wait_until(lambda: receiver.server.budget.used == 3 << 20)
            with pytest.raises(grpc.RpcError) as info:
                _call(receiver.url, to_protobuf(SPANS))
            _assert_unavailable_with_retry_info(info.value, "ragmon is reading too many exports; retry later")
            assert receiver.stats.requests_rejected[("grpc", "inflight_bytes")] == 1
            held.release()
            codes = Counter(call.exception().code() for call in held.calls)  # type: ignore[union-attr]
        assert codes == {grpc.StatusCode.INVALID_ARGUMENT: cap}  # no message: each gave its bytes back
        wait_until(lambda: receiver.server.budget.used == 0)
        body = to_protobuf(SPANS)
        gate = receiver.server.gate
        assert loop.run(gate.enter())  # arrived messages wait for their turn, holding their own bytes only
        with grpc.insecure_channel(receiver.url) as channel:
            export = channel.unary_unary(METHOD)
            calls = []
            for n in range(1, 2 * cap + 1):  # one at a time: each reserves max_body_bytes until its message settles
                calls.append(export.future(body, timeout=30))
                wait_until(lambda: receiver.server.budget.used == n * len(body))
            loop.loop.call_soon_threadsafe(gate.leave)
            assert all(call.result() is not None for call in calls)
        wait_until(lambda: receiver.server.budget.used == 0)
        assert len(receiver.sink.spans) == 2 * 2 * cap


def test_streams_that_declare_an_export_and_send_nothing_cannot_hold_ingest(loop: LoopThread) -> None:
    """Issue 23: 64 header-only gRPC streams made every real export UNAVAILABLE for 27-63 s.
    Past ``SLOW_SENDER_SECONDS`` a stream's reservation is cut as soon as another export needs
    the bytes: the real SDK exporter (it retries UNAVAILABLE) delivers within a few seconds, the
    cut streams get DEADLINE_EXCEEDED, counted ``slow``, and the budget is whole again."""
    limits = ListenerLimits(max_inflight_bytes=4 << 20, body_timeout=30.0)
    for receiver in _start(loop, limits=limits):
        with grpc.insecure_channel(receiver.url) as channel:
            held = _Held(channel, 64)
            wait_until(lambda: receiver.stats.requests_rejected[("grpc", "inflight_bytes")] == 60)
            began = time.monotonic()
            exporter = OTLPSpanExporter(endpoint=receiver.url, insecure=True, timeout=20)
            assert exporter.export(SPANS) == SpanExportResult.SUCCESS
            took = time.monotonic() - began
            assert took < 6.0, took
            assert len(receiver.sink.spans) == 2
            slow = receiver.stats.requests_rejected[("grpc", "slow")]
            assert slow >= 1
            held.release()
            codes = Counter(call.exception().code() for call in held.calls)  # type: ignore[union-attr]
        assert codes[grpc.StatusCode.DEADLINE_EXCEEDED] == slow  # each cut stream was told, and counted
        assert codes[grpc.StatusCode.UNAVAILABLE] == 60
        wait_until(lambda: receiver.server.budget.used == 0)


def test_a_message_slower_than_body_timeout_gets_deadline_exceeded_and_is_counted(loop: LoopThread) -> None:
    for receiver in _start(loop, limits=ListenerLimits(body_timeout=0.3)):
        def slow() -> Iterator[bytes]:
            time.sleep(1.5)
            yield to_protobuf(SPANS)

        with grpc.insecure_channel(receiver.url) as channel:
            export = channel.stream_unary(METHOD)
            with pytest.raises(grpc.RpcError) as info:
                export(slow(), timeout=10)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert receiver.stats.requests_rejected[("grpc", "timeout")] == 1 and not receiver.sink.spans
        _call(receiver.url, to_protobuf(SPANS))
        assert len(receiver.sink.spans) == 2


def test_a_call_with_no_message_is_invalid_argument(receiver: Receiver) -> None:
    with grpc.insecure_channel(receiver.url) as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.stream_unary(METHOD)(iter(()), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert receiver.stats.requests_rejected[("grpc", "decode")] == 1
