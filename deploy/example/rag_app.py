"""A synthetic RAG service that sends OpenInference-shaped traces to ragmon over OTLP.

No model and no network besides the OTLP exporter: retrieval and generation are simulated, with
span timestamps set from simulated latencies (no sleeping). Each request is a CHAIN root span
(``input.value`` question, ``output.value`` answer) with a RETRIEVER child (ranked
``retrieval.documents.N.document.{id,score,content}`` and ``ragmon.relevant_document_ids``, so
ragmon can score it) and an LLM child (``llm.model_name``, ``llm.token_count.*``).

It generates traffic by itself (``--rps``) and, with ``--port``, also answers ``POST /ask``
(``{"question": …}``; a W3C ``traceparent`` header is continued, as ragmon's prober sends) and
``GET /healthz``. Knobs let a demo inject a regression: ``--hit-rate`` (how often the relevant
document is retrieved), ``--error-rate``, ``--slow-rate``.

Configuration: the OpenTelemetry SDK's environment (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_SERVICE_NAME``, …) or the flags below; each flag also reads ``RAG_<NAME>``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, set_span_in_context

CORPUS: dict[str, str] = {
    "refund-policy": "Refunds are accepted within 30 days of purchase with a receipt.",
    "shipping-times": "Standard shipping takes 3 to 5 business days; express takes 1 to 2.",
    "password-reset": "Reset your password from the sign-in page with 'Forgot password'.",
    "warranty": "Hardware carries a two-year limited warranty against manufacturing defects.",
    "store-hours": "Stores open 9am to 8pm Monday to Saturday and 10am to 6pm on Sunday.",
    "gift-cards": "Gift cards never expire and can be used online and in stores.",
    "price-match": "We match a competitor's advertised price within 14 days of purchase.",
    "account-delete": "Deleting your account removes your order history after 30 days.",
    "international": "We ship to 40 countries; duties are paid by the recipient.",
    "loyalty": "Members earn one point per dollar and redeem 100 points for 5 dollars.",
}
QUESTIONS: tuple[tuple[str, str, str], ...] = (
    ("What is the refund window?", "refund-policy", "You can get a refund within 30 days with a receipt."),
    ("How long does shipping take?", "shipping-times", "Standard shipping takes 3 to 5 business days."),
    ("How do I reset my password?", "password-reset", "Use 'Forgot password' on the sign-in page."),
    ("How long is the warranty?", "warranty", "Hardware has a two-year limited warranty."),
    ("When are stores open on Sunday?", "store-hours", "On Sunday stores open from 10am to 6pm."),
    ("Do gift cards expire?", "gift-cards", "No, gift cards never expire."),
    ("Do you match prices?", "price-match", "Yes, within 14 days of purchase."),
    ("What happens when I delete my account?", "account-delete", "Your order history is removed after 30 days."),
    ("Do you ship abroad?", "international", "Yes, to 40 countries; the recipient pays duties."),
    ("How do loyalty points work?", "loyalty", "One point per dollar; 100 points give 5 dollars off."),
)
MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class Settings:
    """How the simulated service behaves."""

    hit_rate: float = 0.85
    error_rate: float = 0.02
    slow_rate: float = 0.02
    top_k: int = 5


def make_provider(service: str, variant: str, endpoint: str | None = None) -> TracerProvider:
    """A tracer provider exporting OTLP/HTTP to ``endpoint`` (a base URL; default: the SDK's
    environment, else http://localhost:4318)."""
    resource = Resource.create({"service.name": service, "ragmon.variant": variant})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
    return provider


def answer(
    tracer: Tracer, rng: random.Random, settings: Settings, question: str | None = None,
    parent: Context | None = None,
) -> dict[str, Any]:
    """Serve one simulated RAG request, recording its spans; returns the response body."""
    known = {q: (doc, a) for q, doc, a in QUESTIONS}
    if question is None:
        question = rng.choice(QUESTIONS)[0]
    relevant, reply = known.get(question, (None, "I could not find that in the documentation."))
    others = [d for d in CORPUS if d != relevant]
    ranking = rng.sample(others, settings.top_k)
    if relevant is not None and rng.random() < settings.hit_rate:
        ranking[rng.randrange(min(3, settings.top_k))] = relevant
    slow = rng.random() < settings.slow_rate
    failed = rng.random() < settings.error_rate

    start = time.time_ns()
    retrieval_ns = int(rng.uniform(0.02, 0.08) * 1e9)
    generation_ns = int((rng.uniform(3.0, 8.0) if slow else rng.uniform(0.3, 1.2)) * 1e9)
    end = start + retrieval_ns + generation_ns + 2_000_000

    root = tracer.start_span("POST /ask", context=parent, kind=SpanKind.SERVER, start_time=start)
    root.set_attribute("openinference.span.kind", "CHAIN")
    root.set_attribute("input.value", question)
    ctx = set_span_in_context(root)

    retriever = tracer.start_span("retrieve", context=ctx, start_time=start + 1_000_000)
    retriever.set_attribute("openinference.span.kind", "RETRIEVER")
    retriever.set_attribute("input.value", question)
    for i, doc in enumerate(ranking):
        retriever.set_attribute(f"retrieval.documents.{i}.document.id", doc)
        retriever.set_attribute(f"retrieval.documents.{i}.document.score", round(0.9 - 0.07 * i, 3))
        retriever.set_attribute(f"retrieval.documents.{i}.document.content", CORPUS[doc])
    if relevant is not None:
        retriever.set_attribute("ragmon.relevant_document_ids", [relevant])
    retriever.end(end_time=start + 1_000_000 + retrieval_ns)

    prompt_tokens = 60 + 40 * settings.top_k
    completion_tokens = len(reply.split()) * 2
    llm = tracer.start_span("generate", context=ctx, start_time=start + 1_000_000 + retrieval_ns)
    llm.set_attribute("openinference.span.kind", "LLM")
    llm.set_attribute("llm.model_name", MODEL)
    llm.set_attribute("llm.provider", "openai")
    llm.set_attribute("input.value", question)
    if failed:
        llm.set_status(Status(StatusCode.ERROR, "RateLimitError: 429 Too Many Requests"))
        root.set_status(Status(StatusCode.ERROR, "generation failed"))
        reply = "Sorry, something went wrong."
    else:
        llm.set_attribute("llm.token_count.prompt", prompt_tokens)
        llm.set_attribute("llm.token_count.completion", completion_tokens)
        llm.set_attribute("llm.token_count.total", prompt_tokens + completion_tokens)
        llm.set_attribute("output.value", reply)
    llm.end(end_time=end - 1_000_000)

    root.set_attribute("output.value", reply)
    root.end(end_time=end)
    return {"answer": reply, "documents": [{"id": d, "content": CORPUS[d]} for d in ranking]}


def generate(tracer: Tracer, settings: Settings, *, rps: float, requests: int = 0, duration: float = 0.0,
             seed: int | None = None, stop: threading.Event | None = None) -> int:
    """Send requests at ``rps`` (0: as fast as possible) until ``requests`` were sent, ``duration``
    seconds passed or ``stop`` is set (0 for both: until stopped). Returns how many were sent."""
    rng = random.Random(seed)
    stop = stop or threading.Event()
    began = time.monotonic()
    sent = 0
    while not stop.is_set():
        if requests and sent >= requests:
            break
        if duration and time.monotonic() - began >= duration:
            break
        answer(tracer, rng, settings)
        sent += 1
        if rps > 0:
            stop.wait(max(0.0, began + sent / rps - time.monotonic()))
    return sent


def serve(tracer: Tracer, settings: Settings, port: int, seed: int | None = None) -> ThreadingHTTPServer:
    """Start ``POST /ask`` and ``GET /healthz`` on ``port`` (0: any) in a daemon thread."""
    rng = random.Random(seed)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(200, {"status": "ok"})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/ask":
                self._reply(404, {"error": "not found"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                question = str(body["question"])
            except (ValueError, KeyError, TypeError):
                self._reply(400, {"error": 'expected JSON {"question": "…"}'})
                return
            parent = propagate.extract({k.lower(): v for k, v in self.headers.items()})
            with lock:  # random.Random is not thread-safe
                result = answer(tracer, rng, settings, question, parent)
            self._reply(200, result)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RAG_{name.upper()}", default)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Synthetic RAG service sending OpenInference traces over OTLP.")
    parser.add_argument("--endpoint", default=_env("endpoint", "") or None,
                        help="OTLP/HTTP base URL (default: OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318)")
    parser.add_argument("--service", default=os.environ.get("OTEL_SERVICE_NAME") or _env("service", "rag-example"))
    parser.add_argument("--variant", default=_env("variant", "default"))
    parser.add_argument("--rps", type=float, default=float(_env("rps", "2")), help="generated requests per second (0: as fast as possible)")
    parser.add_argument("--requests", type=int, default=int(_env("requests", "0")), help="stop after N requests (0: no limit)")
    parser.add_argument("--duration", type=float, default=float(_env("duration", "0")), help="stop after S seconds (0: no limit)")
    parser.add_argument("--port", type=int, default=int(_env("port", "8080")), help="serve /ask and /healthz (-1: off)")
    parser.add_argument("--hit-rate", type=float, default=float(_env("hit_rate", "0.85")))
    parser.add_argument("--error-rate", type=float, default=float(_env("error_rate", "0.02")))
    parser.add_argument("--slow-rate", type=float, default=float(_env("slow_rate", "0.02")))
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    settings = Settings(hit_rate=args.hit_rate, error_rate=args.error_rate, slow_rate=args.slow_rate)
    provider = make_provider(args.service, args.variant, args.endpoint)
    tracer = provider.get_tracer("rag-example")
    server = serve(tracer, settings, args.port, args.seed) if args.port >= 0 else None
    stop = threading.Event()
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())  # docker stop: flush, then exit
    try:
        sent = generate(tracer, settings, rps=args.rps, requests=args.requests, duration=args.duration,
                        seed=args.seed, stop=stop)
    except KeyboardInterrupt:
        sent = -1
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.shutdown()
        provider.shutdown()
    print(f"rag-example: sent {sent} requests" if sent >= 0 else "rag-example: stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
