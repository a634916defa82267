"""SIGTERM to a real ``ragmon run``: stop accepting, score what is held, linger for one scrape, exit 0."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otel_helpers import record_spans, to_protobuf
from net_helpers import read_all, status
from process_helpers import RagmonProcess, config_file
from prometheus_client.parser import text_string_to_metric_families
from test_sidecar import send_rag_traces

from ragmon.sidecar.wiring import shutdown_bound

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)


def _rag_trace(tracer):  # type: ignore[no-untyped-def]
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "what is the refund window?")
        root.set_attribute("output.value", "30 days.")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", "d1")
            span.set_attribute("ragmon.relevant_document_ids", ["d1"])
        with tracer.start_as_current_span("llm") as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("llm.model_name", "gpt-4o-mini")


TEMPLATE = ExportTraceServiceRequest.FromString(to_protobuf(record_spans(_rag_trace, service="load")))


def _fresh_trace() -> bytes:
    """One whole RAG trace (3 spans) with a trace id of its own."""
    request = ExportTraceServiceRequest()
    request.CopyFrom(TEMPLATE)
    trace_id = os.urandom(16)
    for span in request.resource_spans[0].scope_spans[0].spans:
        span.trace_id = trace_id
    return request.SerializeToString()


def _traces_total(text: str, service: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ragmon_traces_total" and sample.labels.get("service") == service:
                total += sample.value
    return total


@dataclass
class Load:
    """Threads posting whole traces, one request each, until told to stop; counts the 200s."""

    port: int
    acked: int = 0
    answers: dict[int, int] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            try:
                connection.request("POST", "/v1/traces", _fresh_trace(), {"Content-Type": "application/x-protobuf"})
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0
                connection.close()
                time.sleep(0.05)
            with self.lock:
                self.acked += status == 200
                self.answers[status] = self.answers.get(status, 0) + 1


@dataclass
class Scraper:
    """Scrapes /metrics over one kept-alive connection, as Prometheus does, until it fails."""

    port: int
    results: list[tuple[float, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            try:
                connection.request("GET", "/metrics")
                response = connection.getresponse()
                text = response.read().decode()
                self.results.append((time.monotonic(), text if response.status == 200 else None))
            except (OSError, http.client.HTTPException) as error:
                self.results.append((time.monotonic(), f"error: {error!r}"))
                return
            time.sleep(0.1)


def _slow_body(port: int) -> socket.socket:
    """A client that sent its headers and a first byte, then stalls (a request left hanging)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                 b"Content-Length: 1000\r\n\r\n\x0a")
    return sock


def test_sigterm_under_load_scores_every_acknowledged_trace_and_exits_0_within_the_bound(tmp_path: Path) -> None:
    linger = 20.0
    config = config_file(tmp_path, f'[traces]\ngrace = "60s"\n[metrics]\nlinger = "{linger:g}s"\n')
    with RagmonProcess("--config", config) as ragmon:
        load = Load(ragmon.ports["OTLP/HTTP"])
        threads = [threading.Thread(target=load.run) for _ in range(4)]
        scraper = Scraper(ragmon.ports["metrics"])
        scraping = threading.Thread(target=scraper.run)
        hanging = [_slow_body(ragmon.ports["OTLP/HTTP"]) for _ in range(3)]
        exporters = (
            OTLPSpanExporter(endpoint=ragmon.url("OTLP/HTTP", "/v1/traces"), timeout=5),
            GrpcExporter(endpoint=f"127.0.0.1:{ragmon.ports['OTLP/gRPC']}", insecure=True, timeout=5),
        )

        def sdk_export() -> None:  # the real SDK exporters, over HTTP and gRPC, posting throughout
            while not load.stop.is_set():
                for exporter in exporters:
                    send_rag_traces(exporter, "sdk")

        sdk = threading.Thread(target=sdk_export, daemon=True)
        try:
            for thread in (*threads, scraping, sdk):
                thread.start()
            assert ragmon.wait_for(lambda: load.acked >= 200, 30)
            sent = ragmon.signal()
            code = ragmon.wait(shutdown_bound(linger) + 5)
            exited = time.monotonic() - sent
            left_hanging = [read_all(sock, 1.0) for sock in hanging]
        finally:
            load.stop.set()
            scraper.stop.set()
            for thread in (*threads, scraping, sdk):
                thread.join(15)
            for sock in hanging:
                sock.close()
        for answer in left_hanging:  # requests in flight at SIGTERM were answered, to be retried
            assert status(answer) == 503 and b"Retry-After: 1" in answer and b"shutting down" in answer, answer
        assert code == 0, ragmon.stderr[-3000:]
        assert "Traceback" not in ragmon.stderr, ragmon.stderr[-3000:]
        assert "final values scraped" in ragmon.stderr, ragmon.stderr[-2000:]
        # the scraper was answered until the final values were read, then ragmon exited at once
        scrapes = [(at, text) for at, text in scraper.results if text is not None and not text.startswith("error")]
        final_at, final = scrapes[-1]
        assert _traces_total(final, "load") == load.acked, (load.answers, ragmon.stderr[-2000:])
        assert all(not text.startswith("error") for at, text in scraper.results if at <= final_at and text)
        assert exited < 10.0, (exited, ragmon.stderr[-2000:])
        assert sent < final_at <= sent + exited
        assert exited - (final_at - sent) < 2.0  # exited right after that scrape


def test_sigterm_idle_with_no_linger_exits_promptly(tmp_path: Path) -> None:
    with RagmonProcess("--config", config_file(tmp_path, '[metrics]\nlinger = "0s"\n')) as ragmon:
        sent = ragmon.signal()
        assert ragmon.wait(10) == 0
        assert time.monotonic() - sent < 3.0, ragmon.stderr
        assert "Traceback" not in ragmon.stderr


def test_a_scrape_during_the_linger_reads_the_drained_traces_and_ends_it(tmp_path: Path) -> None:
    config = config_file(tmp_path, '[traces]\ngrace = "60s"\n[metrics]\nlinger = "30s"\n')
    with RagmonProcess("--config", config) as ragmon:
        send_rag_traces(OTLPSpanExporter(endpoint=ragmon.url("OTLP/HTTP", "/v1/traces"), timeout=10), "svc")
        assert _traces_total(ragmon.get("/metrics"), "svc") == 0  # held: the grace is a minute
        ragmon.signal()
        assert ragmon.wait_for(lambda: "/metrics answers until" in ragmon.stderr, 15), ragmon.stderr
        time.sleep(0.5)
        assert ragmon.process.poll() is None  # lingering: no scrape yet
        assert ragmon.get("/healthz") == "ok\n"  # not a scrape: still lingering
        assert ragmon.process.poll() is None
        text = ragmon.get("/metrics")
        scraped = time.monotonic()
        assert _traces_total(text, "svc") == 3
        assert ragmon.wait(10) == 0
        assert time.monotonic() - scraped < 2.0, ragmon.stderr
        assert "final values scraped" in ragmon.stderr and "Traceback" not in ragmon.stderr


def test_a_second_signal_cuts_the_linger(tmp_path: Path) -> None:
    with RagmonProcess("--config", config_file(tmp_path, '[metrics]\nlinger = "60s"\n')) as ragmon:
        ragmon.signal()
        assert ragmon.wait_for(lambda: "/metrics answers until" in ragmon.stderr, 15), ragmon.stderr
        sent = ragmon.signal()
        assert ragmon.wait(10) == 0
        assert time.monotonic() - sent < 3.0
