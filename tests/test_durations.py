"""Span timestamps from the wire never become an impossible latency: a root span starting at
0 ns (1.8e9 s before now), one ending in the far future, or a stage span ending before it
starts records no latency and is counted in ``ragmon_durations_invalid_total{stage}``; the
request is still scored. Spans sent by the real OpenTelemetry SDK over OTLP/HTTP."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer
from otel_helpers import to_protobuf
from prometheus_client.parser import text_string_to_metric_families
from net_helpers import wait_until
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, ReceiverConfig, TracesConfig

NOW = 1_765_000_000 * 10**9
"""A start time in Unix nanoseconds (December 2025)."""
SV = {"service": "rag-api", "variant": "default"}


@pytest.fixture
def sidecar() -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        traces=TracesConfig(max_duration=3600.0),
    )
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


def _send(car: Sidecar, root: tuple[int, int], retrieval: tuple[int, int]) -> None:
    """One RAG request: a CHAIN root and a RETRIEVER child, with the times given (ns)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    top = tracer.start_span("rag", start_time=root[0], attributes={"openinference.span.kind": "CHAIN", "input.value": "q"})
    with trace.use_span(top, end_on_exit=False):
        child = tracer.start_span("retrieve", start_time=retrieval[0], attributes={
            "openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "d1",
            "ragmon.relevant_document_ids": ["d1"],
        })
        child.end(end_time=retrieval[1])
    top.end(end_time=root[1])
    provider.shutdown()


@pytest.mark.parametrize(
    ("root", "retrieval", "invalid"),
    [
        ((0, NOW), (NOW - 10**9, NOW - 5 * 10**8), {"total": 1, "retrieval": 0}),
        ((NOW, 2**63 - 1), (NOW, NOW + 10**8), {"total": 1, "retrieval": 0}),
        ((NOW, NOW + 2 * 10**9), (NOW + 10**9, NOW), {"total": 0, "retrieval": 1}),
        ((NOW, NOW + 3600 * 10**9), (NOW, NOW + 3600 * 10**9 + 1), {"total": 0, "retrieval": 1}),
        ((NOW, NOW + 7200 * 10**9), (NOW, NOW + 10**9), {"total": 1, "retrieval": 0}),  # the configured bound, not 1d
    ],
)
def test_an_impossible_duration_records_no_latency_and_is_counted(
    sidecar: tuple[Sidecar, FakeClock, LoopThread], root: tuple[int, int], retrieval: tuple[int, int],
    invalid: dict[str, int],
) -> None:
    car, clock, _ = sidecar
    _send(car, root, retrieval)
    wait_until(lambda: car.assembler.stats().spans_held == 2)
    clock.now += 3.0  # past the grace
    wait_until(lambda: car.pipeline.stats().records == 1)
    v = samples(scrape(car.ports.metrics))
    for stage, n in invalid.items():
        assert value(v, "ragmon_durations_invalid_total", stage=stage) == n
        count = v.get(("ragmon_request_duration_seconds_count", frozenset({**SV, "stage": stage}.items())), 0.0)
        assert count == 1 - n  # recorded exactly when valid
    total = v.get(("ragmon_request_duration_seconds_sum", frozenset({**SV, "stage": "total"}.items())))
    assert total is None or total <= 3600.0
    assert value(v, "ragmon_traces_total", **SV) == 1  # the request is still scored
    assert value(v, "ragmon_retrieval_queries_total", **SV, source="label") == 1


_TIME = st.one_of(
    st.integers(0, 2**64 - 1),
    st.sampled_from([0, 1, NOW, NOW + 1, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(-10**12, 10**13).map(lambda d: max(0, NOW + d)),
)
"""Any OTLP timestamp (fixed64 nanoseconds), with plausible ones near ``NOW`` weighted in."""


class _UrandomIds(IdGenerator):
    """Ids from the OS: hypothesis seeds ``random`` the same for every example, and the SDK's
    ids come from it (every example would send the same trace, late after the first)."""

    def generate_span_id(self) -> int:
        return int.from_bytes(os.urandom(8), "big") or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1


def _record(build: Callable[[Tracer], None]) -> Sequence[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api"}), id_generator=_UrandomIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("tests"))
    provider.shutdown()
    return exporter.get_finished_spans()


def test_any_timestamps_never_give_an_impossible_latency(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    """Property: whatever the times of a root and its retriever (encoded by the SDK's own OTLP
    encoder), the body is accepted, ``/metrics`` parses in both formats with finite values, no
    latency series holds more than ``max_duration`` a request, and each span's duration is
    either recorded or counted invalid."""
    car, clock, _ = sidecar
    url = f"http://127.0.0.1:{car.ports.http}/v1/traces"
    sent = 0

    @settings(max_examples=60, deadline=None, derandomize=True, database=None, 
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(_TIME, _TIME, _TIME, _TIME)
    def one(root_start: int, root_end: int, child_start: int, child_end: int) -> None:
        nonlocal sent

        def build(tracer: Tracer) -> None:
            top = tracer.start_span("rag", start_time=root_start, attributes={"openinference.span.kind": "CHAIN"})
            with trace.use_span(top, end_on_exit=False):
                child = tracer.start_span("retrieve", start_time=child_start, attributes={
                    "openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "d1"})
                child.end(end_time=child_end)
            top.end(end_time=root_end)

        status, _, _ = post(url, to_protobuf(_record(build)), {"Content-Type": "application/x-protobuf"})
        assert status == 200
        sent += 1
        wait_until(lambda: car.assembler.stats().spans_held == 2)
        clock.now += 3.0
        wait_until(lambda: car.pipeline.stats().records == sent)
        for openmetrics in (False, True):
            for family in text_string_to_metric_families(scrape(car.ports.metrics, openmetrics).replace("# EOF\n", "")):
                assert all(math.isfinite(s.value) for s in family.samples), family.name
        v = samples(scrape(car.ports.metrics))
        for stage in ("total", "retrieval"):
            labels = frozenset({**SV, "stage": stage}.items())
            count = v.get(("ragmon_request_duration_seconds_count", labels), 0.0)
            assert v.get(("ragmon_request_duration_seconds_sum", labels), 0.0) <= 3600.0 * count
            assert count + value(v, "ragmon_durations_invalid_total", stage=stage) == sent

    one()
