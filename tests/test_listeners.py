"""Listener limits on real sockets: the connection cap, header and idle timeouts, log volume."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from net_helpers import closed_by_peer, raise_open_files, read_all, status, wait_until
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from otel_helpers import to_protobuf
from process_helpers import RagmonProcess, config_file
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import LoopThread, post
from test_receiver_http import PB, SELECTION, SPANS, Sink

from ragmon.sidecar.openfiles import connection_caps
from ragmon.sidecar.process import _on_loop_error
from ragmon.config import Config, MetricsConfig, ReceiverConfig
from ragmon.net.listeners import ListenerLimits, ListenerStats
from ragmon.net.ratelog import RateLimitedLog
from ragmon.receivers import otlp_http
from ragmon.receivers.ingest import IngestStats, ReceiverSettings

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)


class Served:
    def __init__(self, port: int, stats: ListenerStats) -> None:
        self.port = port
        self.stats = stats
        self.url = f"http://127.0.0.1:{port}/v1/traces"


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


def _serve(loop: LoopThread, limits: ListenerLimits) -> Iterator[Served]:
    stats = ListenerStats()
    receiver = loop.run(otlp_http.start(
        "127.0.0.1", 0, ReceiverSettings(SELECTION, 1 << 20), Sink(), IngestStats(), limits=limits, listeners=stats,
    ))
    try:
        yield Served(receiver.port, stats)
    finally:
        loop.run(receiver.close())


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _busy(port: int) -> socket.socket:
    """A connection whose request is in the handler, waiting for the rest of its body."""
    sock = _connect(port)
    sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\n\x0a")
    return sock


def test_at_the_cap_the_longest_idle_connection_makes_room(loop: LoopThread) -> None:
    for served in _serve(loop, ListenerLimits(max_connections=5)):
        idle = [_connect(served.port) for _ in range(5)]
        wait_until(lambda: served.stats.open["otlp_http"] == 5)
        exporter = OTLPSpanExporter(endpoint=served.url, timeout=5)
        assert exporter.export(SPANS) == SpanExportResult.SUCCESS
        assert closed_by_peer(idle[0], 2.0)  # the oldest made room
        assert not closed_by_peer(idle[4], 0.2)
        assert served.stats.closed[("otlp_http", "evicted")] == 1
        assert served.stats.refused["otlp_http"] == 0
        for sock in idle:
            sock.close()
        wait_until(lambda: served.stats.open["otlp_http"] <= 1)


def test_at_the_cap_with_every_connection_busy_a_new_one_gets_503_and_is_closed(loop: LoopThread) -> None:
    for served in _serve(loop, ListenerLimits(max_connections=3)):
        busy = [_busy(served.port) for _ in range(3)]
        time.sleep(0.2)  # their requests are in the handler
        with _connect(served.port) as extra:
            answer = read_all(extra, 2.0)
        assert status(answer) == 503 and b"Retry-After: 1" in answer
        assert served.stats.refused["otlp_http"] == 1
        for sock in busy:
            sock.close()
        wait_until(lambda: served.stats.open["otlp_http"] == 0)
        assert post(served.url, to_protobuf(SPANS), PB)[0] == 200


def _drip(sock: socket.socket, data: bytes, every: float) -> tuple[int, float]:
    """Send ``data`` one byte per ``every`` seconds until the server closes; (bytes sent, seconds)."""
    began = time.monotonic()
    sent = 0
    try:
        for byte in data:
            sock.sendall(bytes([byte]))
            sent += 1
            time.sleep(every)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent, time.monotonic() - began


def test_a_slowloris_is_cut_after_header_timeout(loop: LoopThread) -> None:
    """On a new connection, and on a kept-alive one from the first byte of its next request."""
    body = to_protobuf(SPANS)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n" % len(body)
    for served in _serve(loop, ListenerLimits(header_timeout=1.0)):
        with _connect(served.port) as sock:
            sent, cut = _drip(sock, head, 0.2)
            assert status(read_all(sock, 2.0)) in (0, 408)
        assert sent < len(head) and 0.9 < cut < 3.5, (sent, cut)
        with _connect(served.port) as sock:
            sock.sendall(head + body)
            assert status(sock.recv(65536)) == 200
            time.sleep(1.2)  # idle between requests: not a header timeout
            sent, cut = _drip(sock, head, 0.2)
        assert sent < len(head) and 0.9 < cut < 3.5, (sent, cut)
        assert served.stats.closed[("otlp_http", "header_timeout")] == 2


def test_a_connection_that_sends_nothing_is_closed_after_header_timeout(loop: LoopThread) -> None:
    for served in _serve(loop, ListenerLimits(header_timeout=0.5)):
        with _connect(served.port) as sock:
            began = time.monotonic()
            assert closed_by_peer(sock, 3.0)
            assert 0.4 < time.monotonic() - began < 2.0


def test_a_kept_alive_connection_waits_for_idle_timeout_not_header_timeout(loop: LoopThread) -> None:
    body = to_protobuf(SPANS)
    request = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    for served in _serve(loop, ListenerLimits(header_timeout=0.5, idle_timeout=1.5)):
        with _connect(served.port) as sock:
            sock.sendall(request)
            assert status(sock.recv(65536)) == 200
            time.sleep(0.8)  # past header_timeout, within idle_timeout
            sock.sendall(request)
            assert status(sock.recv(65536)) == 200
            began = time.monotonic()
            assert closed_by_peer(sock, 4.0)  # idle_timeout after the last answer
            assert 1.0 < time.monotonic() - began < 3.0


def test_warnings_are_rate_limited_per_reason_and_count_what_was_held_back(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limiter = RateLimitedLog(logging.getLogger("ragmon.test"), interval=10.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO)
    for _ in range(100):
        limiter.warn("malformed", "10.0.0.1:5", "a bad request line")
        limiter.warn("unauthorized", "10.0.0.2:6", "missing or wrong bearer token")
    assert len(caplog.records) == 2
    now[0] += 10.0
    limiter.warn("malformed", "10.0.0.1:7", "a bad request line")
    assert len(caplog.records) == 3
    assert caplog.records[-1].getMessage() == (
        "rejected malformed from 10.0.0.1:7: a bad request line (and 99 more since the last such line)")


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not in /metrics")


def test_thousands_of_idle_connections_leave_healthz_and_new_clients_answering(tmp_path: Path) -> None:
    """Past the cap on both the ingest and the metrics port: liveness and ingest still answer,
    file descriptors stay bounded, and the log holds a few lines, not one per connection."""
    limit = raise_open_files(20_000)
    n = min(4000, (limit - 500) // 2)  # this process holds the client ends (ragmon its own)
    config = config_file(tmp_path, "[receiver]\nmax_connections = 1000\n[metrics]\nmax_connections = 16\nlinger = \"0s\"\n")
    with RagmonProcess("--config", config) as ragmon:
        sockets: list[socket.socket] = []
        try:
            http, metrics = ragmon.ports["OTLP/HTTP"], ragmon.ports["metrics"]
            for i in range(n):
                sockets.append(socket.create_connection(("127.0.0.1", http if i % 20 else metrics), timeout=10))
            for _ in range(5):
                began = time.monotonic()
                assert ragmon.get("/healthz", timeout=3) == "ok\n"
                assert time.monotonic() - began < 1.0
            exporter = OTLPSpanExporter(endpoint=ragmon.url("OTLP/HTTP", "/v1/traces"), timeout=5)
            assert exporter.export(SPANS) == SpanExportResult.SUCCESS
            text = ragmon.get("/metrics")
            assert _metric(text, "ragmon_connections_open", listener="otlp_http") <= 1000
            assert _metric(text, "ragmon_connections_open", listener="metrics") <= 16
            assert _metric(text, "ragmon_connections_closed_total", listener="otlp_http", reason="evicted") >= n * 0.95 - 1000 - 20
            assert _metric(text, "ragmon_connections_closed_total", listener="metrics", reason="evicted") > 0
            with urllib.request.urlopen(ragmon.url("metrics", "/readyz"), timeout=3) as response:
                assert response.status == 200
        finally:
            for sock in sockets:
                sock.close()
            code = ragmon.stop()
        assert code == 0
        assert "Traceback" not in ragmon.stderr
        assert len(ragmon.lines) < 30, ragmon.stderr[-3000:]


def test_connection_caps_leave_room_for_healthz_under_a_low_open_file_limit(caplog: pytest.LogCaptureFixture) -> None:
    config = Config(receiver=ReceiverConfig(max_connections=1024), metrics=MetricsConfig(max_connections=64))
    assert connection_caps(config, None) == (1024, 64)
    assert connection_caps(config, 1 << 20) == (1024, 64)
    receiver, metrics = connection_caps(config, 2048)
    assert 2 * receiver + metrics <= 2048 - 1024 and metrics >= 16
    assert "open-file limit (2048) is too low" in caplog.text


def test_a_flood_of_event_loop_errors_is_one_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    handle = _on_loop_error(RateLimitedLog(logging.getLogger("ragmon")))
    loop = asyncio.new_event_loop()
    try:
        for _ in range(1000):
            handle(loop, {"message": "socket.accept() out of system resource",
                          "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    assert len(caplog.records) == 1 and not caplog.records[0].exc_info
    assert "Too many open files" in caplog.records[0].getMessage()
