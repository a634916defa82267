"""Wiring only: configuration -> receivers, pipeline, metrics server; start, run, stop.

``Sidecar`` is the in-process form (tests and embedding use it); ``run`` is ``ragmon run``:
it serves until SIGTERM/SIGINT, then stops accepting, finishes the traces it holds, and
returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hmac
import html
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ragmon import __version__
from ragmon.assembly import TraceAssembler
from ragmon.config import Config, parse_duration, parse_listen
from ragmon.conventions import ConventionOptions, extract_rag_record, span_selection
from ragmon.exporter import RagMetrics, StatsCollector, self_metrics
from ragmon.judge.stage import JudgeStage
from ragmon.model import RagRecord
from ragmon.relevance import Qrels, read_qrels
from ragmon.pipeline import Pipeline
from ragmon.pricing import Pricer
from ragmon.probe import Probes
from ragmon.scoring import RecordScores, score_record
from ragmon.receivers import otlp_grpc, otlp_http
from ragmon.receivers.ingest import IngestStats, ReceiverSettings

__all__ = ["Sidecar", "run"]

log = logging.getLogger("ragmon")


@dataclass(slots=True)
class _Bound:
    http: int | None = None
    grpc: int | None = None
    metrics: int | None = None


@dataclass
class Sidecar:
    """ragmon's sidecar in-process: ``await start()``, then ``await stop()``.

    ``clock`` is monotonic seconds (injectable for tests). Bound ports are in ``ports``
    after start (a configured port of 0 picks a free one).
    """

    config: Config = field(default_factory=Config)
    clock: Callable[[], float] = time.monotonic
    ports: _Bound = field(default_factory=_Bound)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """Where the judge's key and base URL are read from (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""

    def __post_init__(self) -> None:
        cfg = self.config
        self.registry = CollectorRegistry(auto_describe=True)
        self.ingest = IngestStats()
        options = ConventionOptions.from_config(cfg.scoring)
        self.metrics = RagMetrics(
            self.registry,
            ks=cfg.scoring.k,
            windows=[parse_duration(w) for w in cfg.scoring.windows],
            max_label_values=cfg.metrics.max_label_values,
            clock=self.clock,
        )
        self.assembler = TraceAssembler.from_config(cfg.traces)
        golden: Qrels | None = read_qrels(cfg.scoring.golden) if cfg.scoring.golden else None
        pricer = Pricer.from_config(cfg)
        self.judge = JudgeStage(cfg.judge, self.metrics, pricer, self.clock, self.environ)
        self.probes = Probes.from_config(cfg, self.clock)

        def judge(record: RagRecord, scores: RecordScores, now: float) -> None:
            probe = scores.probe
            self.judge.observe(record if probe is None else probe.apply(record), now, probe is not None)

        self.pipeline = Pipeline(
            assembler=self.assembler,
            extract=lambda trace: extract_rag_record(trace, options),
            score=lambda record: score_record(record, cfg.scoring.k, pricer, golden, self.probes.take(record.trace_id)),
            metrics=self.metrics,
            after=judge,
            clock=self.clock,
            max_queued_spans=cfg.receiver.max_queued_spans,
            max_queued_bytes=cfg.receiver.max_queued_bytes,
        )
        selection = dataclasses.replace(span_selection(options), max_value_chars=cfg.receiver.max_attribute_chars)
        self.receiver_settings = ReceiverSettings(selection, cfg.receiver.max_body_bytes, cfg.receiver.token)
        self.registry.register(
            StatsCollector(lambda: self_metrics(self.ingest, self.assembler.stats(), self.pipeline.stats()))
        )
        self.registry.register(StatsCollector(self.judge.collect))
        if self.probes.probers:
            self.registry.register(StatsCollector(self.probes.collect))
        self._runners: list[web.AppRunner] = []
        self._grpc: grpc.aio.Server | None = None
        self.worker: asyncio.Task[None] | None = None
        self.started_at = time.time()

    # -- HTTP: /metrics, /healthz, /readyz, / ----------------------------------------------------

    def metrics_app(self) -> web.Application:
        """The aiohttp app serving ``/metrics``, ``/healthz``, ``/readyz`` and the status page."""
        token = self.config.metrics.token
        expected = f"Bearer {token}".encode() if token else None

        async def metrics(request: web.Request) -> web.Response:
            if expected is not None and not hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected):
                return web.Response(status=401, text="missing or wrong bearer token\n")
            encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
            body = encoder(self.registry)
            return web.Response(body=body, headers={"Content-Type": content_type})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def readyz(_: web.Request) -> web.Response:
            if self.worker is None or self.worker.done():
                return web.Response(status=503, text="not running\n")
            return web.Response(text="ready\n")

        async def status(_: web.Request) -> web.Response:
            return web.Response(text=self.status_page(), content_type="text/html")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/", status)
        return app

    def status_page(self) -> str:
        """A small HTML page: what ragmon listens on and what it has seen."""
        stats = self.pipeline.stats()
        assembly = self.assembler.stats()
        rows = [
            ("version", __version__),
            ("OTLP/HTTP", f"port {self.ports.http}" if self.ports.http else "off"),
            ("OTLP/gRPC", f"port {self.ports.grpc}" if self.ports.grpc else "off"),
            ("spans received", str(sum(self.ingest.spans_received.values()))),
            ("traces pending", str(assembly.traces_pending)),
            ("requests scored", str(stats.records)),
            ("traces ignored (no retrieval or LLM span)", str(stats.ignored)),
            ("retrievals without relevance", str(stats.unlabelled)),
            ("judge", self.judge.mode),
            ("probes", ", ".join(p.name for p in self.probes.probers) or "none"),
        ]
        notes = []
        if stats.without_content:
            notes.append(
                f"{stats.without_content} of {stats.records} requests carried no query or answer text: "
                "their instrumentation records no message content (OpenTelemetry GenAI instrumentation's "
                "default), so only latency, tokens and cost can be measured for them."
            )
        if stats.records and stats.unlabelled == stats.records:
            notes.append("No request carried relevance labels: retrieval quality needs ragmon.relevant_document_ids, a golden set, probes or feedback.")
        body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
        note = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
        return f"<!doctype html><title>ragmon</title><h1>ragmon</h1><table>{body}</table>{note}<p><a href='/metrics'>/metrics</a></p>\n"

    # -- lifecycle ---------------------------------------------------------------------------

    async def _serve(self, app: web.Application, address: tuple[str, int]) -> int:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, address[0], address[1]).start()
        self._runners.append(runner)
        return int(runner.addresses[0][1])

    async def start(self) -> None:
        """Start the worker, the receivers and the metrics server; log what was bound."""
        cfg = self.config
        await self.judge.start()
        log.info("judge: %s", self.judge.mode)
        self.worker = asyncio.create_task(self.pipeline.run(), name="ragmon-pipeline")
        metrics_address = parse_listen(cfg.metrics.listen)
        if metrics_address is not None:
            self.ports.metrics = await self._serve(self.metrics_app(), metrics_address)
            log.info("metrics on %s:%d", metrics_address[0], self.ports.metrics)
        http_address = parse_listen(cfg.receiver.http)
        if http_address is not None:
            runner, port = await otlp_http.start(*http_address, self.receiver_settings, self.pipeline, self.ingest)
            self._runners.append(runner)
            self.ports.http = port
            log.info("OTLP/HTTP on %s:%d", http_address[0], port)
        grpc_address = parse_listen(cfg.receiver.grpc)
        if grpc_address is not None:
            self._grpc, port = await otlp_grpc.start(*grpc_address, self.receiver_settings, self.pipeline, self.ingest)
            self.ports.grpc = port
            log.info("OTLP/gRPC on %s:%d", grpc_address[0], port)
        await self.probes.start()
        for prober in self.probes.probers:
            log.info("probe %s: %d queries every %s", prober.name, len(prober.queries), prober.interval)

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop probing and accepting, let the worker score every trace held, then close the servers."""
        await self.probes.stop(min(1.0, timeout))
        await self.pipeline.shutdown()
        if self.worker is not None and not self.worker.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.worker), timeout)
            except TimeoutError:
                log.error("the pipeline did not finish within %.0fs; stopping anyway", timeout)
                self.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.worker
        await self.judge.stop(min(5.0, timeout))  # "waits briefly for in-flight judgements"
        if self._grpc is not None:
            await self._grpc.stop(1.0)
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()


async def _run(config: Config) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    sidecar = Sidecar(config)
    try:
        await sidecar.start()
    except BaseException:
        await sidecar.stop()
        raise
    log.info("ragmon %s running", __version__)
    worker = sidecar.worker
    signalled = asyncio.create_task(stopping.wait())
    await asyncio.wait({signalled, *([worker] if worker else [])}, return_when=asyncio.FIRST_COMPLETED)
    if worker is not None and worker.done():
        signalled.cancel()
        error = None if worker.cancelled() else worker.exception()
        log.error("the pipeline stopped unexpectedly: %r", error)
        await sidecar.stop()
        return 1
    log.info("stopping: finishing the traces held")
    await sidecar.stop()
    return 0


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections in ``ragmon run`` (CPython's default: 700)."""


def tune_gc() -> None:
    """Collect less often: each span allocates a few short-lived objects, nearly all freed by
    reference counting; at CPython's default threshold the cycle collector took ~14% of the
    pipeline's time (bench/ingest.py). Objects alive at start-up (modules, config) are frozen
    out of every collection. For ``ragmon run`` only: an embedding process keeps its own policy."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def run(config: Config) -> int:
    """``ragmon run``: serve until SIGTERM or SIGINT; returns the exit code."""
    tune_gc()
    return asyncio.run(_run(config))
