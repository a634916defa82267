"""The judge inside ``ragmon run`` on 127.0.0.1: real SDK exporter in, the real ``openai`` client
against a scripted OpenAI-compatible server, exact judge series on the scraped ``/metrics``."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from aiohttp import web
from net_helpers import wait_until
from judge_server import delay, judge_server_thread, verdict_for
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from server_helpers import LoopThread, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, JudgeConfig, MetricsConfig, Price, ProbeConfig, ReceiverConfig
from ragmon.judge.lexical import lexical_faithfulness

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

DOCS = [
    ("d1", "The refund window is 30 days from delivery."),
    ("d2", "Shipping takes 5 business days within the country."),
    ("d3", "Gift cards cannot be refunded or exchanged."),
]
ANSWER = "The refund window is 30 days from delivery. Refunds are paid in bitcoin after two hours."
JUDGE_PRICE = Price(input=1.0, output=2.0)  # USD per million tokens
SV = {"service": "rag-api", "variant": "B"}


def send_traces(
    exporters: list[SpanExporter], n: int, evaluation: float | None = None, answer: str = ANSWER,
) -> list[tuple[int, int]]:
    """``n`` RAG traces with document content (query i), to every exporter; (trace id, root span id)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    ids = []
    for i in range(n):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", f"what is the refund window? (query {i})")
            root.set_attribute("output.value", answer)
            if evaluation is not None:
                root.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "Faithfulness", "gen_ai.evaluation.score.value": evaluation})
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for rank, (doc_id, text) in enumerate(DOCS):
                    span.set_attribute(f"retrieval.documents.{rank}.document.id", doc_id)
                    span.set_attribute(f"retrieval.documents.{rank}.document.content", text)
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "gpt-4o-mini")
                span.set_attribute("llm.token_count.prompt", 100)
                span.set_attribute("llm.token_count.completion", 20)
            ids.append((root.get_span_context().trace_id, root.get_span_context().span_id))
    provider.shutdown()
    return ids


@contextmanager
def running(
    judge: JudgeConfig, environ: dict[str, str] | None = None, probes: tuple[ProbeConfig, ...] = (),
) -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        judge=judge,
        pricing={"gpt-4o-mini": Price(input=0.15, output=0.60), "judge-model": JUDGE_PRICE},
        probe=probes,
    )
    with sidecar_thread(config, clock, environ) as (car, loop):
        yield car, clock, loop


def exporter(car: Sidecar) -> HttpExporter:
    return HttpExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)


def finish(car: Sidecar, clock: FakeClock, n: int, before: int = 0) -> None:
    """Wait for ``n`` new traces, end their grace, wait until they are scored."""
    # every span of the new traces held (roots are exported last), then past the grace
    wait_until(lambda: car.assembler.stats().spans_held == 3 * n)
    clock.now += 3.0
    wait_until(lambda: car.pipeline.stats().records == before + n)


def judged(car: Sidecar, outcome: str = "ok") -> int:
    assert car.judge.judge is not None
    return car.judge.judge.stats().counts.get(("faithfulness", outcome), 0)


def test_llm_judge_scores_reach_metrics_exactly() -> None:
    responder = functools.partial(verdict_for, supported=(True, False, True), relevance="partial", relevant=lambda i: i == 1)
    with judge_server_thread(responder=responder, usage=(100, 20)) as server:
        judge = JudgeConfig(base_url=server.base_url, model="judge-model", sample_rate=1.0, concurrency=2)
        with running(judge) as (car, clock, _):
            send_traces([exporter(car)], 3)
            finish(car, clock, 3)
            wait_until(lambda: judged(car) == 3)
            v = samples(scrape(car.ports.metrics))
    gen = {**SV, "source": "judge", "judge": "llm"}
    assert value(v, "ragmon_faithfulness_sum", **gen) == pytest.approx(2.0, abs=1e-12)  # 3 x 2/3
    assert value(v, "ragmon_faithfulness_count", **gen) == 3
    assert value(v, "ragmon_answer_relevance_sum", **gen) == pytest.approx(1.5, abs=1e-12)  # partial = 0.5
    assert value(v, "ragmon_context_relevance_sum", **gen) == pytest.approx(1.0, abs=1e-12)  # 1 of 3 documents
    assert value(v, "ragmon_faithfulness_mean", **gen, window="5m") == pytest.approx(2 / 3, abs=1e-12)
    assert value(v, "ragmon_window_samples", **SV, source="judge", metric="faithfulness_mean", window="5m") == 3
    # the judge as a relevance source: d2 relevant -> rank 2
    src = {**SV, "source": "judge"}
    assert value(v, "ragmon_retrieval_queries_total", **src) == 3
    assert value(v, "ragmon_retrieval_hits_total", **src, k="1") == 0
    assert value(v, "ragmon_retrieval_hits_total", **src, k="3") == 3
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **src) == pytest.approx(1.5, abs=1e-12)
    assert value(v, "ragmon_retrieval_precision_sum", **src, k="3") == pytest.approx(1.0, abs=1e-12)
    assert value(v, "ragmon_retrieval_mrr", **src, window="5m") == pytest.approx(0.5, abs=1e-12)
    assert not any(name.startswith(("ragmon_retrieval_recall", "ragmon_retrieval_ndcg")) and dict(labels).get("source") == "judge" for name, labels in v)
    # outcomes and the judge's own cost
    assert value(v, "ragmon_judge_requests_total", evaluator="faithfulness", outcome="ok") == 3
    assert value(v, "ragmon_judge_requests_total", evaluator="faithfulness", outcome="error") == 0
    assert value(v, "ragmon_judge_cost_usd_total") == pytest.approx(3 * (100 * 1.0 + 20 * 2.0) / 1e6, rel=1e-12)
    assert value(v, "ragmon_judge_info", judge="llm") == 1
    # what went over the wire: one request per trace, temperature 0, strict JSON schema
    assert len(server.requests) == 3
    for body in server.requests:
        assert body["temperature"] == 0 and body["response_format"]["type"] == "json_schema"
        assert body["model"] == "judge-model"


def test_ingest_is_not_slowed_while_the_judge_hangs() -> None:
    with judge_server_thread() as server:
        server.script(*[delay(3.0)] * 10)
        judge = JudgeConfig(base_url=server.base_url, sample_rate=1.0, concurrency=1, max_queue=2, timeout=30.0)
        with running(judge) as (car, clock, _):
            send_traces([exporter(car)], 2)
            finish(car, clock, 2)
            wait_until(lambda: car.judge.judge is not None and car.judge.judge.stats().in_flight == 1)
            started = time.monotonic()
            send_traces([exporter(car)], 5)  # 15 spans over 15 exports, each answered at once
            elapsed = time.monotonic() - started
            finish(car, clock, 5, before=2)
            stats = car.judge.judge.stats() if car.judge.judge else None
            assert stats is not None and stats.in_flight == 1 and stats.queue_depth == 2
            assert stats.counts[("faithfulness", "dropped")] == 4  # 7 = 1 in flight + 2 queued + 4 dropped
            assert elapsed < 2.5, f"15 exports took {elapsed:.2f}s while the judge hung"
            v = samples(scrape(car.ports.metrics))
            assert value(v, "ragmon_traces_total", **SV) == 7
            assert value(v, "ragmon_judge_requests_total", evaluator="faithfulness", outcome="dropped") == 4
            assert value(v, "ragmon_judge_queue") == 2 and value(v, "ragmon_judge_in_flight") == 1


def test_lexical_estimate_without_an_endpoint_and_app_evaluations() -> None:
    with running(JudgeConfig(sample_rate=1.0)) as (car, clock, _):
        send_traces([exporter(car)], 2, evaluation=0.25)
        finish(car, clock, 2)
        v = samples(scrape(car.ports.metrics))
    expected = lexical_faithfulness(ANSWER, [text for _, text in DOCS])
    assert expected is not None and 0 < expected < 1
    lexical = {**SV, "source": "judge", "judge": "lexical"}
    assert value(v, "ragmon_faithfulness_sum", **lexical) == pytest.approx(2 * expected, abs=1e-12)
    assert value(v, "ragmon_faithfulness_count", **lexical) == 2
    app = {**SV, "source": "app", "judge": "app"}
    assert value(v, "ragmon_faithfulness_sum", **app) == pytest.approx(0.5, abs=1e-12)
    assert value(v, "ragmon_faithfulness_mean", **app, window="1h") == pytest.approx(0.25, abs=1e-12)
    assert value(v, "ragmon_judge_info", judge="lexical") == 1


def test_the_lexical_estimate_is_bounded_per_second_and_its_skips_counted() -> None:
    """``judge.lexical_max_per_second``: 3 estimates in a second, the 2 sampled records past it
    counted; a second later the cap has room again. (The clock is the pipeline's: each batch of
    traces is scored at one instant.)"""
    with running(JudgeConfig(sample_rate=1.0, lexical_max_per_second=3)) as (car, clock, _):
        send_traces([exporter(car)], 5)
        finish(car, clock, 5)
        v = samples(scrape(car.ports.metrics))
        assert value(v, "ragmon_judge_lexical_total") == 3
        assert value(v, "ragmon_judge_lexical_skipped_total") == 2
        assert value(v, "ragmon_faithfulness_count", **SV, source="judge", judge="lexical") == 3
        send_traces([exporter(car)], 2)
        finish(car, clock, 2, before=5)  # 3 s later
        v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_judge_lexical_total") == 5
    assert value(v, "ragmon_judge_lexical_skipped_total") == 2


def test_replicas_judge_the_same_sampled_traces() -> None:
    with judge_server_thread() as a, judge_server_thread() as b:
        cars = []
        with running(JudgeConfig(base_url=a.base_url, sample_rate=0.5)) as (car_a, clock_a, _), \
                running(JudgeConfig(base_url=b.base_url, sample_rate=0.5)) as (car_b, clock_b, _):
            cars = [(car_a, clock_a), (car_b, clock_b)]
            send_traces([exporter(car_a), exporter(car_b)], 24)
            for car, clock in cars:
                finish(car, clock, 24)
            for car, _ in cars:
                wait_until(lambda car=car: judged(car) + judged(car, "skipped_rate") == 24)
        queries = [{q for q in range(24) if f"(query {q})" in s.bodies_text()} for s in (a, b)]
    assert queries[0] == queries[1] and 0 < len(queries[0]) < 24


@contextmanager
def capture_server() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    loop = LoopThread()

    async def traces(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(body=ExportTraceServiceRequest().SerializeToString(), content_type="application/x-protobuf")

    async def start() -> tuple[web.AppRunner, int]:
        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner, int(runner.addresses[0][1])

    runner, port = loop.run(start())
    try:
        yield f"http://127.0.0.1:{port}", bodies
    finally:
        loop.run(runner.cleanup())
        loop.close()


def test_scores_are_sent_onward_as_evaluation_events_on_the_judged_trace() -> None:
    with capture_server() as (url, bodies):
        with running(JudgeConfig(sample_rate=1.0, export_endpoint=url)) as (car, clock, _):
            ids = send_traces([exporter(car)], 2)
            finish(car, clock, 2)
            wait_until(lambda: car.judge.sender is not None and car.judge.sender.stats().sent == 2)
            v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_evaluations_exported_total", outcome="sent") == 2
    spans = [s for body in bodies for rs in ExportTraceServiceRequest.FromString(body).resource_spans for ss in rs.scope_spans for s in ss.spans]
    got = {(int.from_bytes(s.trace_id, "big"), int.from_bytes(s.parent_span_id, "big")) for s in spans}
    assert got == set(ids)  # in the judged trace, under its root span
    event = spans[0].events[0]
    attributes = {kv.key: kv.value for kv in event.attributes}
    assert event.name == "gen_ai.evaluation.result"
    assert attributes["gen_ai.evaluation.name"].string_value == "faithfulness"
    assert attributes["gen_ai.evaluation.score.value"].double_value == lexical_faithfulness(ANSWER, [t for _, t in DOCS])



@pytest.mark.parametrize(("base_url", "imported"), [("", False), ("http://127.0.0.1:9/v1", True)])
def test_the_openai_client_is_imported_only_with_an_endpoint(base_url: str, imported: bool) -> None:
    """Without a judge endpoint the sidecar never imports ``openai`` (about 13 MB a process)."""
    code = (
        "import sys\n"
        "from ragmon.sidecar.wiring import Sidecar\n"
        "from ragmon.config import Config, JudgeConfig, MetricsConfig, ReceiverConfig\n"
        "config = Config(receiver=ReceiverConfig(http='', grpc=''), metrics=MetricsConfig(listen=''), "
        "judge=JudgeConfig(base_url=sys.argv[1]))\n"
        "car = Sidecar(config, environ={})\n"
        "print(car.judge.mode, 'openai' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, base_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["llm" if imported else "lexical", str(imported)]


def test_a_started_sidecar_loads_the_table_after_its_ports_open() -> None:
    """``Sidecar.start`` opens its ports without the table, then loads it in a thread."""
    async def scenario() -> tuple[bool, bool]:
        car = Sidecar(Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen="")), environ={})
        before = car.pricer.loaded
        await car.start()
        try:
            assert car._life.prices is not None
            await car._life.prices
            return before, car.pricer.loaded
        finally:
            await car.stop()

    assert asyncio.run(scenario()) == (False, True)
