"""``ragmon demo``: ragmon and a synthetic RAG service in one process, traffic, a live view, an
injected retrieval regression halfway through.

What runs (all on 127.0.0.1, free ports, nothing leaves the machine):

- ragmon's sidecar (``ragmon.sidecar.wiring.Sidecar``) with the demo's settings: rolling windows of 15 s
  and 5 min (instead of 5 min and 1 h), a 0.5 s trace grace, a golden set of the demo's
  questions, a probe replaying six of them against the service every 5 s, and the judge: the
  ``[judge]`` of ``--config`` when it configures one, else the offline lexical faithfulness
  estimate on every answer;
- the service (``ragmon.demo.service``), exporting its spans with the OpenTelemetry SDK's
  ``BatchSpanProcessor`` and OTLP/HTTP exporter to ragmon, and serving ``POST /ask`` for the
  probe;
- traffic: ``rate`` questions a second, alternating variants A and B; one request in four
  carries its label on the retriever span, one in three gets a thumbs up or down
  (``POST /v1/feedback``, up when the answer is grounded in the right document), one in eight
  relevance feedback;
- halfway, variant B's retrieval is degraded; the view shows its hit rate and MRR falling and
  names the alert rules that would fire.

At the end (``duration`` elapsed, or Ctrl-C) the service stops, its last spans are flushed,
ragmon scores every trace it holds, and the demo prints the service's own count of answers and
of golden hits next to ragmon's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import random
import signal
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import aiohttp
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client.registry import Collector
from rich.console import Console
from rich.live import Live

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, ProbeConfig
from ragmon.demo.corpus import Corpus, build_corpus
from ragmon.demo.service import RagService, ask_app
from ragmon.judge.endpoint import endpoint_from_config
from ragmon.export.alerts import headline_k
from ragmon.demo.view import Values, alerts, plain, read_values, render, service_samples

__all__ = ["SERVICE", "DemoOptions", "demo", "demo_config"]

SERVICE = "demo-rag"
"""The demo service's ``service.name``."""
WINDOWS = (15.0, 300.0)
DEGRADED = "B"
PROBE_QUERIES = 6
FEEDBACK_DELAY = 2.0
"""Seconds between an answer and its feedback: past the batch export and the 0.5 s grace."""
log = logging.getLogger("ragmon")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """``ragmon demo``'s flags."""

    duration: float = 60.0
    rate: float = 10.0
    seed: int = 1
    config: Config | None = None
    """A configuration whose ``[judge]`` (and ``[pricing]``) the demo uses; None: no LLM judge."""


def demo_config(base: Config | None, golden: str, probe_dataset: str, ask_url: str) -> Config:
    """The sidecar's configuration: ``base``'s judge and prices, the demo's ports, windows,
    golden set and probe."""
    cfg = base or Config()
    judge = cfg.judge if base is not None else dataclasses.replace(cfg.judge, enabled=False)
    if endpoint_from_config(judge, os.environ) is None:
        judge = dataclasses.replace(judge, sample_rate=1.0)  # the lexical estimate costs nothing
    return dataclasses.replace(
        cfg,
        receiver=dataclasses.replace(cfg.receiver, http="127.0.0.1:0", grpc=""),
        metrics=dataclasses.replace(cfg.metrics, listen="127.0.0.1:0", token=""),
        traces=dataclasses.replace(cfg.traces, grace=0.5),
        scoring=dataclasses.replace(cfg.scoring, windows=WINDOWS, golden=golden),
        judge=judge,
        probe=(ProbeConfig(name="demo-ask", url=ask_url, interval=5.0, timeout=5.0, concurrency=2,
                           dataset=probe_dataset, response_ids="documents[*].id", response_answer="answer"),),
    )


def _write_golden(corpus: Corpus, folder: Path) -> tuple[str, str]:
    lines = [json.dumps({"query": q.text, "relevant_document_ids": [q.relevant]}) for q in corpus.questions]
    golden, probe = folder / "golden.jsonl", folder / "probe.jsonl"
    golden.write_text("\n".join(lines) + "\n")
    probe.write_text("\n".join(lines[:: len(lines) // PROBE_QUERIES][:PROBE_QUERIES]) + "\n")
    return str(golden), str(probe)


async def _serve(app: web.Application, stack: AsyncExitStack) -> int:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return int(runner.addresses[0][1])


class _Traffic:
    """Questions at a steady rate and the users' feedback on some answers."""

    def __init__(self, service: RagService, corpus: Corpus, feedback_url: str, rate: float, seed: int) -> None:
        self.service, self.corpus, self.url = service, corpus, feedback_url
        self.interval = 1.0 / rate
        self.rng = random.Random(seed)
        self.feedback: Counter[str] = Counter()
        self._pending: set[asyncio.Task[None]] = set()

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            question = self.rng.choice(self.corpus.questions)
            variant = "AB"[n % 2]
            answer = self.service.answer(question.text, variant, label=n % 4 == 0)
            if n % 3 == 0:
                right = answer.grounded and answer.ranking[:1] == (question.relevant,)
                self._later({"trace_id": answer.trace_id, "name": "thumbs", "score": 1 if right else 0}, session)
            if n % 8 == 1:
                self._later({"trace_id": answer.trace_id, "relevant_document_ids": [question.relevant]}, session)
            n += 1
            next_at += self.interval
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
            except TimeoutError:
                pass

    def _later(self, body: dict[str, object], session: aiohttp.ClientSession) -> None:
        task = asyncio.ensure_future(self._send(body, session))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, body: dict[str, object], session: aiohttp.ClientSession) -> None:
        for attempt in range(3):
            await asyncio.sleep(FEEDBACK_DELAY * (attempt + 1))
            try:
                async with session.post(self.url, json=body) as response:
                    status = response.status
            except aiohttp.ClientError:
                status = 0
            if status != 404:  # 404: the trace is not scored yet; the user tries again
                break
        self.feedback["accepted" if status == 202 else f"status {status}"] += 1

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)


class _Screen:
    """The live view on a terminal (rich), plain lines every ``PLAIN_EVERY`` seconds otherwise."""

    PLAIN_EVERY = 5.0

    def __init__(self, out: TextIO, k: int) -> None:
        self.console = Console(file=out, highlight=False)
        self.k = k
        self.live: Live | None = None
        self._printed_at = -self.PLAIN_EVERY
        self._said: set[str] = set()

    def say(self, line: str) -> None:
        (self.live.console if self.live else self.console).print(line, markup=False, highlight=False, soft_wrap=True)

    def update(self, values: Values, fired: list[str], elapsed: float, status: str) -> None:
        window = f"{WINDOWS[0]:g}s"
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(console=self.console, refresh_per_second=4, transient=False)
                self.live.start()
            self.live.update(render(values, window, self.k, fired, status))
            return
        if elapsed - self._printed_at >= self.PLAIN_EVERY:
            self._printed_at = elapsed
            for line in plain(values, window, self.k, elapsed):
                self.say(line)
        for line in fired:
            key = line.split(":")[0]
            if key not in self._said:
                self._said.add(key)
                self.say(f"[{elapsed:5.1f}s] ALERT {line}")

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


async def demo(options: DemoOptions, out: TextIO, stop: asyncio.Event | None = None) -> int:
    """Run the demo; 0 when it ran its course, 130 when ``stop`` (Ctrl-C) cut it short."""
    stop = stop or asyncio.Event()
    corpus = build_corpus()
    ks = (options.config or Config()).scoring.k
    k = headline_k(ks)
    async with AsyncExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ragmon-demo-")))
        golden, probe_dataset = _write_golden(corpus, folder)
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        service = RagService(corpus, provider.get_tracer("ragmon.demo"), seed=options.seed, ks=ks)
        ask_port = await _serve(ask_app(service), stack)
        config = demo_config(options.config, golden, probe_dataset, f"http://127.0.0.1:{ask_port}/ask")
        sidecar = Sidecar(config)
        await sidecar.start()
        http, metrics = sidecar.ports.http, sidecar.ports.metrics
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http}/v1/traces", timeout=10), schedule_delay_millis=500,
        ))
        screen = _Screen(out, k)
        screen.say(f"ragmon demo: {options.duration:g}s of traffic at {options.rate:g} requests/s, variants A and B; "
                   f"variant {DEGRADED}'s retrieval degrades at {options.duration / 2:g}s")
        screen.say(f"  metrics:     http://127.0.0.1:{metrics}/metrics")
        screen.say(f"  status page: http://127.0.0.1:{metrics}/")
        screen.say(f"  OTLP/HTTP:   http://127.0.0.1:{http}/v1/traces (the demo service exports here)")
        judge = sidecar.judge.describe() if options.config is not None else "lexical faithfulness estimate (no LLM judge: pass --config with a [judge])"
        screen.say(f"  judge:       {judge}")
        screen.say("  windows:     15s and 5m (shortened for the demo; ragmon run defaults to 5m and 1h)")
        traffic = _Traffic(service, corpus, f"http://127.0.0.1:{http}/v1/feedback", options.rate, options.seed)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        sending = asyncio.create_task(traffic.run(session, stop))
        interrupted = await _watch(sidecar, service, screen, options, stop, k)
        stop.set()
        await sending
        await traffic.close()
        screen.close()
        await sidecar.probes.stop(1.0)
        await asyncio.to_thread(provider.shutdown)  # flushes the last spans (the exporter posts to this loop)
        await sidecar.stop()
        _summary(screen, service, sidecar, k, traffic.feedback)
    return 130 if interrupted else 0


async def _watch(sidecar: Sidecar, service: RagService, screen: _Screen, options: DemoOptions,
                 stop: asyncio.Event, k: int) -> bool:
    """Refresh the view until ``duration`` passes (False) or ``stop`` is set (True); degrade
    variant B halfway."""
    started = time.monotonic()
    baseline: Values | None = None
    window, long_window = f"{WINDOWS[0]:g}s", "5m"
    status = f"variant {DEGRADED} degrades at {options.duration / 2:g}s"
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= options.duration:
            return False
        if baseline is None and elapsed >= options.duration / 2:
            baseline = read_values(sidecar.registry, SERVICE, long_window, k).get(long_window, {})
            service.degraded.add(DEGRADED)
            status = (f"variant {DEGRADED}'s retrieval degraded at {elapsed:.0f}s (re-indexed with a broken "
                      "embedding model); alert check: rules' thresholds, 15s against the 5m before it")
            screen.say(f"[{elapsed:5.1f}s] {status}")
        values = read_values(sidecar.registry, SERVICE, window, k)
        screen.update(values.get(window, {}), alerts(values.get(window, {}), baseline, k=k), elapsed,
                      f"{elapsed:.0f}s of {options.duration:g}s; {status}; Ctrl-C ends it")
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
            return True
        except TimeoutError:
            pass


def _summary(screen: _Screen, service: RagService, sidecar: Sidecar, k: int, feedback: Counter[str]) -> None:
    """What the service answered next to what ragmon measured (golden source), per variant."""
    measured = _counters(sidecar.registry)
    screen.say("done. The service's own count against ragmon's (golden labels):")
    for variant in sorted(service.tally.requests):
        parts = [f"requests {service.tally.requests[variant]} (ragmon {measured.get(('traces', variant, ''), 0):.0f})"]
        for cut in service.ks:
            parts.append(f"hits@{cut} {service.tally.hits[variant, cut]} "
                         f"(ragmon {measured.get(('hits', variant, str(cut)), 0):.0f})")
        screen.say(f"  variant {variant}: " + ", ".join(parts))
    screen.say("  feedback: " + (", ".join(f"{n} {what}" for what, n in sorted(feedback.items())) or "none sent"))


def _counters(registry: Collector) -> dict[tuple[str, str, str], float]:
    found: dict[tuple[str, str, str], float] = {}
    for (name, labels), value in service_samples(registry, SERVICE).items():
        lab = dict(labels)
        if name == "ragmon_traces_total":
            found["traces", lab["variant"], ""] = value
        elif name == "ragmon_retrieval_hits_total" and lab.get("source") == "golden":
            found["hits", lab["variant"], lab["k"]] = value
    return found


def main(options: DemoOptions, out: TextIO) -> int:
    """Run the demo on a new event loop; Ctrl-C (SIGINT) or SIGTERM ends it cleanly."""

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await demo(options, out, stop)

    return asyncio.run(run())
