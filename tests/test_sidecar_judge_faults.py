"""The whole sidecar on 127.0.0.1 with a judge that fails: 500s, hangs, garbage, slowness.

The real SDK exporter posts OTLP, the real ``openai`` client calls the scripted server
(``judge_server``), ``/metrics`` is scraped. For every fault: each OTLP export is answered at
once, retrieval series are exact, judge outcomes are counted exactly, a failure never becomes a
score, the breaker (defaults: opens after 5 failures in a row, 5 s cool-down doubling per failed
trial) opens and closes on the sidecar's clock, and ``Sidecar.stop`` is bounded while the judge
hangs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from net_helpers import wait_until
from judge_server import (
    Action,
    JudgeServer,
    completion,
    delay,
    gzip_bomb,
    hang,
    judge_server_thread,
    raw,
    reply,
    status,
    streamed,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from server_helpers import LoopThread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, JudgeConfig, MetricsConfig, Price, ReceiverConfig
from ragmon.judge.client import MAX_REPLY_BYTES

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

SV = {"service": "rag-api", "variant": "B"}
DOCS = [("d1", "The refund window is 30 days."), ("d2", "Shipping takes 5 days."), ("d3", "Gift cards are final.")]
EVALUATORS = ("faithfulness", "answer_relevance", "context_relevance")  # no reference answer in these traces
OUTCOMES = ("ok", "error", "timeout", "invalid", "skipped_rate", "skipped_budget", "dropped")
HUNG_EXPORT = 2.0
"""An export slower than this would mean ingest waited on the judge (which takes 30 s or more)."""


class TimedExporter(SpanExporter):
    """Records how long each export took and what it returned (the inner one is shut down at the end)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.seconds: list[float] = []
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        started = time.monotonic()
        result = self.inner.export(spans)
        self.seconds.append(time.monotonic() - started)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        """Kept open: every batch of traces has its own provider, one exporter serves them all."""


@dataclass
class Running:
    car: Sidecar
    clock: FakeClock
    loop: LoopThread
    server: JudgeServer
    exporter: TimedExporter
    sent: int = 0
    stopped: bool = False

    def send(self, n: int) -> None:
        """``n`` labelled RAG traces (relevant: d1, ranked first), each with a new query; then
        their grace is ended (3 s on the clock) and they are scored."""
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        tracer = provider.get_tracer("app")
        for i in range(self.sent, self.sent + n):
            with tracer.start_as_current_span("rag") as root:
                root.set_attribute("openinference.span.kind", "CHAIN")
                root.set_attribute("input.value", f"what is the refund window? (query {i})")
                root.set_attribute("output.value", "The refund window is 30 days.")
                with tracer.start_as_current_span("retrieve") as span:
                    span.set_attribute("openinference.span.kind", "RETRIEVER")
                    for rank, (doc_id, text) in enumerate(DOCS):
                        span.set_attribute(f"retrieval.documents.{rank}.document.id", doc_id)
                        span.set_attribute(f"retrieval.documents.{rank}.document.content", text)
                    span.set_attribute("ragmon.relevant_document_ids", ["d1"])
                with tracer.start_as_current_span("llm") as span:
                    span.set_attribute("openinference.span.kind", "LLM")
                    span.set_attribute("llm.model_name", "gpt-4o-mini")
        provider.shutdown()
        before = self.sent
        self.sent += n
        wait_until(lambda: self.car.assembler.stats().spans_held == 3 * n)
        self.clock.now += 3.0
        wait_until(lambda: self.car.pipeline.stats().records == before + n)

    def counts(self) -> dict[str, int]:
        """Judge outcomes of faithfulness (every evaluator is checked to agree)."""
        judge = self.car.judge.judge
        assert judge is not None
        counts = judge.stats().counts
        per = {e: {o: counts.get((e, o), 0) for o in OUTCOMES} for e in EVALUATORS}
        assert all(per[e] == per["faithfulness"] for e in EVALUATORS), per
        return per["faithfulness"]

    def wait_counts(self, **expected: int) -> None:
        want = {o: expected.get(o, 0) for o in OUTCOMES}
        try:
            wait_until(lambda: self.counts() == want)
        except AssertionError:
            raise AssertionError(f"judge outcomes {self.counts()} != {want}") from None

    def check_metrics(self, breaker_open: bool, **outcomes: int) -> None:
        """Exact retrieval and judge series on /metrics; scores exist exactly for ``ok``."""
        v = samples(scrape(self.car.ports.metrics))
        label = {**SV, "source": "label"}
        assert value(v, "ragmon_traces_total", **SV) == self.sent
        assert value(v, "ragmon_retrieval_queries_total", **label) == self.sent
        assert value(v, "ragmon_retrieval_hits_total", **label, k="1") == self.sent
        assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **label) == self.sent
        for evaluator in EVALUATORS:
            for outcome in OUTCOMES:
                got = value(v, "ragmon_judge_requests_total", evaluator=evaluator, outcome=outcome)
                assert got == outcomes.get(outcome, 0), (evaluator, outcome, got)
        assert value(v, "ragmon_judge_breaker_open") == (1 if breaker_open else 0)
        ok = outcomes.get("ok", 0)
        llm = {**SV, "source": "judge", "judge": "llm"}
        judged = {name: n for (name, labels), n in v.items() if dict(labels).get("source") == "judge"}
        if ok:
            for score in EVALUATORS:  # every claim supported, answers relevant, documents relevant
                assert value(v, f"ragmon_{score}_count", **llm) == ok
                assert value(v, f"ragmon_{score}_sum", **llm) == ok
            assert value(v, "ragmon_retrieval_queries_total", **SV, source="judge") == ok
        else:  # no score, no judged relevance, from any failure
            assert not any(n for n in judged.values()), judged
        assert all(r is SpanExportResult.SUCCESS for r in self.exporter.results)
        assert max(self.exporter.seconds) < HUNG_EXPORT, max(self.exporter.seconds)


@contextmanager
def running(**judge: object) -> Iterator[Running]:
    """A sidecar whose judge calls a scripted server; defaults: every trace sampled, one call
    at a time, no retries, no budget."""
    settings: dict[str, object] = dict(
        model="judge-model", sample_rate=1.0, concurrency=1, max_retries=0, timeout=30.0,
        max_per_minute=100_000, max_usd_per_hour=1e9,
    )
    settings.update(judge)
    with judge_server_thread() as server:
        clock = FakeClock()
        config = Config(
            receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
            metrics=MetricsConfig(listen="127.0.0.1:0"),
            judge=JudgeConfig(base_url=server.base_url, **settings),  # type: ignore[arg-type]
            pricing={"judge-model": Price(input=1.0, output=1.0)},
        )
        loop = LoopThread()

        async def start() -> Sidecar:
            car = Sidecar(config, clock=clock, environ={})
            await car.start()
            return car

        car = loop.run(start())
        exporter = TimedExporter(HttpExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10))
        state = Running(car, clock, loop, server, exporter)
        try:
            yield state
        finally:
            exporter.inner.shutdown()
            if not state.stopped:
                loop.run(car.stop(timeout=10), timeout=30)
            loop.close()


def test_judge_answering_500_opens_the_breaker_and_a_trial_closes_it() -> None:
    with running(max_retries=1) as r:
        r.server.script(*[status(500)] * 5)
        r.send(4)  # 2 + 2 + 1 attempts fail: the fifth opens the breaker (clock 1003, until 1008)
        r.wait_counts(error=4)
        assert len(r.server.requests) == 5
        r.check_metrics(breaker_open=True, error=4)
        r.send(3)  # clock 1006: refused before any work, no request
        r.wait_counts(error=7)
        assert len(r.server.requests) == 5
        r.send(1)  # clock 1009: the trial succeeds and closes the breaker
        r.wait_counts(error=7, ok=1)
        r.send(3)
        r.wait_counts(error=7, ok=4)
        assert len(r.server.requests) == 9
        r.check_metrics(breaker_open=False, error=7, ok=4)


def test_judge_that_hangs_times_out_opens_the_breaker_doubles_the_cooldown_and_recovers() -> None:
    with running(timeout=0.2) as r:
        r.server.script(*[hang()] * 6)
        r.send(6)  # five time-outs open the breaker at 1003 (until 1008); the sixth is refused
        r.wait_counts(timeout=5, error=1)
        r.check_metrics(breaker_open=True, timeout=5, error=1)
        r.send(2)  # 1006: open
        r.wait_counts(timeout=5, error=3)
        r.send(1)  # 1009: the trial hangs too -> open again, cool-down 10 s (until 1019)
        r.wait_counts(timeout=6, error=3)
        r.clock.now += 3.0
        r.send(1)  # 1015: past a 5 s cool-down, within the doubled one: refused
        r.wait_counts(timeout=6, error=4)
        assert len(r.server.requests) == 6
        r.check_metrics(breaker_open=True, timeout=6, error=4)
        r.clock.now += 3.0
        r.send(1)  # 1021: the trial is answered
        r.send(2)
        r.wait_counts(timeout=6, error=4, ok=3)
        assert len(r.server.requests) == 9
        r.check_metrics(breaker_open=False, timeout=6, error=4, ok=3)


def test_stop_is_bounded_while_the_judge_hangs_and_ingest_never_waits() -> None:
    with running(timeout=30.0) as r:
        r.server.script(*[hang()] * 10)
        r.send(3)
        judge = r.car.judge.judge
        assert judge is not None
        wait_until(lambda: judge.stats().in_flight == 1 and judge.stats().queue_depth == 2)
        r.send(5)  # 15 exports while a judge call hangs: each answered at once
        assert len(r.exporter.seconds) == 24
        r.check_metrics(breaker_open=False)
        v = samples(scrape(r.car.ports.metrics))
        assert value(v, "ragmon_judge_in_flight") == 1 and value(v, "ragmon_judge_queue") == 7
        started = time.monotonic()
        r.loop.run(r.car.stop(timeout=10), timeout=30)
        r.stopped = True
        elapsed = time.monotonic() - started
        # the judge gets min(5 s, timeout) for calls in flight, then they are cancelled
        assert elapsed < 5.0 + 2.5, f"stop took {elapsed:.1f}s"
        assert r.counts() == {**dict.fromkeys(OUTCOMES, 0), "dropped": 8}
        assert judge.stats().in_flight == 0 and len(r.server.requests) == 1


def test_garbage_replies_are_counted_exactly_and_never_scored() -> None:
    invalid = [
        reply("I think the answer is fine. Score: 1.0"),  # no JSON object
        reply('{"faithfulness": 1.0, "answer_relevance": 1.0, "context_relevance": 1.0}'),  # wrong shape
        reply("x" * 300_000),  # a huge message
    ]
    broken = [
        raw("{not json"), raw('{"object": "error"}'), raw("[1, 2]"),
        raw(completion("x" * MAX_REPLY_BYTES)), streamed(50_000_000), gzip_bomb(100_000_000),
        raw('{"a":' * 100_000),
    ]
    # an invalid reply is the endpoint answering (a breaker success), so no five failures come
    # in a row; at the tenth call 7 of 10 failed: the ratio rule (>= 50% of >= 10) opens it
    script = [broken[0], broken[1], invalid[0], broken[2], broken[3], invalid[1], broken[4], broken[5],
              invalid[2], broken[6]]
    with running() as r:
        r.server.script(*script[:9])
        r.send(9)
        r.wait_counts(error=6, invalid=3)
        r.check_metrics(breaker_open=False, error=6, invalid=3)
        r.server.script(script[9])
        r.send(1)  # clock 1006: opens until 1011
        r.wait_counts(error=7, invalid=3)
        assert len(r.server.requests) == 10
        r.check_metrics(breaker_open=True, error=7, invalid=3)
        r.clock.now += 3.0
        r.send(1)  # 1012: the trial gets a valid verdict, scored; the breaker closes
        r.wait_counts(error=7, invalid=3, ok=1)
        r.check_metrics(breaker_open=False, error=7, invalid=3, ok=1)


def test_slow_judge_scores_in_time_or_times_out_without_a_score() -> None:
    with running(timeout=1.0, concurrency=2) as r:
        r.server.script(*[delay(0.6)] * 4, delay(3.0), delay(3.0))
        r.send(2)
        judge = r.car.judge.judge
        assert judge is not None
        wait_until(lambda: judge.stats().in_flight == 2)
        r.send(4)  # sent while both slots are busy
        r.wait_counts(ok=4, timeout=2)
        assert len(r.server.requests) == 6
        r.check_metrics(breaker_open=False, ok=4, timeout=2)


@pytest.mark.parametrize("action", [status(404), status(401)])
def test_a_refusing_endpoint_opens_the_breaker(action: Action) -> None:
    with running() as r:
        r.server.script(*[action] * 5)
        r.send(7)
        r.wait_counts(error=7)
        assert len(r.server.requests) == 5
        r.check_metrics(breaker_open=True, error=7)
