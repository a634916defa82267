"""The judge inside ``ragmon run`` with a huge trace (SPEC §7, issue "Trust, second round"):
hundreds of 16 KB documents, sampled at rate 1. The real SDK exporter sends the trace, the real
``openai`` client calls the scripted server (``judge_server``), ``/healthz`` is polled while the
trace is judged: the event loop keeps answering, and the prompt that reaches the server is cut
to ``judge.max_documents`` documents of ``MAX_DATA_CHARS`` characters each."""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from net_helpers import wait_until
from judge_server import delay, judge_server_thread, verdict_for, without_usage
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from test_sidecar import samples, scrape, value
from test_sidecar_judge import JUDGE_PRICE, running

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import JudgeConfig
from ragmon.judge.prompts import (
    MAX_DATA_CHARS,
    REDACT_MARGIN,
    build_judge_request,
    estimate_tokens,
    trim_record,
)
from ragmon.judge.redact import Redactor
from ragmon.model import Evaluator, RagRecord, RetrievedDocument

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

DOC_CHARS = 16_000
QUERY = "what does the archive say about refunds?"
ANSWER = "Refunds are accepted within 30 days."
SV = {"service": "rag-api", "variant": "B"}
EVALUATORS: tuple[Evaluator, ...] = ("faithfulness", "answer_relevance", "context_relevance", "coherence", "toxicity")
"""Those a trace with no reference answer gets."""
HEALTHZ_STALL = 0.05
"""Seconds /healthz may take while the huge trace is judged (1.65 s before the fix)."""
REDACTION = r"policy"


def document(i: int) -> str:
    """Document ``i``: 16,000 ASCII characters, none of them escaped in a prompt."""
    head = f"document {i:04d} "
    return head + "refund policy text " * ((DOC_CHARS - len(head)) // 19 + 1)


def send_traces(car: Sidecar, *n_docs: int) -> None:
    """One RAG trace per ``n_docs`` whose retriever returned that many documents of 16,000
    characters (queries differ)."""
    limits = SpanLimits(max_span_attributes=2 * max(n_docs) + 8, max_attribute_length=None)
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}), span_limits=limits,
    )
    provider.add_span_processor(SimpleSpanProcessor(HttpExporter(
        endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=30,
    )))
    tracer = provider.get_tracer("app")
    for i, n in enumerate(n_docs):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", QUERY if i == len(n_docs) - 1 else f"{QUERY} ({i})")
            root.set_attribute("output.value", ANSWER)
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for rank in range(n):
                    span.set_attribute(f"retrieval.documents.{rank}.document.id", f"d{rank}")
                    span.set_attribute(f"retrieval.documents.{rank}.document.content", document(rank))
    provider.shutdown()


class HealthzPoller:
    """Polls ``/healthz`` over one kept-alive connection from its own thread; ``worst`` is the
    longest answer seen while ``polling``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst = 0.0
        self.answers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                self.worst = max(self.worst, time.perf_counter() - started)
                self.answers += 1
                time.sleep(0.002)
        finally:
            connection.close()

    @contextmanager
    def polling(self) -> Iterator[HealthzPoller]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)


def record_of(n_docs: int) -> RagRecord:
    """The last trace ``send_traces`` sent, as the conventions read it."""
    return RagRecord(
        trace_id=b"\x01" * 16, service="rag-api", variant="B", start_ns=0, end_ns=1, query=QUERY, answer=ANSWER,
        retrieved=tuple(RetrievedDocument(f"d{i}", None, document(i)) for i in range(n_docs)), has_retrieval=True,
    )


def expected_user_message(config: JudgeConfig, n_docs: int, nonce: str) -> str:
    """The prompt's user message the judge builds for the huge trace (with ``nonce``)."""
    trimmed = trim_record(record_of(n_docs), config.max_documents)
    request = build_judge_request(
        Redactor.from_patterns(config.redact).redact_record(trimmed.record), EVALUATORS, nonce,
        documents_left_out=trimmed.documents_left_out, truncated=trimmed.truncated,
    )
    assert request is not None
    return request.messages[1]["content"]


@pytest.mark.parametrize("max_documents", [20, 5])
def test_a_huge_sampled_trace_is_judged_off_the_loop_from_a_bounded_prompt(max_documents: int) -> None:
    """A small trace's judgement is made slow, so the huge trace waits in the judge's queue
    until the pipeline is done with it; /healthz is then polled while the huge one is judged
    (its prompt redacted and built, the call made, the verdict scored)."""
    n_docs = 600
    with judge_server_thread() as server:
        server.script(delay(1.0))
        judge = JudgeConfig(
            base_url=server.base_url, model="judge-model", sample_rate=1.0, max_documents=max_documents,
            concurrency=1, redact=(REDACTION,),
        )
        with running(judge) as (car, clock, _):
            assert car.judge.judge is not None
            stats = car.judge.judge.stats
            send_traces(car, 1, n_docs)
            wait_until(lambda: car.assembler.stats().spans_held == 4)
            clock.now += 3.0  # past the grace: scored, then the small one judged, the huge one queued
            wait_until(lambda: car.pipeline.stats().records == 2 and stats().queue_depth == 1)
            wait_until(lambda: len(server.requests) == 1)  # the small one's call is answered in 1 s
            assert stats().in_flight == 1 and stats().queue_depth == 1
            queued = stats().queue_bytes
            assert value(samples(scrape(car.ports.metrics)), "ragmon_judge_queue_bytes") == queued
            with HealthzPoller(car.ports.metrics).polling() as poller:
                wait_until(lambda: stats().counts.get(("context_relevance", "ok"), 0) == 2)
                time.sleep(0.05)
            v = samples(scrape(car.ports.metrics))
    assert poller.answers > 20 and poller.worst < HEALTHZ_STALL, f"/healthz took {poller.worst:.3f}s"
    # what was queued: the cut record, not the 9.6 MB of documents
    assert 0 < queued < (max_documents + 2) * 2 * (MAX_DATA_CHARS + REDACT_MARGIN)
    # the prompt: the first max_documents documents, each cut to MAX_DATA_CHARS, the rest counted
    body = server.requests[1]
    user = body["messages"][1]["content"]
    nonce = re.search(r"<data-([0-9a-f]{16}) ", user)
    assert nonce is not None
    assert user == expected_user_message(judge, n_docs, nonce.group(1))
    left_out = n_docs - max_documents
    assert f"DOCUMENTS ({max_documents}; {left_out} more were left out and are not shown):" in user
    bodies = re.findall(rf'<data-{nonce.group(1)} kind="document" index="\d+">\n(.*?)\n</data-', user, re.DOTALL)
    assert len(bodies) == max_documents
    for i, text in enumerate(bodies):
        assert text.startswith(f"document {i:04d} refund [REDACTED] text") and "policy" not in text
        assert len(text) == MAX_DATA_CHARS + len(" [truncated]") and text.endswith(" [truncated]")
    assert len(user) < (max_documents + 3) * (MAX_DATA_CHARS + 100) + 5000
    # the judge's verdicts cover the documents sent; the others are unjudged, counted
    assert value(v, "ragmon_judge_documents_left_out_total") == left_out
    assert value(v, "ragmon_context_relevance_sum", **SV, source="judge", judge="llm") == 2.0  # all relevant
    assert value(v, "ragmon_judge_queue_bytes") == 0
    # the judge relevance source scores the judged ranking, and for a cut one only when every k
    # (1, 3, 5, 10) fits in it: the small trace always, the huge one with 20 documents sent
    assert value(v, "ragmon_retrieval_queries_total", **SV, source="judge") == (2 if max_documents >= 10 else 1)
    assert value(v, "ragmon_retrieval_hits_total", **SV, source="judge", k="10") == (2 if max_documents >= 10 else 1)


def test_a_reply_without_usage_is_estimated_charged_and_counted_on_metrics() -> None:
    """The judge model is priced ($1 / $2 per million tokens, ``JUDGE_PRICE``); a reply with no
    ``usage`` costs its prompt's estimated tokens and its own text's, and is counted."""
    with judge_server_thread() as server:
        server.script(without_usage())
        judge = JudgeConfig(base_url=server.base_url, model="judge-model", sample_rate=1.0)
        with running(judge) as (car, clock, _):
            send_traces(car, 2)
            wait_until(lambda: car.assembler.stats().spans_held == 2)
            clock.now += 3.0
            wait_until(lambda: car.judge.judge is not None and car.judge.judge.stats().usage_estimated == 1)
            v = samples(scrape(car.ports.metrics))
        (body,) = server.requests
    request = build_judge_request(record_of(2), EVALUATORS, "0" * 16)
    assert request is not None and body["max_tokens"] == request.max_tokens
    tokens_in, tokens_out = request.input_tokens_estimate, estimate_tokens(verdict_for(body))
    assert value(v, "ragmon_judge_usage_estimated_total") == 1
    assert value(v, "ragmon_judge_unpriced_tokens_total") == 0
    cost = (tokens_in * JUDGE_PRICE.input + tokens_out * JUDGE_PRICE.output) / 1e6
    assert value(v, "ragmon_judge_cost_usd_total") == pytest.approx(cost, rel=1e-12)
