"""Wiring only: configuration -> receivers, pipeline, consumers, metrics server; start, stop.

``Sidecar`` builds each stage from the configuration and connects them: receivers offer span
batches to the pipeline (a ``SpanSink``); the pipeline hands each scored record to the exporter
(its ``RecordSink``) and then to its ``RecordConsumer``s in order (the feedback store, the status
page's worst requests and coverage, the judge stage); the judge stage hands each judgement to
its ``JudgementSink``s (the exporter, the worst requests). ``ragmon.sidecar.process`` runs it
as ``ragmon run``; ``ragmon.sidecar.inprocess`` inside an application.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry

from ragmon.config import Config, parse_listen
from ragmon.conventions import ConventionOptions, TraceReader, span_selection
from ragmon.conventions.content import document_text
from ragmon.export import server, status
from ragmon.export.exporter import RagMetrics, StatsCollector
from ragmon.groundtruth.feedback import Feedback, FeedbackStore
from ragmon.groundtruth.prober import Probes
from ragmon.formats.relevance import Qrels, read_qrels
from ragmon.judge.sampling import sampler
from ragmon.judge.stage import JudgeStage
from ragmon.pipeline.assembly import TraceAssembler
from ragmon.pipeline.queue import Pipeline
from ragmon.receivers import otlp_grpc, otlp_http
from ragmon.receivers.ingest import IngestGate, IngestStats, ReceiverSettings
from ragmon.net.listeners import ByteBudget, Listener, ListenerLimits, ListenerStats, check_free, listen_error
from ragmon.net.ratelog import RateLimitedLog
from ragmon.net.routes import Unrouted
from ragmon.otlp.decode import DECODER
from ragmon.compiled import pipeline
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import RecordScorer
from ragmon.sidecar.openfiles import connection_caps, open_files_limit
from ragmon.sidecar.snapshot import Ports, StatusBoard

__all__ = ["CLOSE_TIMEOUT", "DRAIN_TIMEOUT", "JUDGE_WAIT", "SHUTDOWN_GRACE", "Sidecar", "shutdown_bound"]

log = logging.getLogger("ragmon")


SHUTDOWN_GRACE = 1.0
"""Seconds OTLP requests in flight at SIGTERM get to finish (then 503 ``shutting_down``)."""
DRAIN_TIMEOUT = 10.0
"""Seconds ``ragmon run`` gives the pipeline to score the traces it holds at SIGTERM."""
JUDGE_WAIT = 5.0
"""Seconds to wait for judgements in flight at shutdown."""
CLOSE_TIMEOUT = 1.0
"""Seconds a request in a metrics handler gets when the metrics server closes."""


def shutdown_bound(linger: float) -> float:
    """The longest ``ragmon run`` takes from SIGTERM to exit, in seconds: probes stop (1), the
    OTLP listeners close (aiohttp waits its shutdown timeout twice: for handlers to finish,
    then for them to be cancelled), the drain, the judge, the linger, the metrics server."""
    listeners = max(2 * otlp_http.SHUTDOWN_TIMEOUT, SHUTDOWN_GRACE)
    return 1.0 + listeners + DRAIN_TIMEOUT + JUDGE_WAIT + linger + 2 * CLOSE_TIMEOUT


@dataclass
class _Lifecycle:
    """What ``Sidecar`` keeps to start and stop its listeners."""

    listeners: ListenerStats = field(default_factory=ListenerStats)
    log: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))
    http: otlp_http.HttpReceiver | None = None
    grpc: grpc.aio.Server | None = None
    metrics: Listener | None = None
    history: asyncio.Task[None] | None = None
    """The status page's history timer (``Sidecar._sample_history``)."""
    prices: asyncio.Future[None] | None = None
    """The price table loading in a thread once the listeners are up (``Sidecar._warm_prices``)."""
    caps: tuple[int, int] = (0, 0)
    """Connection caps in force: each OTLP receiver's, the metrics server's."""
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the drain has finished: scrapes from then on read the final values."""
    scraped: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a ``/metrics`` scrape begun after the drain has been written out."""

    def final_scrape_middleware(self) -> Any:
        """Sets ``scraped`` once a ``/metrics`` answer begun after the drain is written out."""

        @web.middleware
        async def final_scrape(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        ) -> web.StreamResponse:
            after_drain = self.drained.is_set()
            response = await handler(request)
            if after_drain and request.path == "/metrics" and response.status == 200 and server.CUT not in response:
                await response.prepare(request)
                await response.write_eof()
                self.scraped.set()
            return response

        return final_scrape


@dataclass
class Sidecar:
    """ragmon's sidecar in-process: ``await start()``, then ``await stop()``.

    ``clock`` is monotonic seconds (injectable for tests). Bound ports are in ``ports``
    after start (a configured port of 0 picks a free one).
    """

    config: Config = field(default_factory=Config)
    clock: Callable[[], float] = time.monotonic
    ports: Ports = field(default_factory=Ports)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """Where the judge's key and base URL are read from (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""
    wall: Callable[[], float] = time.time
    """The wall clock: only for timestamps shown (exemplars, ``_created``, start time), never for
    a deadline, window or budget (those follow ``clock``), so a wall-clock step changes no value."""
    history_interval: float = status.HISTORY_INTERVAL
    """Seconds between two points of the status page's history (its timer)."""
    own_process: bool = False
    """Whether the process is ragmon's own (``ragmon run``): then a scrape holds the cycle
    collector off while it renders (``server.metrics_handler``), and the price table, loaded
    once the ports are open, is frozen out of the collector's reach as the rest of start-up was
    (``process.tune_gc``): a full collection scans what ingest keeps, not start-up's objects."""

    def __post_init__(self) -> None:
        cfg = self.config
        self.registry = CollectorRegistry(auto_describe=True)
        self.ingest = IngestStats()
        options = ConventionOptions.from_config(cfg.scoring, cfg.traces)
        self.metrics = RagMetrics(
            self.registry,
            ks=cfg.scoring.k,
            windows=cfg.scoring.windows,
            max_label_values=cfg.metrics.max_label_values,
            max_label_chars=cfg.metrics.max_label_chars,
            max_series=cfg.metrics.max_series,
            clock=self.clock,
            wall=self.wall,
            max_duration=cfg.traces.max_duration,
        )
        self.assembler = TraceAssembler.from_config(cfg.traces)
        golden: Qrels | None = read_qrels(cfg.scoring.golden) if cfg.scoring.golden else None
        self._golden = golden
        self.pricer = pricer = Pricer.from_config(cfg)
        self.history = status.History(interval=self.history_interval, max_series=cfg.metrics.max_series)
        self.worst = status.Worst()
        self.coverage = status.Coverage()
        self.judge = JudgeStage(cfg.judge, (self.metrics, self.worst), cfg.scoring.k, pricer, self.clock, self.environ)
        self.probes = Probes.from_config(cfg, self.clock)

        self.feedback = Feedback(
            FeedbackStore(cfg.feedback.retention, cfg.feedback.max_traces, max(cfg.scoring.k), cfg.feedback.max_bytes),
            self.metrics,
            tuple(cfg.scoring.k), self.clock,
        )
        self.pipeline = Pipeline(
            assembler=self.assembler,
            reader=TraceReader(options),
            scorer=RecordScorer(tuple(cfg.scoring.k), pricer, golden, self.probes),
            metrics=self.metrics,
            consumers=(self.feedback, self.worst, self.coverage, self.judge),
            clock=self.clock,
            max_queued_spans=cfg.receiver.max_queued_spans,
            max_queued_bytes=cfg.receiver.max_queued_bytes,
        )
        selection = dataclasses.replace(
            span_selection(options),
            max_value_chars=cfg.receiver.max_attribute_chars,
            document_text=document_text(options, self._reads_documents(cfg)),
        )
        self.receiver_settings = ReceiverSettings(selection, cfg.receiver.max_body_bytes, cfg.receiver.token)
        # each stage reports its own counters, collected at scrape time
        self.registry.register(StatsCollector(self.ingest.collect))
        self.registry.register(StatsCollector(lambda: self.assembler.stats().collect()))
        self.registry.register(StatsCollector(lambda: self.pipeline.stats().collect()))
        self.registry.register(StatsCollector(self.judge.collect))
        if self.probes.probers:
            self.registry.register(StatsCollector(self.probes.collect))
        self.registry.register(StatsCollector(self.feedback.collect))
        self.unrouted = Unrouted(log, clock=self.clock)
        """Requests to a path or with a method no listener serves (counted, answered with the URL to use)."""
        self.scrapes = server.ScrapeStats(ByteBudget(cfg.metrics.max_inflight_bytes))
        """/metrics answers being written (their byte budget) and dropped."""
        self._workers = contextlib.AsyncExitStack()
        """The bounded-queue workers, entered by ``start`` and exited, newest first, by ``drain``."""
        self.started_at = self.wall()
        self.board = StatusBoard(
            cfg, self.clock, self.ports, self.ingest, self.assembler, self.pipeline, self.metrics, self.judge,
            self.probes, self.history, self.worst, self.coverage,
        )
        """What the status page shows (``ragmon.sidecar.snapshot``)."""

    def _reads_documents(self, cfg: Config) -> Callable[[bytes], bool]:
        """Whether the judge stage will read a trace's document text: it sends documents, and the
        trace is in its sample or a probe's (the decoders leave it out of the others: ``conventions.content``)."""
        in_sample = sampler(cfg.judge.sample_rate)
        send = cfg.judge.send_documents
        return lambda trace_id: send and (in_sample(trace_id) or self.probes.expects(trace_id))

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The pipeline's worker task once started."""
        return self.pipeline.worker

    # -- HTTP: /metrics, /healthz, /readyz, / ----------------------------------------------------

    def metrics_app(self) -> web.Application:
        """The aiohttp app serving ``/metrics``, ``/healthz``, ``/readyz`` and the status page
        (``ragmon.export.server``): ready while the worker runs."""
        return server.metrics_app(
            self.registry,
            token=self.config.metrics.token,
            status_page=self.board.page,
            ready=lambda: self.worker is not None and not self.worker.done(),
            quiet_gc=self.own_process,
            limits=server.ScrapeLimits.from_config(self.config.metrics),
            stats=self.scrapes,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    summary: list[str] = field(default_factory=list, init=False)
    """What ``start`` set up, for the one start-up log line: where it listens, what is on or off."""
    _life: _Lifecycle = field(default_factory=_Lifecycle, init=False, repr=False)
    """Listeners, shutdown state and connection counters (set up by ``start``)."""

    async def _serve(self, app: web.Application, address: tuple[str, int]) -> int:
        """Serve the metrics app behind ``metrics.max_connections`` and the receiver timeouts;
        after the drain, a completed ``/metrics`` scrape ends the linger."""
        cfg = self.config
        app.middlewares.append(self._life.final_scrape_middleware())
        app.middlewares.append(self.unrouted.middleware("metrics", server.misrouted(self._otlp_address)))
        limits = ListenerLimits.from_config(cfg.receiver, self._life.caps[1])
        listener = Listener("metrics", app, limits, self._life.listeners, self._life.log, shutdown_timeout=CLOSE_TIMEOUT)
        try:
            port = await listener.start(*address)
        except OSError as exc:
            raise listen_error("metrics.listen", *address, exc) from None
        self._life.metrics = listener
        return port

    async def _sample_history(self) -> None:
        """The status page's history: one point of every rolling value per interval, on a timer
        (independent of page views and scrapes)."""
        while True:
            await asyncio.sleep(self.history.interval)
            try:
                self.board.sample_history()
            except Exception:  # a bug here must not end the history for good, nor anything else
                log.exception("could not sample the status page's history")

    def _otlp_address(self) -> tuple[str, int] | None:
        """The OTLP/HTTP receiver's listen host and bound port; None while it is off."""
        address = parse_listen(self.config.receiver.http)
        return None if address is None or self.ports.http is None else (address[0], self.ports.http)

    async def start(self) -> None:
        """Start the worker, the receivers and the metrics server; log what was bound."""
        cfg = self.config
        life = self._life
        addresses = {
            "metrics.listen": parse_listen(cfg.metrics.listen),
            "receiver.http": parse_listen(cfg.receiver.http),
            "receiver.grpc": parse_listen(cfg.receiver.grpc),
        }
        for setting, address in addresses.items():  # before any worker runs: a busy port is one line, nothing to stop
            if address is not None:
                check_free(setting, *address)
        life.caps = connection_caps(cfg, open_files_limit())
        self.registry.register(StatsCollector(life.listeners.collect))
        self.registry.register(StatsCollector(self.scrapes.collect))
        self.registry.register(StatsCollector(self.unrouted.collect))
        await self._workers.enter_async_context(self.judge)
        await self._workers.enter_async_context(self.pipeline)
        summary = self.summary
        metrics_address = parse_listen(cfg.metrics.listen)
        if metrics_address is not None:
            self.ports.metrics = await self._serve(self.metrics_app(), metrics_address)
            summary.append(f"metrics on {metrics_address[0]}:{self.ports.metrics}")
        else:
            summary.append("metrics off")
        limits = ListenerLimits.from_config(cfg.receiver, life.caps[0])
        # shared: at most its slots of requests are decoded at once, whatever the protocol, each
        # within half the in-flight budget (decoding takes at most that budget again)
        gate = IngestGate(slot_bytes=max(1, cfg.receiver.max_inflight_bytes // IngestGate.SLOTS))
        budget = ByteBudget(cfg.receiver.max_inflight_bytes, self.clock)  # shared: bytes held, whatever the protocol
        http_address = parse_listen(cfg.receiver.http)
        if http_address is not None:
            otlp_app = web.Application(middlewares=[self.unrouted.middleware("otlp_http", otlp_http.misrouted)])
            try:
                life.http = await otlp_http.start(
                    *http_address, self.receiver_settings, self.pipeline, self.ingest, otlp_app,
                    limits=limits, listeners=life.listeners, log=life.log, gate=gate, budget=budget,
                )
            except OSError as exc:
                raise listen_error("receiver.http", *http_address, exc) from None
            life.http.feedback = self.feedback
            self.ports.http = life.http.port
            summary.append(f"OTLP/HTTP on {http_address[0]}:{life.http.port}")
        else:
            summary.append("OTLP/HTTP off")
        grpc_address = parse_listen(cfg.receiver.grpc)
        if grpc_address is not None:
            try:
                life.grpc, port = await otlp_grpc.start(
                    *grpc_address, self.receiver_settings, self.pipeline, self.ingest, limits=limits, log=life.log, gate=gate,
                    budget=budget,
                )
            except OSError as exc:  # grpcio says only that the bind failed: ask the address why
                check_free("receiver.grpc", *grpc_address)
                raise listen_error("receiver.grpc", *grpc_address, exc) from None
            self.ports.grpc = port
            summary.append(f"OTLP/gRPC on {grpc_address[0]}:{port}")
        else:
            summary.append("OTLP/gRPC off")
        summary.append(f"ingest token {'required' if cfg.receiver.token else 'off'}, "
                       f"metrics token {'required' if cfg.metrics.token else 'off'}")
        summary.append(f"decoder {DECODER}, pipeline {pipeline()}")
        summary.append(f"judge {self.judge.describe()}")
        summary.append(f"golden set {cfg.scoring.golden} ({len(self._golden.by_text)} queries)" if self._golden is not None
                       else "no golden set")
        await self.probes.start()
        life.history = asyncio.create_task(self._sample_history(), name="ragmon status history")
        life.prices = asyncio.get_running_loop().run_in_executor(None, self._warm_prices)
        probes = [f"{p.name} ({len(p.queries)} queries every {p.interval:g}s)" for p in self.probes.probers]
        summary.append(f"probes {', '.join(probes)}" if probes else "no probes")

    def _warm_prices(self) -> None:
        """Load genai-prices' table (~0.2 s of imports) in a thread after start, not before the
        ports open: no call is priced before a trace's grace has passed, and a lookup that comes
        first waits for the load (``Pricer.warm``). A failure is logged; lookups try again."""
        try:
            self.pricer.warm()
        except Exception:  # a broken install: every lookup will raise it again, where it is counted
            log.exception("the genai-prices table did not load")
        if self.own_process:
            gc.freeze()  # the table lives as long as the process (``own_process``)

    async def stop_ingest(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop probing and accepting OTLP: listening sockets closed, new requests answered 503
        ``shutting_down``; requests already in flight get ``grace`` seconds to finish."""
        life = self._life
        await self.probes.stop(min(1.0, grace))
        if life.http is not None:
            if life.http.listener is not None:
                life.http.listener.stop_accepting()
            life.http.begin_shutdown(grace)
        closing = []
        if life.grpc is not None:
            closing.append(life.grpc.stop(grace))
            life.grpc = None
        if life.http is not None:
            closing.append(life.http.close())
            life.http = None
        await asyncio.gather(*closing)

    async def drain(self, timeout: float = DRAIN_TIMEOUT, *, quiet: bool = False) -> None:
        """Let the worker score every trace held (at most ``timeout`` seconds, logged if cut),
        then wait briefly for judgements in flight."""
        started = time.monotonic()
        pending, scored = self.assembler.stats().traces_pending, self.pipeline.stats().records
        self.pipeline.stop_timeout = timeout
        self.judge.stop_timeout = min(JUDGE_WAIT, timeout)  # "waits briefly for in-flight judgements"
        await self._workers.aclose()  # the pipeline first, then the judge and its sender
        self._life.drained.set()
        if not quiet:
            log.info("shutdown: drained in %.1fs (%d trace(s) were held; %d scored)",
                     time.monotonic() - started, pending, self.pipeline.stats().records - scored)

    async def linger(self, seconds: float, cut: asyncio.Event | None = None) -> bool:
        """After ``drain``: keep serving ``/metrics`` until one scrape has read the final values
        (True), ``seconds`` pass or ``cut`` is set (False)."""
        life = self._life
        if seconds <= 0 or life.metrics is None:
            return False
        waits = {asyncio.ensure_future(life.scraped.wait())}
        if cut is not None:
            waits.add(asyncio.ensure_future(cut.wait()))
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        return life.scraped.is_set()

    async def close(self) -> None:
        """Close the metrics server (requests in a handler get ``CLOSE_TIMEOUT``)."""
        if self._life.history is not None:
            self._life.history.cancel()
            self._life.history = None
        if self._life.metrics is not None:
            await self._life.metrics.close()
            self._life.metrics = None

    async def stop(self, timeout: float = 30.0, *, quiet: bool = False) -> None:
        """Stop probing and accepting, let the worker score every trace held, then close the
        metrics server (no linger: ``ragmon run`` adds it). ``quiet``: no drain line (a start
        that failed has nothing to report)."""
        await self.stop_ingest(min(SHUTDOWN_GRACE, timeout))
        await self.drain(timeout, quiet=quiet)
        await self.close()

