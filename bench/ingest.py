"""Benchmark ragmon's whole ingest pipeline (``ragmon run``) against a bare OTLP/HTTP receiver.

Usage::

    python bench/ingest.py [--seconds 20] [--repeats 3] [--warmup 2] [--concurrency 4]
                           [--batches 200] [--spans-per-body 512] [--seed 0]
                           [--shapes realistic,rag3] [--doc-chars 300] [--io-chars N]
                           [--servers ragmon,ragmon-py,baseline]

``--seconds 3 --repeats 1`` is a quick smoke run (about a minute in all).

What is measured
----------------
Traffic. Realistic OpenInference RAG traces are built once, before any timing, with the real
OpenTelemetry SDK (``TracerProvider`` + ``InMemorySpanExporter``) and encoded with the OTLP
exporter's own ``encode_spans`` into ``--batches`` protobuf ``ExportTraceServiceRequest``
bodies of exactly ``--spans-per-body`` spans each (whole traces; one resource, one scope, as
the SDK's exporter sends them). Each trace has 6-10 spans: a root CHAIN span
(``input.value``/``output.value``, ``ragmon.variant`` A/B, ``http.*``), an EMBEDDING span
(model, text, a 32-float vector, tokens), a RETRIEVER span with 5-10
``retrieval.documents.N.document.{id,score,content (~300 chars),metadata (JSON string)}`` and
``ragmon.relevant_document_ids`` (plus ``db.*`` attributes ragmon does not read), an LLM span
(``llm.model_name``, ``llm.provider``, ``llm.token_count.*``, ``llm.invocation_parameters``,
system + user input messages carrying the retrieved context, the output message), and 2-6
spans ragmon ignores (HTTP client spans under the model calls, a vector-database query, a
cache lookup, a rate-limit check, a guardrail check). Every trace id starts with the same 8
bytes (a random marker and a zero "generation") and ends with 8 random bytes (so trace-id
sampling, e.g. the judge's, picks its usual share); the load generator replaces the generation
with a counter (one ``bytes.replace``) on every post, so no trace id is ever sent twice and
traces never collide or count as late.

Text sizes. ``--doc-chars`` sets each document's content (about that many characters, ±13%;
0: the documents carry no content attribute), comma-separated sizes each measured in its own
runs (``--doc-chars 0,300,2000``); ``--io-chars`` sets the model's user message (the retrieved
context cut to fit, then the question) and its answer to about that many characters (default:
the whole context, and answers of 150-450). The run ends with a table of CPU per span and per
trace for each shape across the document sizes, with how much each grew from the smallest size,
for ragmon and for the bare walk.

Two trace shapes (``--shapes``), each measured in its own runs: ``realistic`` (the traces
above, 6-10 spans, 8 on average) and ``rag3`` (3 spans, all read by ragmon: the root CHAIN, the
RETRIEVER and the LLM span of the same traces, no embedding and no filler; bodies of
``--spans-per-body`` rounded down to a multiple of 3), which shows the per-trace work
(assembly, extraction, scoring, metrics) with the least decode to hide it.

Servers, each a fresh process per measurement, on 127.0.0.1 only:

* ``ragmon`` - ``python -m ragmon run --config <tmp toml>``: OTLP/HTTP on a free port, gRPC
  off, ``/metrics`` on a free port, no final-scrape linger, everything else at its default
  (the 2 s trace grace included: decode, bounded queue, trace assembly, conventions, scoring,
  Prometheus metrics, windows).
* ``ragmon-py`` - the same, with ``RAGMON_PIPELINE=python RAGMON_DECODER=python``: the
  per-request pipeline from its Python source and the pure-Python protobuf decoder, what a user
  without a C compiler runs (``ragmon/compiled.py``), measured in the same table.
* ``baseline`` - ``bench/_ingest_baseline.py``: bare aiohttp ``POST /v1/traces`` that parses
  the request and walks every span's attributes into dicts (all of them, where ragmon keeps
  only the ones it reads), then answers 200 with an empty ``ExportTraceServiceResponse``. It
  is the floor cost of receiving OTLP in Python: no assembly, scoring or metrics.

Load. A separate process (``multiprocessing``, spawn; it reads the bodies from a pickle in a
temporary directory) posts the pre-encoded bodies, cycling through them, with
``--concurrency`` requests in flight on keep-alive aiohttp connections, for ``--warmup``
seconds (not counted) and then ``--seconds`` seconds. A 503 (ragmon's queue is full) is
counted, followed by a short back-off (50 ms) and a retry of the same body; any other non-200
answer is counted and the body is dropped, as an OTLP exporter would. Spans *accepted* are the
spans of requests answered 200 within the measured window.

For ragmon, ``/metrics`` is scraped at the start and the end of the measured window: spans
*scored* per second are the spans of the traces the pipeline finished in between
(``ragmon_spans_assembled_total - ragmon_spans_pending``; every trace sent is a RAG trace, so
finished means scored, and the script checks that ``ragmon_traces_ignored_total`` and
``ragmon_dropped_total`` stay 0). ragmon's receiver and its scoring worker share one event
loop: when it accepts faster than it scores, the difference waits in its queue (the run line
shows that *backlog*, queued plus pending spans, at the end of the window) until the queue's
bound (``receiver.max_queued_spans`` / ``max_queued_bytes``) is reached and it answers 503.
Accepted exceeds scored only while the queue fills, so over long runs the two converge;
scored is the sustainable rate. After the load stops, ``/metrics`` is polled until the
pipeline has caught up (queue empty, no trace pending, ``ragmon_traces_total`` = traces
acknowledged); that *catch-up* time is reported, and the final counters are checked against
what the load generator saw acknowledged (``ragmon_traces_total``,
``ragmon_spans_received_total{protocol="http"}``).

Both servers' RSS (``VmRSS``) is polled every 0.5 s: the table shows it idle (before any
load), at the start of the measured window, its peak, at the end (after catch-up), and the
slope of a least-squares line over the second half of the measured window in MB/min (about 0
means "RSS flat under sustained load"; ragmon's bounded structures, e.g. the 100 000 finished
trace ids it remembers, grow until full, so short runs show a positive slope).

Measurements come in pairs, one run of each server, the order alternating between pairs
(``ragmon, baseline``, then ``baseline, ragmon``, ...), ``--repeats`` pairs per shape; the
table shows medians (min and max of the accepted rate), and CPU per span and per trace (the
server's user + system time read from ``/proc``, over spans and traces acknowledged): the
per-pair ratio of ragmon's CPU per span to the baseline's, median over pairs, is the figure
to read on a shared machine (wall-clock rates swing with other load, CPU time does not).

How to read the ratio
---------------------
``ragmon / baseline`` is ragmon's median spans/s divided by the baseline's median accepted
spans/s, on the same bodies and the same load: ``1.20x`` means ragmon ingests 20% more spans
per second than a bare receiver that only parses and walks them (possible: ragmon converts
only the attributes it reads), ``0.50x`` means half as many. It is given for spans accepted
(what exporters see) and spans scored (what reaches /metrics). The servers and the load
generator share the machine's CPUs; with 2 CPUs the load generator competes a little with the
server, equally for both. The script exits 1 when a server answered anything but 200/503, or
ragmon's counters disagree with what was acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import pickle
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE_SCRIPT = Path(__file__).resolve().parent / "_ingest_baseline.py"
PROTOBUF = "application/x-protobuf"
SERVERS: tuple[str, ...] = ("ragmon", "ragmon-py", "baseline")
"""What can be measured (``--servers``): ragmon as installed, ragmon as pure Python, the bare walk."""
PURE_PYTHON = {"RAGMON_PIPELINE": "python", "RAGMON_DECODER": "python"}
"""``ragmon-py``'s environment: the pipeline from its Python source and the pure-Python protobuf
decoder, what runs where nothing was compiled (``ragmon/compiled.py``)."""
SHAPES: tuple[str, ...] = ("realistic", "rag3")
RAG3 = 3
"""Spans of a ``rag3`` trace: root CHAIN, RETRIEVER, LLM."""
PORT_LINE = re.compile(r"OTLP/HTTP on 127\.0\.0\.1:(\d+)")
METRICS_LINE = re.compile(r"metrics on 127\.0\.0\.1:(\d+)")
MARKER_BYTES = 4
"""Random bytes every trace id starts with, followed by a 4-byte generation (0 in the bodies)
and 8 random bytes: the low 64 bits are random, as the W3C trace-id sampling rule (and
ragmon's judge sampling) expects of real traffic."""
GENERATION_BYTES = 4
BACKOFF_503 = 0.05
RSS_INTERVAL = 0.5
CATCH_UP_POLL = 0.2
CATCH_UP_LIMIT = 120.0
STARTUP_LIMIT = 30.0
LOG_TAIL = 12
REQUEST_TIMEOUT = 60.0
MIN_TRACE_SPANS, MAX_TRACE_SPANS = 6, 10
CORE_SPANS = 4
"""root, embedding, retriever, LLM; 2-6 of the 6 filler spans make 6-10 in all."""
RAGMON_TOML = """\
[receiver]
http = "127.0.0.1:0"
grpc = ""

[metrics]
listen = "127.0.0.1:0"
linger = "0s"
"""


# --------------------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Traffic:
    """Pre-encoded OTLP bodies; every trace id in them starts with ``marker``."""

    bodies: list[bytes]
    spans: list[int]
    traces: list[int]
    marker: bytes
    seconds: float

    @property
    def mean_body_bytes(self) -> float:
        return statistics.fmean(len(b) for b in self.bodies)


_WORDS: tuple[str, ...] = (
    "refund", "policy", "order", "shipping", "customer", "account", "invoice", "warranty",
    "return", "window", "days", "support", "product", "plan", "subscription", "billing", "cycle",
    "payment", "method", "card", "credit", "upgrade", "downgrade", "cancel", "trial", "period",
    "access", "team", "member", "admin", "role", "permission", "export", "data", "region",
    "storage", "limit", "api", "key", "token", "rate", "request", "error", "timeout", "retry",
    "webhook", "event", "integration", "sso", "saml", "domain", "verification", "email",
    "notification", "setting", "dashboard", "report", "usage", "quota", "overage", "discount",
    "annual", "monthly", "tax", "receipt", "address", "company", "contract", "renewal", "notice",
    "termination", "service", "level", "agreement", "uptime", "incident", "status", "page",
    "maintenance", "release", "feature", "beta", "preview", "deprecation",
)


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _paragraph(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        s = _sentence(rng, rng.randint(8, 16))
        out.append(s)
        size += len(s) + 1
    return " ".join(out)[:chars]


@dataclass(frozen=True)
class _Pools:
    """Text reused across traces (content does not change the cost per span much)."""

    questions: list[str]
    answers: list[str]
    contents: list[str]
    system_prompt: str

    @classmethod
    def make(cls, rng: random.Random, doc_chars: int = 300, io_chars: int | None = None) -> _Pools:
        """Documents of about ``doc_chars`` characters (±13%; 0: documents carry no content);
        answers of about ``io_chars`` (None: 150-450)."""
        questions = [_sentence(rng, rng.randint(6, 14)).rstrip(".") + "?" for _ in range(400)]
        low, high = (150, 450) if io_chars is None else (io_chars * 87 // 100, io_chars * 113 // 100)
        answers = [_paragraph(rng, rng.randint(low, high)) for _ in range(400)]
        contents = [_paragraph(rng, rng.randint(doc_chars * 87 // 100, doc_chars * 113 // 100)) if doc_chars else ""
                    for _ in range(2000)]
        system = ("You are the support assistant of Example Corp. Answer only from the context "
                  "below; cite the documents you used by id; if the context does not contain the "
                  "answer, say you do not know. Keep answers under 120 words.")
        return cls(questions, answers, contents, system)


def _trace_sizes(rng: random.Random, total: int, shape: str = "realistic") -> list[int]:
    """Trace sizes in 6..10 summing exactly to ``total`` (no leftover of 1-5 or 11); for
    ``rag3``, ``total // 3`` traces of 3."""
    if shape == "rag3":
        return [RAG3] * (total // RAG3)
    sizes: list[int] = []
    left = total
    while left:
        options = [s for s in range(MIN_TRACE_SPANS, MAX_TRACE_SPANS + 1)
                   if left - s == 0 or (left - s >= MIN_TRACE_SPANS and left - s != 11)]
        if not options:
            raise ValueError(f"cannot split {total} spans into traces of 6-10 spans")
        size = rng.choice(options)
        sizes.append(size)
        left -= size
    return sizes


def build_traffic(batches: int, spans_per_body: int, seed: int, shape: str = "realistic",
                  doc_chars: int = 300, io_chars: int | None = None) -> Traffic:
    """Build ``batches`` bodies of ``spans_per_body`` spans (``rag3``: rounded down to a
    multiple of 3) of ``shape`` traces with the OpenTelemetry SDK, with documents of about
    ``doc_chars`` characters and model input and output of about ``io_chars`` (``_Pools``)."""
    if shape == "rag3":
        spans_per_body -= spans_per_body % RAG3
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    start = time.perf_counter()
    rng = random.Random(seed)
    marker = rng.randbytes(MARKER_BYTES) + bytes(GENERATION_BYTES)

    class MarkedIds(IdGenerator):
        """Trace ids ``marker + 8 random bytes``; random span ids."""

        def generate_span_id(self) -> int:
            return rng.getrandbits(64) or 1

        def generate_trace_id(self) -> int:
            return int.from_bytes(marker + rng.randbytes(8), "big")

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({
            "service.name": "rag-api", "service.version": "1.8.3",
            "deployment.environment.name": "production", "host.name": "rag-api-7f9c8d-x2k4p",
            "k8s.namespace.name": "support", "k8s.pod.name": "rag-api-7f9c8d-x2k4p",
            "process.runtime.name": "cpython", "process.pid": 4242,
        }),
        id_generator=MarkedIds(),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("openinference.instrumentation.llama_index", "3.1.0")
    pools = _Pools.make(rng, doc_chars, io_chars)
    bodies: list[bytes] = []
    traces: list[int] = []
    clock_ns = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z; spans carry realistic durations
    for _ in range(batches):
        sizes = _trace_sizes(rng, spans_per_body, shape)
        for size in sizes:
            _rag_trace(tracer, rng, pools, size, clock_ns, io_chars)
            clock_ns += rng.randint(5, 60) * 10**6
        spans = exporter.get_finished_spans()
        exporter.clear()
        body = encode_spans(spans).SerializeToString()
        found = body.count(marker)
        if found != len(spans) or len(spans) != spans_per_body:
            raise RuntimeError(f"trace-id marker found {found} times in a body of "
                               f"{len(spans)} spans")
        bodies.append(body)
        traces.append(len(sizes))
    provider.shutdown()
    return Traffic(bodies, [spans_per_body] * batches, traces, marker, time.perf_counter() - start)


def _embedding(child: Any, http_client: Any, root: Any, rng: random.Random, question: str,
               fillers: set[str], t: int) -> int:
    """The EMBEDDING span of a realistic trace (and its HTTP client span); returns its end."""
    ms = 10**6
    embed = child(root, "embedding", t)
    embed.set_attributes({
        "openinference.span.kind": "EMBEDDING", "embedding.model_name": "text-embedding-3-small",
        "embedding.embeddings.0.embedding.text": question,
        "embedding.embeddings.0.embedding.vector": [round(rng.uniform(-0.1, 0.1), 6)
                                                    for _ in range(32)],
        "llm.token_count.prompt": len(question) // 4, "llm.token_count.total": len(question) // 4,
    })
    e_end = t + rng.randint(20, 90) * ms
    if "embed_http" in fillers:
        http_client(embed, t + ms, e_end - ms, "api.openai.com", "/v1/embeddings")
    embed.end(end_time=e_end)
    return e_end


def _rag_trace(tracer: Any, rng: random.Random, pools: _Pools, size: int, t0: int, io_chars: int | None = None) -> None:
    """One OpenInference RAG request of ``size`` spans, ending before ``t0`` + ~3 s. The model's
    user message holds the retrieved context and the question, cut to ``io_chars`` characters
    when given."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    ms = 10**6
    fillers = set() if size == RAG3 else set(rng.sample(
        ("embed_http", "llm_http", "vector_db", "cache", "guardrail", "rate_limit"), size - CORE_SPANS))
    question = rng.choice(pools.questions)
    answer = rng.choice(pools.answers)
    n_docs = rng.randint(5, 10)
    base = rng.randrange(0, 60_000)
    doc_ids = [f"kb-{base + rng.randrange(0, 400):06d}#chunk-{rng.randint(0, 12)}"
               for _ in range(n_docs)]
    contents = [rng.choice(pools.contents) for _ in range(n_docs)]
    relevant: list[str] = []
    if rng.random() < 0.75:
        relevant.append(doc_ids[min(int(rng.expovariate(0.6)), n_docs - 1)])
    relevant += [f"kb-{base + rng.randrange(0, 400):06d}#chunk-{rng.randint(0, 12)}"
                 for _ in range(rng.randint(0 if relevant else 1, 2))]

    def child(parent: Any, name: str, start: int, kind: SpanKind = SpanKind.INTERNAL) -> Any:
        return tracer.start_span(name, context=trace.set_span_in_context(parent), kind=kind,
                                 start_time=start)

    def http_client(parent: Any, start: int, end: int, host: str, path: str) -> None:
        span = child(parent, f"POST {path}", start, SpanKind.CLIENT)
        span.set_attributes({
            "http.request.method": "POST", "url.full": f"https://{host}{path}",
            "server.address": host, "server.port": 443, "http.response.status_code": 200,
            "network.protocol.version": "1.1", "user_agent.original": "OpenAI/Python 1.82.0",
            "http.request.body.size": rng.randint(800, 9000),
        })
        span.end(end_time=end)

    root = tracer.start_span("query", kind=SpanKind.SERVER, start_time=t0)
    root.set_attributes({
        "openinference.span.kind": "CHAIN", "input.value": question,
        "input.mime_type": "text/plain",
        "output.value": answer, "output.mime_type": "text/plain",
        "ragmon.variant": rng.choice(("A", "B")), "session.id": f"s-{rng.getrandbits(48):012x}",
        "http.request.method": "POST", "http.route": "/v1/ask", "url.path": "/v1/ask",
        "url.scheme": "https", "http.response.status_code": 200, "client.address": "10.4.7.21",
        "user_agent.original": "support-web/2.14 (+https://example.com)",
    })
    t = t0 + 1 * ms
    if "rate_limit" in fillers:
        span = child(root, "ratelimit.check", t)
        span.set_attributes({"app.ratelimit.key": f"tenant:{rng.randint(1, 500)}",
                             "app.ratelimit.remaining": rng.randint(0, 600),
                             "app.ratelimit.limit": 600, "app.ratelimit.allowed": True})
        t += ms // 2
        span.end(end_time=t)
    if "cache" in fillers:
        span = child(root, "GET", t, SpanKind.CLIENT)
        span.set_attributes({"db.system.name": "redis", "db.operation.name": "GET",
                             "db.query.text": f"GET rag:answer:{rng.getrandbits(64):016x}",
                             "server.address": "redis.support.svc", "server.port": 6379,
                             "db.namespace": "0"})
        t += rng.randint(1, 3) * ms
        span.end(end_time=t)
    if size != RAG3:
        t = _embedding(child, http_client, root, rng, question, fillers, t)
    retriever = child(root, "retrieve", t)
    retriever.set_attributes({
        "openinference.span.kind": "RETRIEVER", "input.value": question,
        "db.system.name": "qdrant", "db.collection.name": "support-kb",
        "db.vector.query.top_k": n_docs,
    })
    scores = sorted((rng.uniform(0.55, 0.95) for _ in range(n_docs)), reverse=True)
    for i, (doc, content, score) in enumerate(zip(doc_ids, contents, scores)):
        page = doc.split("#")[0]
        document = {
            f"retrieval.documents.{i}.document.id": doc,
            f"retrieval.documents.{i}.document.score": round(score, 4),
            f"retrieval.documents.{i}.document.content": content,
            f"retrieval.documents.{i}.document.metadata": json.dumps({
                "source": f"kb/handbook/{page}.md", "chunk": int(doc.rsplit("-", 1)[1]),
                "updated_at": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "lang": "en", "tags": rng.sample(_WORDS, 2)}),
        }
        if not content:  # documents without text (--doc-chars 0)
            del document[f"retrieval.documents.{i}.document.content"]
        retriever.set_attributes(document)
    retriever.set_attribute("ragmon.relevant_document_ids", relevant)
    r_end = t + rng.randint(25, 160) * ms
    if "vector_db" in fillers:
        span = child(retriever, "qdrant.search", t + ms, SpanKind.CLIENT)
        span.set_attributes({
            "db.system.name": "qdrant", "db.operation.name": "search", "db.namespace": "support-kb",
            "db.query.text": f"POST /collections/support-kb/points/search {{\"limit\": {n_docs}, "
                             "\"with_payload\": true, \"score_threshold\": 0.5}",
            "server.address": "qdrant.support.svc", "server.port": 6333,
            "db.response.returned_rows": n_docs,
        })
        span.end(end_time=r_end - ms)
    retriever.end(end_time=r_end)
    t = r_end
    context = "\n\n".join(f"[{d}] {c}" for d, c in zip(doc_ids[:5], contents[:5]))
    user = f"Context:\n{context}\n\nQuestion: {question}"
    if io_chars is not None:
        asked = f"\n\nQuestion: {question}"
        user = f"Context:\n{context}"[: max(0, io_chars - len(asked))] + asked
    prompt_tokens, completion_tokens = len(pools.system_prompt + user) // 4, len(answer) // 4
    llm = child(root, "ChatOpenAI", t)
    llm.set_attributes({
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini-2024-07-18",
        "llm.provider": "openai", "llm.system": "openai",
        "llm.invocation_parameters": json.dumps({"model": "gpt-4o-mini", "temperature": 0.1,
                                                 "max_tokens": 512, "top_p": 1.0}),
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": pools.system_prompt,
        "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": user,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": answer,
        "llm.token_count.prompt": prompt_tokens, "llm.token_count.completion": completion_tokens,
        "llm.token_count.total": prompt_tokens + completion_tokens,
        "output.value": answer, "output.mime_type": "text/plain",
    })
    l_end = t + rng.randint(400, 2500) * ms
    if "llm_http" in fillers:
        http_client(llm, t + ms, l_end - ms, "api.openai.com", "/v1/chat/completions")
    llm.end(end_time=l_end)
    t = l_end
    if "guardrail" in fillers:
        span = child(root, "guardrails.validate", t)
        passed = rng.random() < 0.97
        span.set_attributes({"guard.name": "pii-and-toxicity", "guard.passed": passed,
                             "guard.score": round(rng.random(), 3),
                             "guard.validators": ["detect_pii", "toxic_language",
                                                  "competitor_check"]})
        if not passed:
            span.set_status(Status(StatusCode.ERROR, "validation failed"))
        t += rng.randint(5, 30) * ms
        span.end(end_time=t)
    root.end(end_time=t + ms)


# --------------------------------------------------------------------------- load generator


@dataclass
class LoadResult:
    """What the load generator saw; ``window_*`` only counts answers inside the measured window."""

    window_seconds: float = 0.0
    window_spans: int = 0
    window_traces: int = 0
    window_requests: int = 0
    window_503: int = 0
    total_spans: int = 0
    total_traces: int = 0
    total_requests: int = 0
    total_503: int = 0
    other_status: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    """Seconds per 200 answer in the window (send to answer, retries not included)."""


async def _load(url: str, traffic: Traffic, concurrency: int, warmup: float, seconds: float,
                conn: Connection) -> LoadResult:
    import aiohttp

    result = LoadResult()
    other: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    n = len(traffic.bodies)
    cursor = 0
    generation = 0
    begin = time.monotonic()
    t0 = begin + warmup
    t1 = t0 + seconds
    conn.send(("phases", t0, t1))

    def next_body() -> tuple[bytes, int, int]:
        nonlocal cursor, generation
        i = cursor % n
        cursor += 1
        generation += 1
        fresh = traffic.marker[:MARKER_BYTES] + generation.to_bytes(GENERATION_BYTES, "big")
        return traffic.bodies[i].replace(traffic.marker, fresh), traffic.spans[i], traffic.traces[i]

    headers = {"Content-Type": PROTOBUF}

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < t1:
            body, spans, traces = next_body()
            while (sent := time.monotonic()) < t1:
                try:
                    async with session.post(url, data=body, headers=headers) as r:
                        await r.read()
                        status = r.status
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    errors[type(exc).__name__] += 1
                    await asyncio.sleep(0.1)
                    continue
                done = time.monotonic()
                in_window = t0 <= done < t1
                if status == 503:
                    result.total_503 += 1
                    result.window_503 += in_window
                    await asyncio.sleep(BACKOFF_503)
                    continue
                if status == 200:
                    result.total_requests += 1
                    result.total_spans += spans
                    result.total_traces += traces
                    if in_window:
                        result.window_requests += 1
                        result.window_spans += spans
                        result.window_traces += traces
                        result.latencies.append(done - sent)
                else:
                    other[str(status)] += 1
                break

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    result.window_seconds = seconds
    result.other_status = dict(other)
    result.errors = dict(errors)
    return result


def load_process(conn: Connection, url: str, traffic_path: str, concurrency: int, warmup: float,
                 seconds: float) -> None:
    """Entry point of the load-generator process: sends ``phases``, then ``result`` or ``error``.

    The traffic comes from a pickle file (``save_traffic``), not through the spawn pipe: the
    arguments stay small, so a child that dies while starting cannot block the parent.
    """
    try:
        with open(traffic_path, "rb") as f:
            traffic: Traffic = pickle.load(f)
        result = asyncio.run(asyncio.wait_for(
            _load(url, traffic, concurrency, warmup, seconds, conn),
            warmup + seconds + REQUEST_TIMEOUT + 30))
        conn.send(("result", result))
    except Exception as exc:  # noqa: BLE001 - report anything, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


# --------------------------------------------------------------------------- servers


class Server:
    """A server process; stderr is drained by a thread (last lines kept for error messages)."""

    def __init__(self, kind: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.tail: deque[str] = deque(maxlen=40)
        self.lines = 0
        self._ports: dict[str, int] = {}
        self._found = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines += 1
            self.tail.append(line.rstrip())
            if m := METRICS_LINE.search(line):
                self._ports["metrics"] = int(m.group(1))
            if m := PORT_LINE.search(line):
                self._ports["http"] = int(m.group(1))
                self._found.set()
        self._found.set()  # EOF: the process ended

    def wait_ports(self) -> dict[str, int]:
        """Wait until the OTLP/HTTP port is logged; ``RuntimeError`` if the process ends first."""
        if not self._found.wait(STARTUP_LIMIT) or "http" not in self._ports:
            raise RuntimeError(f"{self.kind} did not start:\n" + "\n".join(self.tail))
        return dict(self._ports)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._thread.join(2)
        return self.proc.returncode


def start_server(kind: str, workdir: Path) -> Server:
    if kind.startswith("ragmon"):
        config = workdir / "ragmon.toml"
        config.write_text(RAGMON_TOML)
        argv = [sys.executable, "-m", "ragmon", "run", "--config", str(config),
                "--log-level", "info"]
        return Server(kind, argv, PURE_PYTHON if kind == "ragmon-py" else None)
    argv = [sys.executable, str(BASELINE_SCRIPT), "--host", "127.0.0.1", "--port", "0"]
    return Server(kind, argv)


def rss_mb(pid: int) -> float | None:
    """``VmRSS`` of ``pid`` in MB (10^6 bytes), or ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` (all its threads) has used, from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15)


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` as ``{name: value}``, summing the samples of each name over their labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ragmon_spans_received_total" and s.labels.get("protocol") != "http":
                continue
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def finished_spans(m: dict[str, float]) -> float:
    """Spans of the traces ragmon has finished (and, here, scored)."""
    return m.get("ragmon_spans_assembled_total", 0.0) - m.get("ragmon_spans_pending", 0.0)


def caught_up(m: dict[str, float], traces: int) -> bool:
    done = (m.get("ragmon_traces_total", 0.0) + m.get("ragmon_traces_ignored_total", 0.0)
            + m.get("ragmon_dropped_total", 0.0))
    return (m.get("ragmon_queue_spans", 1.0) == 0 and m.get("ragmon_traces_pending", 1.0) == 0
            and done >= traces)


# --------------------------------------------------------------------------- one measurement


@dataclass
class Measurement:
    """One server under load once."""

    kind: str
    load: LoadResult
    rss: list[tuple[float, float]]
    t0: float
    t1: float
    scored_spans_per_s: float | None = None
    backlog: float | None = None
    """Spans queued or held in pending traces at the end of the measured window."""
    catch_up_s: float | None = None
    cpu_s: float | None = None
    """The server's CPU seconds from before the load to the end (after catch-up)."""
    final: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    exit_status: int | None = None
    log_tail: list[str] = field(default_factory=list)
    """The server's last stderr lines, kept when there was a problem."""

    @property
    def accepted_spans_per_s(self) -> float:
        return self.load.window_spans / self.load.window_seconds

    @property
    def cpu_us_per_span(self) -> float:
        """Server CPU µs per span acknowledged over the whole run (warm-up and catch-up
        included): stable where wall-clock rates swing with the machine's other load."""
        if self.cpu_s is None or not self.load.total_spans:
            return math.nan
        return 1e6 * self.cpu_s / self.load.total_spans

    @property
    def cpu_us_per_trace(self) -> float:
        """Server CPU µs per trace acknowledged, likewise."""
        if self.cpu_s is None or not self.load.total_traces:
            return math.nan
        return 1e6 * self.cpu_s / self.load.total_traces

    def rss_at(self, t: float) -> float:
        after = [mb for ts, mb in self.rss if ts >= t]
        return after[0] if after else self.rss[-1][1]

    @property
    def rss_idle(self) -> float:
        """Before any load (right after the server logged its port)."""
        return self.rss[0][1]

    @property
    def rss_start(self) -> float:
        return self.rss_at(self.t0)

    @property
    def rss_peak(self) -> float:
        return max(mb for _, mb in self.rss)

    @property
    def rss_end(self) -> float:
        return self.rss[-1][1]

    @property
    def rss_slope(self) -> float:
        """Least-squares slope of RSS over the second half of the measured window, MB/min."""
        mid = (self.t0 + self.t1) / 2
        pts = [(t, mb) for t, mb in self.rss if mid <= t <= self.t1]
        if len(pts) < 2:
            return math.nan
        mt = statistics.fmean(t for t, _ in pts)
        mm = statistics.fmean(mb for _, mb in pts)
        var = sum((t - mt) ** 2 for t, _ in pts)
        return 60 * sum((t - mt) * (mb - mm) for t, mb in pts) / var if var else math.nan


def save_traffic(traffic: Traffic, workdir: Path) -> Path:
    """Pickle the traffic once for the load-generator processes."""
    path = workdir / "traffic.pickle"
    with open(path, "wb") as f:
        pickle.dump(traffic, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def measure(kind: str, traffic_path: Path, args: argparse.Namespace, workdir: Path) -> Measurement:
    """Start ``kind``, load it, watch RSS (and ragmon's /metrics), stop it."""
    ctx = multiprocessing.get_context("spawn")
    server = start_server(kind, workdir)
    loader: BaseProcess | None = None
    result: Measurement | None = None
    try:
        ports = server.wait_ports()
        pid = server.proc.pid
        rss: list[tuple[float, float]] = []

        def sample() -> None:
            mb = rss_mb(pid)
            if mb is not None:
                rss.append((time.monotonic(), mb))

        sample()
        cpu_before = cpu_seconds(pid)
        url = f"http://127.0.0.1:{ports['http']}/v1/traces"
        parent, child = ctx.Pipe(duplex=False)
        loader = ctx.Process(target=load_process, name=f"load-{kind}", daemon=True,
                             args=(child, url, str(traffic_path), args.concurrency, args.warmup,
                                   args.seconds))
        loader.start()
        child.close()
        watch = kind.startswith("ragmon")
        t0 = t1 = math.inf
        scrapes: dict[str, tuple[float, dict[str, float]]] = {}
        load: LoadResult | None = None
        next_rss = time.monotonic()
        hard_deadline = (time.monotonic() + STARTUP_LIMIT + args.warmup + args.seconds
                         + REQUEST_TIMEOUT + 60)
        while load is None:
            now = time.monotonic()
            if now > hard_deadline:
                raise RuntimeError("load generator did not finish in time")
            if now >= next_rss:
                sample()
                next_rss += RSS_INTERVAL
            for name, at in (("t0", t0), ("t1", t1)):
                if watch and name not in scrapes and now >= at:
                    before = time.monotonic()
                    m = scrape(ports["metrics"])
                    scrapes[name] = ((before + time.monotonic()) / 2, m)
            wake = min([next_rss, *(at for name, at in (("t0", t0), ("t1", t1))
                                    if watch and name not in scrapes)])
            if parent.poll(max(0.0, min(wake - time.monotonic(), RSS_INTERVAL))):
                try:
                    message = parent.recv()
                except EOFError:
                    raise RuntimeError("load generator died") from None
                if message[0] == "phases":
                    t0, t1 = message[1], message[2]
                elif message[0] == "result":
                    load = message[1]
                else:
                    raise RuntimeError(f"load generator failed: {message[1]}")
            elif not loader.is_alive() and not parent.poll():
                raise RuntimeError(f"load generator exited with {loader.exitcode}")
        loader.join(10)
        result = Measurement(kind, load, rss, t0, t1)
        if watch:
            for name in ("t0", "t1"):  # the result can arrive before the t1 scrape ran
                if name not in scrapes:
                    scrapes[name] = (time.monotonic(), scrape(ports["metrics"]))
            (s0, m0), (s1, m1) = scrapes["t0"], scrapes["t1"]
            result.scored_spans_per_s = (finished_spans(m1) - finished_spans(m0)) / (s1 - s0)
            result.backlog = m1.get("ragmon_queue_spans", 0.0) + m1.get("ragmon_spans_pending", 0.0)
            limit = time.monotonic() + CATCH_UP_LIMIT
            while True:
                m = scrape(ports["metrics"])
                if caught_up(m, load.total_traces):
                    result.catch_up_s = max(0.0, time.monotonic() - t1)
                    break
                if time.monotonic() > limit:
                    result.problems.append(f"not caught up {CATCH_UP_LIMIT:.0f}s after the load")
                    break
                if time.monotonic() >= next_rss:
                    sample()
                    next_rss = time.monotonic() + RSS_INTERVAL
                time.sleep(CATCH_UP_POLL)
            result.final = m
            result.problems += check_counters(m, load)
        sample()
        cpu_after = cpu_seconds(pid)
        if cpu_before is not None and cpu_after is not None:
            result.cpu_s = cpu_after - cpu_before
        if load.other_status:
            result.problems.append(f"unexpected HTTP statuses {load.other_status} (bodies dropped)")
        if load.errors:
            result.problems.append(f"client errors {load.errors}")
        if load.window_requests == 0:
            result.problems.append("no request was accepted in the measured window")
        return result
    finally:
        if loader is not None and loader.is_alive():
            loader.terminate()
            loader.join(5)
            if loader.is_alive():
                loader.kill()
                loader.join(5)
        status = server.stop()
        if result is not None:
            result.exit_status = status
            if status not in (0, -signal.SIGTERM):
                result.problems.append(f"{kind} exited with status {status}")
            if result.problems:
                result.log_tail = list(server.tail)[-LOG_TAIL:]


def check_counters(m: dict[str, float], load: LoadResult) -> list[str]:
    """ragmon's counters against what the load generator saw acknowledged."""
    problems = []
    for name, want in (("ragmon_traces_total", load.total_traces),
                       ("ragmon_spans_received_total", load.total_spans)):
        got = m.get(name, 0.0)
        if got != want:
            problems.append(f"{name} = {got:,.0f}, but {want:,} were acknowledged")
    # ragmon_traces_evicted_total is shown, not a problem: at the default grace under full load
    # the assembler reaches its byte cap and finishes the oldest traces early; each arrived
    # whole in one body, so it is scored as it was (as bench/overload.py reads it too)
    for name in ("ragmon_traces_ignored_total", "ragmon_dropped_total", "ragmon_spans_late_total",
                 "ragmon_spans_dropped_total"):
        if m.get(name, 0.0):
            problems.append(f"{name} = {m[name]:,.0f} (expected 0)")
    return problems


# --------------------------------------------------------------------------- report


def describe(r: Measurement) -> str:
    text = f"accepted {r.accepted_spans_per_s:>9,.0f} spans/s"
    if r.scored_spans_per_s is not None:
        catch = f"{r.catch_up_s:.2f}s" if r.catch_up_s is not None else "n/a"
        text += (f", scored {r.scored_spans_per_s:>9,.0f} spans/s, backlog {r.backlog or 0:,.0f} "
                 f"spans, catch-up {catch}")
    lat = sorted(r.load.latencies)
    p50 = f"{1000 * statistics.median(lat):.0f}" if lat else "n/a"
    text += (f", 503s {r.load.window_503}, p50 {p50} ms/request; RSS idle {r.rss_idle:.0f}, "
             f"{r.rss_start:.0f} -> {r.rss_end:.0f} MB (peak {r.rss_peak:.0f}), "
             f"slope {r.rss_slope:+.1f} MB/min; CPU {r.cpu_us_per_span:.1f} µs/span, "
             f"{r.cpu_us_per_trace:.0f} µs/trace")
    if r.final.get("ragmon_traces_evicted_total"):
        text += (f"; {r.final['ragmon_traces_evicted_total']:,.0f} traces finished early at the "
                 "assembler's cap (traces.max_bytes / max_spans / max_pending)")
    return text


def median_or_nan(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else math.nan


def print_table(results: dict[str, list[Measurement]], traffic: Traffic,
                args: argparse.Namespace, shape: str) -> None:
    print()
    print(f"[{shape}] {args.seconds:g} s measured per run (after {args.warmup:g} s warm-up), "
          f"{args.concurrency} requests in flight, {args.repeats} run(s) per server, "
          f"bodies of {args.spans_per_body} spans ({traffic.mean_body_bytes / 1e3:,.0f} kB):")
    head = (f"{'server':<10}{'accepted/s':>12}{'min':>10}{'max':>10}{'scored/s':>11}"
            f"{'catch-up':>10}{'503s':>7}{'RSS idle':>10}{'start':>7}{'peak':>7}{'end':>7}"
            f"{'MB/min':>9}{'CPU µs/span':>13}")
    print(head)
    print("-" * len(head))
    for kind, rs in results.items():
        acc = [r.accepted_spans_per_s for r in rs]
        scored = median_or_nan([r.scored_spans_per_s for r in rs])
        catch = median_or_nan([r.catch_up_s for r in rs])
        print(f"{kind:<10}{statistics.median(acc):>12,.0f}{min(acc):>10,.0f}{max(acc):>10,.0f}"
              f"{_fmt(scored, '{:,.0f}'):>11}{_fmt(catch, '{:.2f}s'):>10}"
              f"{statistics.median([r.load.window_503 for r in rs]):>7,.0f}"
              f"{statistics.median([r.rss_idle for r in rs]):>10.0f}"
              f"{statistics.median([r.rss_start for r in rs]):>7.0f}"
              f"{statistics.median([r.rss_peak for r in rs]):>7.0f}"
              f"{statistics.median([r.rss_end for r in rs]):>7.0f}"
              f"{median_or_nan([r.rss_slope for r in rs]):>+9.1f}"
              f"{_fmt(median_or_nan([r.cpu_us_per_span for r in rs]), '{:.1f}'):>13}")
    print("(spans/s and 503s in the measured window, medians over runs; min/max of accepted; RSS "
          "in MB: idle before load, start/end of the measured window (end: after catch-up), peak; "
          "MB/min: RSS slope over the second half of the measured window; CPU µs/span: the "
          "server's user + system CPU from /proc over the whole run / spans acknowledged)")
    if "baseline" not in results:
        return
    base = statistics.median(r.accepted_spans_per_s for r in results["baseline"])
    cpu = {kind: median_or_nan([r.cpu_us_per_span for r in results[kind]]) for kind in results}
    per_trace = {kind: median_or_nan([r.cpu_us_per_trace for r in results[kind]]) for kind in results}
    for kind in [k for k in results if k != "baseline"]:
        accepted = statistics.median(r.accepted_spans_per_s for r in results[kind])
        scored = median_or_nan([r.scored_spans_per_s for r in results[kind]])
        print(f"{kind} / baseline, spans accepted: {_ratio(accepted, base)}   spans scored: "
              f"{_ratio(scored, base)}   (median / median; above 1 means {kind} is faster)")
        pairs = cpu_pairs(results, kind)
        print(f"[{shape}] CPU per span: {kind} {_fmt(cpu[kind], '{:.1f}')} µs, baseline "
              f"{_fmt(cpu['baseline'], '{:.1f}')} µs; per trace: {kind} {_fmt(per_trace[kind], '{:.0f}')} µs, "
              f"baseline {_fmt(per_trace['baseline'], '{:.0f}')} µs; {kind} / baseline per pair: "
              f"{', '.join(f'{p:.2f}x' for p in pairs)} (median {_fmt(median_or_nan(pairs), '{:.2f}x')}; "
              f"above 1 means {kind} spends more; baseline / {kind} = "
              f"{_fmt(1 / median_or_nan(pairs) if pairs else math.nan, '{:.2f}x')})")


def cpu_pairs(results: dict[str, list[Measurement]], kind: str) -> list[float]:
    """``kind``'s CPU per span over the baseline's, run by run (the runs of a round pair up)."""
    return [r.cpu_us_per_span / b.cpu_us_per_span for r, b in zip(results[kind], results.get("baseline", []))
            if b.cpu_us_per_span and not math.isnan(r.cpu_us_per_span / b.cpu_us_per_span)]


def _fmt(value: float, pattern: str) -> str:
    return "n/a" if math.isnan(value) else pattern.format(value)


def _ratio(a: float, b: float) -> str:
    return "n/a" if math.isnan(a) or not b else f"{a / b:.2f}x"


def git_revision() -> str:
    """The work tree's commit (``+dirty`` with uncommitted changes to ragmon/), or ``?``."""
    try:
        def git(*argv: str) -> str:
            return subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()

        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "ragmon")
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+dirty" if dirty else "")


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per server (alternating)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="unmeasured seconds of load first")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--batches", type=int, default=200, help="distinct pre-encoded bodies")
    parser.add_argument("--spans-per-body", type=int, default=512,
                        help="spans per body (the SDK's default export batch is 512)")
    parser.add_argument("--seed", type=int, default=0, help="traffic seed")
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help=f"trace shapes, comma-separated (default {','.join(SHAPES)})")
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help="servers, comma-separated (default all: ragmon as installed, ragmon-py "
                             "as pure Python, the bare baseline)")
    parser.add_argument("--doc-chars", default="300",
                        help="characters of each document's content, comma-separated sizes, each measured "
                             "in its own runs (e.g. 0,300,2000; 0: no content attribute)")
    parser.add_argument("--io-chars", type=int, default=None,
                        help="characters of the model's user message and answer (default: the answer "
                             "150-450, the user message all of the retrieved context)")
    args = parser.parse_args(argv)
    try:
        args.doc_chars = [int(n) for n in args.doc_chars.split(",") if n.strip()]
    except ValueError:
        parser.error("--doc-chars: comma-separated whole numbers")
    if not args.doc_chars or any(n < 0 for n in args.doc_chars) or (args.io_chars is not None and args.io_chars < 40):
        parser.error("--doc-chars: sizes >= 0; --io-chars: >= 40")
    args.servers = tuple(dict.fromkeys(s.strip() for s in args.servers.split(",") if s.strip()))
    if not args.servers or any(s not in SERVERS for s in args.servers):
        parser.error(f"--servers: choose from {', '.join(SERVERS)}")
    args.shapes = [s for s in args.shapes.split(",") if s]
    if not args.shapes or any(s not in SHAPES for s in args.shapes):
        parser.error(f"--shapes: choose from {', '.join(SHAPES)}")
    if args.seconds <= 0 or args.warmup < 0 or args.repeats < 1 or args.concurrency < 1:
        parser.error("--seconds must be > 0, --warmup >= 0, --repeats and --concurrency >= 1")
    if args.batches < 1 or args.spans_per_body < MIN_TRACE_SPANS or args.spans_per_body == 11:
        parser.error("--batches must be >= 1 and --spans-per-body >= 6 (and not 11)")
    return args


@dataclass(frozen=True)
class SizeResult:
    """One shape at one document size: the medians of its runs."""

    shape: str
    doc_chars: int
    cpu_span: dict[str, float]
    cpu_trace: dict[str, float]
    ratio: dict[str, float]
    """Of each ragmon server: the median over pairs of its CPU per span / the baseline's."""


def run_shape(shape: str, args: argparse.Namespace, doc_chars: int = 300) -> tuple[list[str], SizeResult]:
    """Build ``shape``'s traffic with documents of ``doc_chars``, measure ``args.repeats`` pairs,
    print the table; the problems and the figures."""
    traffic = build_traffic(args.batches, args.spans_per_body, args.seed, shape, doc_chars, args.io_chars)
    spans = sum(traffic.spans)
    shape_name = shape
    shape = f"{shape} doc={doc_chars}"
    print(f"[{shape}] traffic: {args.batches} bodies x {traffic.spans[0]} spans = {spans:,} spans in "
          f"{sum(traffic.traces):,} traces ({spans / sum(traffic.traces):.1f} spans/trace), "
          f"{traffic.mean_body_bytes / 1e3:,.0f} kB a body; built with the OpenTelemetry SDK in "
          f"{traffic.seconds:.1f}s (not timed)", flush=True)
    results: dict[str, list[Measurement]] = {k: [] for k in args.servers}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ragmon-bench-") as tmp:
        traffic_path = save_traffic(traffic, Path(tmp))
        for round_ in range(args.repeats):
            order = args.servers if round_ % 2 == 0 else args.servers[::-1]
            for kind in order:
                r = measure(kind, traffic_path, args, Path(tmp))
                results[kind].append(r)
                print(f"  [{shape}] pair {round_ + 1}/{args.repeats} {kind:<8}: {describe(r)}", flush=True)
                for p in r.problems:
                    print(f"    PROBLEM ({kind}): {p}", flush=True)
                if r.log_tail:
                    lines = "\n".join(f"      | {line}" for line in r.log_tail)
                    print(f"    {kind}'s last stderr lines:\n{lines}", flush=True)
                problems += r.problems
    print_table(results, traffic, args, shape)
    figures = SizeResult(
        shape_name, doc_chars,
        {kind: median_or_nan([r.cpu_us_per_span for r in results[kind]]) for kind in results},
        {kind: median_or_nan([r.cpu_us_per_trace for r in results[kind]]) for kind in results},
        {kind: median_or_nan(cpu_pairs(results, kind)) for kind in results if kind != "baseline"},
    )
    last = next((results[kind][-1] for kind in results if kind != "baseline"), None)
    if last is not None and last.final:
        f = last.final
        print(f"ragmon's /metrics after its last run: "
              f"{f.get('ragmon_traces_total', 0):,.0f} traces "
              f"scored (ragmon_traces_total), {f.get('ragmon_spans_received_total', 0):,.0f} spans "
              f"received; acknowledged by ragmon: {last.load.total_traces:,} traces, "
              f"{last.load.total_spans:,} spans; "
              f"{f.get('ragmon_requests_rejected_total', 0):,.0f} requests rejected")
    return problems, figures


def print_sizes(sizes: Sequence[SizeResult], io_chars: int | None) -> None:
    """CPU per span and per trace of each shape and server across document sizes, and how it
    grows; the compiled and the pure-Python ragmon in one table."""
    print()
    print(f"CPU across document sizes (model input/output: {io_chars if io_chars is not None else 'as built'} characters; "
          "medians; ratio: CPU per span / the baseline's, median over pairs; growth: µs per span more "
          "than at the smallest size):")
    head = (f"{'shape':<11}{'doc chars':>10}  {'server':<11}{'µs/span':>9}{'µs/trace':>10}{'ratio':>8}"
            f"{'baseline/it':>13}{'growth':>8}")
    print(head)
    print("-" * len(head))
    for shape in dict.fromkeys(s.shape for s in sizes):
        rows = sorted((s for s in sizes if s.shape == shape), key=lambda s: s.doc_chars)
        first = rows[0]
        for s in rows:
            for kind, span in s.cpu_span.items():
                ratio = s.ratio.get(kind, math.nan)
                print(f"{shape:<11}{s.doc_chars:>10,}  {kind:<11}{_fmt(span, '{:.1f}'):>9}"
                      f"{_fmt(s.cpu_trace[kind], '{:.0f}'):>10}{_fmt(ratio, '{:.2f}x'):>8}"
                      f"{_fmt(1 / ratio if ratio else math.nan, '{:.2f}x'):>13}"
                      f"{_fmt(span - first.cpu_span.get(kind, math.nan), '{:+.1f}'):>8}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from ragmon.compiled import pipeline  # what `ragmon run` loads too (it inherits the environment)
    from ragmon.otlp.decode import DECODER

    print(f"python {platform.python_version()}, ragmon {version('ragmon')} ({git_revision()}; decoder "
          f"{DECODER}, pipeline {pipeline()}), "
          f"aiohttp "
          f"{version('aiohttp')}, protobuf {version('protobuf')}, opentelemetry-sdk "
          f"{version('opentelemetry-sdk')}; {os.cpu_count()} CPUs", flush=True)
    problems: list[str] = []
    sizes: list[SizeResult] = []
    for shape in args.shapes:
        for doc_chars in args.doc_chars:
            found, figures = run_shape(shape, args, doc_chars)
            problems += found
            sizes.append(figures)
    print_sizes(sizes, args.io_chars)
    if problems:
        print(f"{len(problems)} problem(s), see PROBLEM lines above")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
