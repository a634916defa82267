"""The bounds tests/shipped_limits.py fills and holds: the series budgets (``fill_series``),
the feedback store (``fill_feedback``), the assembler (``Assembler``) and the judge queue
(``fill_judge``, against ``SilentJudge``, a judge that reads every request and never answers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage
from opentelemetry.trace import Tracer

from limits_bodies import QUERY_MARK, UNSAMPLED_LOW, otlp_request, rag_spans, retrace, sdk_trace, text_of, trace_id
from limits_configs import MiB
from limits_context import Context, cancel, total, until, wait_scored
from limits_memory import PhaseFigure
from ragmon.config import Config


class SilentJudge:
    """An HTTP server on 127.0.0.1 that accepts every connection, reads every byte sent and never
    answers (a judge endpoint that hangs). Runs its own event loop in a thread."""

    def __init__(self) -> None:
        self.received = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._swallow, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(1 << 20):
                self.received += len(chunk)
        writer.close()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


# -- series: the series budgets ------------------------------------------------------------


def _golden_queries(config: Config) -> list[str]:
    if not config.scoring.golden:
        return []
    lines = Path(config.scoring.golden).read_text().splitlines()
    return [q for line in lines if line.strip() and (q := json.loads(line).get("query"))]


async def fill_series(ctx: Context, figure: PhaseFigure) -> None:
    """Traces over ``max_label_values`` services and models and enough variants for
    ``max_series`` (relevance labels, a model call, every fifth an error; golden queries when a
    golden set is configured), then relevance and named-score feedback on each: every family's
    series budget filled. Measures one full scrape."""
    m = ctx.config.metrics
    services = m.max_label_values
    variants = max(1, min(m.max_label_values, math.ceil(m.max_series / services)))
    golden = _golden_queries(ctx.config)
    ids: list[str] = []
    bodies: list[bytes] = []
    n = 0
    for s in range(services):
        service = f"service-{s:03d}"
        traces: list[SpanMessage] = []
        for v in range(variants):
            query = golden[n % len(golden)] if golden and n % 2 else f"question {n}"

            def build(tracer: Tracer, n: int = n, v: int = v, query: str = query) -> None:
                rag_spans(tracer, query=query, answer=f"answer {n}", ids=[f"d{i}" for i in range(10)],
                          relevant=[f"d{n % 10}"], variant=f"variant-{v:03d}", model=f"model-{n % m.max_label_values:03d}",
                          error=n % 5 == 0)

            spans = sdk_trace(build, service)
            ids.append(spans[0].trace_id.hex())
            traces += spans
            n += 1
        bodies.append(otlp_request([(service, traces)]))
    semaphore = asyncio.Semaphore(4)

    async def send(body: bytes) -> int:
        async with semaphore:
            return await ctx.export(body)

    statuses = Counter(await asyncio.gather(*(send(b) for b in bodies)))
    scored = await wait_scored(ctx, n)
    names = [f"score-{j:03d}" for j in range(m.max_label_values)]
    answers: Counter[int] = Counter()

    async def feedback(j: int, trace: str) -> None:
        async with semaphore:
            for body in ({"trace_id": trace, "relevant_document_ids": [f"d{j % 10}"]},
                         {"trace_id": trace, "name": names[j % len(names)], "score": (j % 11) / 10}):
                answers[await ctx.post("/v1/feedback", json.dumps(body).encode(), {"Content-Type": "application/json"})] += 1

    await asyncio.gather(*(feedback(j, t) for j, t in enumerate(ids)))
    started = time.monotonic()
    async with ctx.session.get(f"http://127.0.0.1:{ctx.metrics_port}/metrics", headers={"Accept-Encoding": "identity"},
                               timeout=aiohttp.ClientTimeout(total=120)) as r:
        text = await r.read()
    render = time.monotonic() - started
    samples = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    figure.reached += [
        f"{n} traces ({services} services x {variants} variants; exports {dict(statuses)}; {scored:.0f} scored), "
        f"feedback {dict(answers)}",
        f"/metrics {len(text) / MiB:.1f} MiB, {samples} samples, {render:.1f} s",
    ]
    if scored < n:
        ctx.run.problems.append(f"series: only {scored:.0f} of {n} traces were scored")


# -- a: the feedback store ------------------------------------------------------------


async def fill_feedback(ctx: Context, figure: PhaseFigure) -> None:
    """Scored RAG traces of ``max(k)`` documents whose ids are ``max_attribute_chars`` long,
    until the store's gauges stop growing at its cap."""
    chars = ctx.config.receiver.max_attribute_chars
    k = max(ctx.config.scoring.k)
    spans = sdk_trace(lambda tracer: rag_spans(
        tracer, query="what is the refund window?", answer="thirty days.", ids=[text_of(chars, i) for i in range(k)],
    ))
    per_trace = sum(s.ByteSize() for s in spans) + 64
    per_body = max(1, min(ctx.config.receiver.max_body_bytes, 8 * MiB) // per_trace)
    names = ("ragmon_feedback_traces", "ragmon_feedback_traces_bytes", "ragmon_feedback_traces_dropped_total")
    statuses: Counter[int] = Counter()
    samples: dict[str, float] = {}

    def body() -> bytes:
        return otlp_request([("rag-api", [s for _ in range(per_body) for s in retrace(spans, trace_id(UNSAMPLED_LOW))])])

    async def step() -> None:
        for status in await asyncio.gather(*(ctx.export(body()) for _ in range(2))):
            statuses[status] += 1

    async def read() -> float:
        samples.update(await ctx.gauges(*names))
        return samples.get("ragmon_feedback_traces_bytes", 0.0)

    def done() -> bool:
        return samples.get("ragmon_feedback_traces", 0) >= ctx.config.feedback.max_traces or \
            total(samples, "ragmon_feedback_traces_dropped_total", reason="evicted") > 0

    value, why = await until(ctx, read, step, done=done, flat_seconds=ctx.config.traces.grace + 4, limit_seconds=60)
    if why == "at its cap":  # traces still in the pipeline and the assembler
        await asyncio.sleep(ctx.config.traces.grace + 1)
        value = await read()
    figure.why = why
    figure.reached.append(
        f"feedback store {samples.get('ragmon_feedback_traces', 0):.0f} traces, {value / MiB:.1f} MiB "
        f"(evicted {total(samples, 'ragmon_feedback_traces_dropped_total', reason='evicted'):.0f}: {why}); "
        f"{k} ids of {chars} chars a trace; exports {dict(statuses)}"
    )


# -- c: the assembler ------------------------------------------------------------


def _open_trace(chars: int, messages: int) -> list[SpanMessage]:
    """A trace whose root never ends: one LLM child span with an input and ``messages`` input
    messages of ``chars`` characters (its parent, the root, is never sent)."""
    from opentelemetry.trace import set_span_in_context

    def build(tracer: Tracer) -> None:
        root = tracer.start_span("rag")  # never ended: never exported
        with tracer.start_as_current_span("llm", context=set_span_in_context(root)) as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("input.value", text_of(chars, 1))
            for j in range(messages):
                span.set_attribute(f"llm.input_messages.{j}.message.role", "user")
                span.set_attribute(f"llm.input_messages.{j}.message.content", text_of(chars, j))

    return sdk_trace(build)


class Assembler:
    """Keeps the assembler full of open traces: ``fill`` sends until ``ragmon_span_bytes_pending``
    reaches ``traces.max_bytes``; ``hold`` then sends a body at the rate that refills it within
    ``traces.max_wait`` (an open trace is finished that long after it arrived)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.template = _open_trace(cfg.receiver.max_attribute_chars, 7)
        per_trace = sum(s.ByteSize() for s in self.template) + 64
        self.per_body = max(1, min(cfg.receiver.max_body_bytes, 8 * MiB) // per_trace)
        self.body_bytes = self.per_body * per_trace
        self.sent = Counter[int]()
        self._task: asyncio.Task[None] | None = None

    def body(self) -> bytes:
        spans = [s for _ in range(self.per_body) for s in retrace(self.template, trace_id(UNSAMPLED_LOW))]
        return otlp_request([("rag-api", spans)])

    async def fill(self, figure: PhaseFigure) -> None:
        ctx = self.ctx
        cap = ctx.config.traces.max_bytes
        names = ("ragmon_span_bytes_pending", "ragmon_traces_pending", "ragmon_spans_pending")
        samples: dict[str, float] = {}

        async def step() -> None:
            for status in await asyncio.gather(*(ctx.export(self.body()) for _ in range(2))):
                self.sent[status] += 1

        async def read() -> float:
            samples.update(await ctx.gauges(*names))
            return samples.get("ragmon_span_bytes_pending", 0.0)

        value, why = await until(ctx, read, step, done=lambda: samples.get("ragmon_span_bytes_pending", 0) >= 0.97 * cap,
                                  flat_seconds=5, limit_seconds=60)
        figure.why = why
        figure.reached.append(
            f"assembler {value / MiB:.1f} of {cap / MiB:.0f} MiB pending ({why}), "
            f"{samples.get('ragmon_traces_pending', 0):.0f} traces, {samples.get('ragmon_spans_pending', 0):.0f} spans; "
            f"exports {dict(self.sent)}"
        )

    def hold(self) -> None:
        cfg = self.ctx.config
        interval = max(0.5, min(5.0, cfg.traces.max_wait * self.body_bytes / cfg.traces.max_bytes / 2))

        async def refresh() -> None:
            while True:
                await asyncio.sleep(interval)
                self.sent[await self.ctx.post("/v1/traces", self.body(), {"Content-Type": "application/x-protobuf"})] += 1

        self._task = asyncio.create_task(refresh())

    async def stop(self) -> None:
        await cancel(self._task)


# -- b: the judge queue ------------------------------------------------------------


def _judged_trace(chars: int, max_body: int) -> tuple[list[SpanMessage], int]:
    """A RAG trace with a query, an answer and as many documents of ``chars`` characters as a
    body of ``max_body`` bytes holds: its spans and number of documents."""
    docs = max(1, (max_body - 2 * chars - 4096) // (chars + 96))
    while True:
        contents = [text_of(chars, i) for i in range(docs)]
        spans = sdk_trace(lambda tracer: rag_spans(
            tracer, query=QUERY_MARK + text_of(chars - len(QUERY_MARK), 7), answer=text_of(chars, 8),
            ids=[f"doc-{i}" for i in range(docs)], contents=contents,
        ))
        if len(otlp_request([("rag-api", spans)])) <= max_body or docs == 1:
            return spans, docs
        docs = max(1, int(docs * 0.98))


async def fill_judge(ctx: Context, figure: PhaseFigure, judge: SilentJudge) -> None:
    """Sampled traces of as many ``max_attribute_chars`` documents as a body holds, until
    the judge refuses one (``dropped`` or ``skipped_budget``) or ``ragmon_judge_queue`` stops
    growing (the judge never answers)."""
    cfg = ctx.config
    bound = round(cfg.judge.sample_rate * 2**64)
    if cfg.judge.enabled is False:
        figure.reached.append("the judge is off (judge.enabled = false): no queue to fill")
        figure.why = "at its cap"
        return
    if bound == 0:
        figure.reached.append("judge samples nothing (sample_rate 0): no queue to fill")
        figure.why = "at its cap"
        return
    chars = cfg.receiver.max_attribute_chars
    spans, docs = _judged_trace(chars, cfg.receiver.max_body_bytes)
    body_size = len(otlp_request([("rag-api", spans)]))
    names = ("ragmon_judge_queue", "ragmon_judge_in_flight", "ragmon_judge_requests_total", "ragmon_judge_breaker_open")
    samples: dict[str, float] = {}
    statuses: Counter[int] = Counter()
    sent = 0

    async def export() -> None:
        nonlocal sent
        sent += 1
        trace = retrace(spans, trace_id(sent % bound), sent)
        statuses[await ctx.export(otlp_request([("rag-api", trace)]))] += 1

    async def step() -> None:  # six traces between gauge reads
        for _ in range(3):
            await asyncio.gather(export(), export())

    async def read() -> float:
        samples.update(await ctx.gauges(*names))
        return samples.get("ragmon_judge_queue", 0.0) + samples.get("ragmon_judge_in_flight", 0.0)

    def refused() -> bool:
        return any(total(samples, "ragmon_judge_requests_total", outcome=o) > 0 for o in ("dropped", "skipped_budget"))

    value, why = await until(ctx, read, step, done=refused, flat_seconds=cfg.traces.grace + 6, limit_seconds=45)
    figure.why = why
    outcomes = {o: total(samples, "ragmon_judge_requests_total", outcome=o, evaluator="answer_relevance")
                for o in ("dropped", "skipped_budget", "timeout", "error")}
    figure.reached.append(
        f"judge queue {samples.get('ragmon_judge_queue', 0):.0f} + {samples.get('ragmon_judge_in_flight', 0):.0f} in flight "
        f"({why}); {sent} sampled traces of {docs} documents x {chars} chars ({body_size / MiB:.1f} MiB bodies), "
        f"exports {dict(statuses)}; outcomes {outcomes}; the judge read {judge.received / MiB:.0f} MiB on "
        f"{judge.connections} connections"
    )
