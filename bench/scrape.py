"""Benchmark: does a big ``/metrics`` scrape stall OTLP ingest?

Usage::

    python bench/scrape.py [--pairs 60] [--seconds 15] [--rate 50] [--repeats 3] [--every 1.0]

``--pairs 20 --seconds 4 --repeats 1`` is a quick smoke run.

What it does
------------
Starts ``python -m ragmon run`` as bench/ingest.py does (OTLP/HTTP and ``/metrics`` on free 127.0.0.1 ports, gRPC off,
every other setting at its default) and fills it with ``--pairs`` (service, variant) pairs of
RAG traffic (OpenInference traces built with the OpenTelemetry SDK and encoded with its OTLP
exporter's encoder: retrieval with labels, an LLM call; every pair gets every series family),
so that one scrape holds tens of thousands of samples (printed). Then, ``--repeats`` times, two
phases of ``--seconds`` each, in alternating order:

* ``quiet``: small OTLP bodies (one 3-span RAG trace each, a unique trace id) posted at
  ``--rate`` per second on a keep-alive connection, each post's round trip timed;
* ``scraping``: the same, while another thread scrapes ``/metrics`` (Prometheus text) every
  ``--every`` seconds (back to back when a scrape takes longer).

It prints the posts' p50 / p99 / max per phase (medians over the repeats), the p99 added by
scraping, and the scrape's duration (text and OpenMetrics). Goal: the p99 added stays under
20 ms at 60k samples.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402  (bench/ingest.py: starting ``ragmon run`` at its default configuration)


def _traces(service: str, variants: Sequence[str], per_variant: int, rng: random.Random) -> bytes:
    """One OTLP body: ``per_variant`` RAG traces per variant of ``service``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for variant in variants:
        for _ in range(per_variant):
            with tracer.start_as_current_span("rag") as root:
                root.set_attribute("openinference.span.kind", "CHAIN")
                root.set_attribute("input.value", f"question {rng.randrange(10**6)}")
                root.set_attribute("output.value", "an answer from the documents.")
                root.set_attribute("ragmon.variant", variant)
                with tracer.start_as_current_span("retrieve") as span:
                    span.set_attribute("openinference.span.kind", "RETRIEVER")
                    ids = [f"d{rng.randrange(50)}" for _ in range(10)]
                    for i, doc in enumerate(ids):
                        span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
                    span.set_attribute("ragmon.relevant_document_ids", [rng.choice(ids), "d99"])
                with tracer.start_as_current_span("llm") as span:
                    span.set_attribute("openinference.span.kind", "LLM")
                    span.set_attribute("llm.model_name", "gpt-4o-mini")
                    span.set_attribute("llm.token_count.prompt", 100)
                    span.set_attribute("llm.token_count.completion", 20)
    provider.shutdown()
    return bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


def scrape(port: int, openmetrics: bool = False) -> tuple[float, bytes]:
    """(seconds, body) of one ``/metrics`` scrape."""
    accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
    return time.perf_counter() - started, body


async def post_steadily(port: int, bodies: deque[bytes], rate: float, seconds: float) -> list[float]:
    """Post ``rate`` bodies a second for ``seconds``; the round trip of each, in seconds."""
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/traces"
    headers = {"Content-Type": "application/x-protobuf"}
    times: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8)) as session:

        async def one(body: bytes) -> None:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"POST answered {response.status}")
            times.append(time.perf_counter() - started)

        tasks = []
        start = time.perf_counter()
        n = 0
        while (due := start + n / rate) < start + seconds:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.ensure_future(one(bodies.popleft())))
            n += 1
        await asyncio.gather(*tasks)
    return times


def phase(ports: dict[str, int], bodies: deque[bytes], args: argparse.Namespace, scraping: bool) -> tuple[list[float], list[float]]:
    """Post for ``args.seconds``, scraping in a thread when ``scraping``: (post times, scrape times)."""
    done = threading.Event()
    scrapes: list[float] = []

    def scraper() -> None:
        while not done.is_set():
            started = time.perf_counter()
            scrapes.append(scrape(ports["metrics"])[0])
            done.wait(max(0.0, args.every - (time.perf_counter() - started)))

    thread = threading.Thread(target=scraper, daemon=True)
    if scraping:
        thread.start()
    try:
        posts = asyncio.run(post_steadily(ports["http"], bodies, args.rate, args.seconds))
    finally:
        done.set()
        if scraping:
            thread.join(60)
    return posts, scrapes


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=60, help="(service, variant) pairs (default 60)")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=50.0, help="OTLP posts per second (default 50)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between scrapes (default 1)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rng = random.Random(0)
    services = [f"svc-{i}" for i in range((args.pairs + 5) // 6)]
    seed = [_traces(s, [f"v{j}" for j in range(min(6, args.pairs - 6 * i))], 12, rng) for i, s in enumerate(services)]
    posts_needed = int(args.rate * args.seconds * 2 * args.repeats * 1.1) + 10
    small = deque(_traces("probe-svc", ["a"], 1, rng) for _ in range(posts_needed))
    with tempfile.TemporaryDirectory() as tmp:
        ragmon = ingest.start_server("ragmon", Path(tmp))
        try:
            ports = ragmon.wait_ports()
            for body in seed:
                urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{ports['http']}/v1/traces", data=body,
                    headers={"Content-Type": "application/x-protobuf"}), timeout=30).read()
            time.sleep(3.0)  # past the 2 s grace: every seeded trace scored
            text_seconds, body = scrape(ports["metrics"])
            samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            om_seconds = scrape(ports["metrics"], openmetrics=True)[0]
            print(f"/metrics: {samples} samples, {len(body) / 1e6:.1f} MB; one scrape {text_seconds * 1000:.0f} ms "
                  f"(OpenMetrics {om_seconds * 1000:.0f} ms)")
            results: dict[str, list[tuple[float, float, float]]] = {"quiet": [], "scraping": []}
            scrape_times: list[float] = []
            for repeat in range(args.repeats):
                for scraping in ((False, True) if repeat % 2 == 0 else (True, False)):
                    posts, scrapes = phase(ports, small, args, scraping)
                    scrape_times += scrapes
                    results["scraping" if scraping else "quiet"].append(
                        (quantile(posts, 0.5), quantile(posts, 0.99), max(posts)))
        finally:
            ragmon.stop()
    print(f"{args.rate:g} posts/s for {args.seconds:g} s per phase, {args.repeats} repeat(s); medians over repeats")
    print(f"{'phase':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    med = {}
    for name, rows in results.items():
        med[name] = [statistics.median(r[i] for r in rows) * 1000 for i in range(3)]
        print(f"{name:>9} {med[name][0]:>8.1f} {med[name][1]:>8.1f} {med[name][2]:>8.1f}")
    print(f"p99 added by scraping: {med['scraping'][1] - med['quiet'][1]:+.1f} ms (goal <= 20 ms); "
          f"scrapes during the runs: {len(scrape_times)}, median {statistics.median(scrape_times) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
