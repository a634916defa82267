"""The demo's synthetic RAG service, instrumented with the OpenTelemetry SDK and OpenInference
attributes as a real one would be: a CHAIN root span per request (``ragmon.variant`` on it), a
RETRIEVER, a RERANKER and an LLM span under it. Stage durations are simulated (start and end
times set on the spans), so the demo spends no time sleeping.

It also serves ``POST /ask`` (JSON ``{"question": …}``), continuing the caller's W3C
``traceparent``, so that ragmon's prober can replay golden queries against it.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from ragmon.demo.corpus import Corpus, Document, generate, rerank, retrieve

__all__ = ["MODEL", "Answer", "RagService", "Tally", "ask_app"]

MODEL = "gpt-4o-mini"
"""The model name on the LLM spans (priced by ragmon's price table)."""
RETRIEVE_K = 10
KEEP = 5


@dataclass(frozen=True, slots=True)
class Answer:
    """What a request returned: its trace id, answer, final ranking and whether it was grounded."""

    trace_id: str
    text: str
    ranking: tuple[str, ...]
    grounded: bool


@dataclass
class Tally:
    """The service's own count of what it answered, per variant: requests and, for each k,
    answers whose final ranking held the relevant document in its top k (what ragmon should
    measure with the golden set)."""

    requests: Counter[str] = field(default_factory=Counter)
    hits: Counter[tuple[str, int]] = field(default_factory=Counter)


def _documents(span: trace.Span, prefix: str, ranked: Sequence[tuple[Document, float]]) -> None:
    for i, (doc, score) in enumerate(ranked):
        span.set_attribute(f"{prefix}.{i}.document.id", doc.id)
        span.set_attribute(f"{prefix}.{i}.document.content", doc.text)
        span.set_attribute(f"{prefix}.{i}.document.score", score)


class RagService:
    """Answers questions from ``corpus``; ``degraded`` variants retrieve from a broken index."""

    def __init__(self, corpus: Corpus, tracer: Tracer, *, seed: int = 1, unfaithful: float = 0.15,
                 ks: Sequence[int] = (1, 3, 5)) -> None:
        self.corpus = corpus
        self.tracer = tracer
        self.rng = random.Random(seed)
        self.unfaithful = unfaithful
        self.ks = tuple(ks)
        self.degraded: set[str] = set()
        self.tally = Tally()
        self._relevant = {q.text: q.relevant for q in corpus.questions}

    def answer(self, question: str, variant: str, *, label: bool = False, context: Context | None = None) -> Answer:
        """Answer ``question`` as ``variant``, emitting its trace (a child of ``context`` when
        given); ``label`` puts the relevant document on the retriever span
        (``ragmon.relevant_document_ids``), as an app that knows it would."""
        rng = self.rng
        t = time.time_ns()
        root = self.tracer.start_span("rag.request", context=context, start_time=t)
        inside = trace.set_span_in_context(root)
        relevant = self._relevant.get(question)

        retrieved = retrieve(self.corpus, question, RETRIEVE_K, rng, degraded=variant in self.degraded)
        span = self.tracer.start_span("retrieve", context=inside, start_time=t)
        span.set_attribute("openinference.span.kind", "RETRIEVER")
        span.set_attribute("input.value", question)
        _documents(span, "retrieval.documents", retrieved)
        if label and relevant is not None:
            span.set_attribute("ragmon.relevant_document_ids", [relevant])
        t += rng.randint(12, 45) * 1_000_000
        span.end(end_time=t)

        reranked = rerank(question, retrieved, KEEP)
        span = self.tracer.start_span("rerank", context=inside, start_time=t)
        span.set_attribute("openinference.span.kind", "RERANKER")
        span.set_attribute("reranker.query", question)
        span.set_attribute("reranker.top_k", KEEP)
        _documents(span, "reranker.output_documents", reranked)
        t += rng.randint(4, 12) * 1_000_000
        span.end(end_time=t)

        contexts = [d for d, _ in reranked]
        generated = generate(contexts, rng, self.unfaithful)
        prompt = "Answer from these documents only.\n" + "\n".join(d.text for d in contexts)
        span = self.tracer.start_span("llm", context=inside, start_time=t)
        span.set_attribute("openinference.span.kind", "LLM")
        span.set_attribute("llm.model_name", MODEL)
        span.set_attribute("llm.provider", "openai")
        span.set_attribute("llm.input_messages.0.message.role", "system")
        span.set_attribute("llm.input_messages.0.message.content", prompt)
        span.set_attribute("llm.input_messages.1.message.role", "user")
        span.set_attribute("llm.input_messages.1.message.content", question)
        span.set_attribute("llm.output_messages.0.message.role", "assistant")
        span.set_attribute("llm.output_messages.0.message.content", generated.text)
        prompt_tokens, completion_tokens = len(prompt.split()) * 4 // 3, len(generated.text.split()) * 4 // 3
        span.set_attribute("llm.token_count.prompt", prompt_tokens)
        span.set_attribute("llm.token_count.completion", completion_tokens)
        span.set_attribute("llm.token_count.total", prompt_tokens + completion_tokens)
        t += rng.randint(180, 900) * 1_000_000
        span.end(end_time=t)

        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", question)
        root.set_attribute("output.value", generated.text)
        root.set_attribute("ragmon.variant", variant)
        trace_id = format(root.get_span_context().trace_id, "032x")
        root.end(end_time=t + 1_000_000)

        ranking = tuple(d.id for d in contexts)
        self.tally.requests[variant] += 1
        if relevant is not None:
            for k in self.ks:
                self.tally.hits[variant, k] += relevant in ranking[:k]
        return Answer(trace_id, generated.text, ranking, generated.grounded)


def ask_app(service: RagService, variant: str = "A") -> web.Application:
    """``POST /ask``: answer ``{"question": …}`` as ``variant``, under the incoming trace context."""

    async def ask(request: web.Request) -> web.Response:
        try:
            question = (await request.json())["question"]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected {"question": "…"}'}, status=400)
        if not isinstance(question, str):
            return web.json_response({"error": "question: expected a string"}, status=400)
        answer = service.answer(question, variant, context=propagate.extract(dict(request.headers)))
        body = {"answer": answer.text, "documents": [{"id": i} for i in answer.ranking]}
        return web.Response(text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/ask", ask)
    return app
