"""Wiring only: configuration -> receivers, pipeline, metrics server; start, run, stop.

``Sidecar`` is the in-process form (tests and embedding use it); ``run`` is ``ragmon run``:
it serves until SIGTERM/SIGINT, then stops accepting, finishes the traces it holds, and
returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import logging
import os
import resource
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from ragmon import __version__
from ragmon.config import Config, parse_listen
from ragmon.conventions import ConventionOptions, read_trace, span_selection
from ragmon.conventions.content import text_dropper
from ragmon.export import server, status
from ragmon.export.exporter import RagMetrics, StatsCollector
from ragmon.groundtruth.feedback import Feedback, FeedbackStore
from ragmon.groundtruth.prober import Probes
from ragmon.groundtruth.relevance import Qrels, read_qrels
from ragmon.judge.sampling import sampler
from ragmon.judge.stage import JudgeStage
from ragmon.model import RagRecord
from ragmon.pipeline.assembly import TraceAssembler
from ragmon.pipeline.queue import Pipeline
from ragmon.receivers import otlp_grpc, otlp_http
from ragmon.receivers.ingest import IngestGate, IngestStats, ReceiverSettings
from ragmon.receivers.listeners import BACKLOG, ByteBudget, Listener, ListenerLimits, ListenerStats
from ragmon.receivers.ratelog import RateLimitedLog, held_back
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import RecordScores, final_ranking, price_calls, score_record

__all__ = ["Sidecar", "run"]

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
    wall: Callable[[], float] = time.time
    """The wall clock: only for timestamps shown (exemplars, ``_created``, start time), never for
    a deadline, window or budget (those follow ``clock``), so a wall-clock step changes no value."""
    own_process: bool = False
    """Whether the process is ragmon's own (``ragmon run``): then a scrape holds the cycle
    collector off while it renders (``server.metrics_handler``)."""

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
        pricer = Pricer.from_config(cfg)
        self.judge = JudgeStage(cfg.judge, self.metrics, pricer, self.clock, self.environ)
        self.probes = Probes.from_config(cfg, self.clock)

        self.feedback = Feedback(
            FeedbackStore(cfg.feedback.retention, cfg.feedback.max_traces, max(cfg.scoring.k), cfg.feedback.max_bytes),
            self.metrics,
            tuple(cfg.scoring.k), self.clock,
        )
        self.history = status.History(max_series=cfg.metrics.max_series)
        self.worst = status.Worst()
        self.coverage = status.Coverage()
        self.metrics.on_judged = self.worst.judged

        def judge(record: RagRecord, scores: RecordScores, now: float) -> None:
            self.feedback.keep(record.trace_id, final_ranking(record), record.service, record.variant, now)
            self.worst.scored(record, scores)
            self.coverage.scored(record, scores)
            probe = scores.probe
            self.judge.observe(record if probe is None else probe.apply(record), now, probe is not None)

        self.pipeline = Pipeline(
            assembler=self.assembler,
            extract=lambda trace: read_trace(trace, options),
            score=lambda record: score_record(record, cfg.scoring.k, pricer, golden, self.probes.take(record.trace_id)),
            price=lambda calls: price_calls(calls.calls, pricer, calls.start_ns),
            metrics=self.metrics,
            after=judge,
            trim=text_dropper(options, self._reads_documents(cfg)),
            clock=self.clock,
            max_queued_spans=cfg.receiver.max_queued_spans,
            max_queued_bytes=cfg.receiver.max_queued_bytes,
        )
        selection = dataclasses.replace(span_selection(options), max_value_chars=cfg.receiver.max_attribute_chars)
        self.receiver_settings = ReceiverSettings(selection, cfg.receiver.max_body_bytes, cfg.receiver.token)
        # each stage reports its own counters, collected at scrape time
        self.registry.register(StatsCollector(self.ingest.collect))
        self.registry.register(StatsCollector(lambda: self.assembler.stats().collect()))
        self.registry.register(StatsCollector(lambda: self.pipeline.stats().collect()))
        self.registry.register(StatsCollector(self.judge.collect))
        if self.probes.probers:
            self.registry.register(StatsCollector(self.probes.collect))
        self.registry.register(StatsCollector(self.feedback.collect))
        self.scrapes = server.ScrapeStats(ByteBudget(cfg.metrics.max_inflight_bytes))
        """/metrics answers being written (their byte budget) and dropped."""
        self._workers = contextlib.AsyncExitStack()
        """The bounded-queue workers, entered by ``start`` and exited, newest first, by ``drain``."""
        self.started_at = self.wall()

    def _reads_documents(self, cfg: Config) -> Callable[[bytes], bool]:
        """Whether the judge stage will read a trace's document text: it sends documents, and the
        trace is in its sample or a probe's (``conventions.content`` drops it for the others)."""
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
            status_page=self.status_page,
            ready=lambda: self.worker is not None and not self.worker.done(),
            after_collect=self._sample_history,
            quiet_gc=self.own_process,
            limits=server.ScrapeLimits.from_config(self.config.metrics),
            stats=self.scrapes,
        )

    async def _sample_history(self, families: Sequence[Metric]) -> None:
        """A scrape's point of the status page's history, when one is due: read from the
        gauge families the scrape has just collected (in a worker thread: they are immutable),
        kept on the loop (the page reads the history there)."""
        now = self.clock()
        if self.history.due(now):
            rolling = await asyncio.to_thread(status.rolling_from_families, families)
            self.history.sample(now, lambda: rolling)

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
            ("traces ignored (not RAG requests)", str(stats.ignored)),
            ("of which model calls alone (tokens and cost counted)", str(stats.model_call_traces)),
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
        notes.extend(self.judge.notes())
        if stats.records and stats.unlabelled == stats.records:
            notes.append("No request carried relevance labels: retrieval quality needs ragmon.relevant_document_ids, a golden set, probes or feedback.")
        return status.render(self.status_snapshot(rows, [*notes, *self.coverage.notes()]))

    def _rolling(self) -> status.Rolling:
        self.metrics.flush()
        return status.read_rolling(self.metrics.gauges, self.metrics.latency, self.clock())

    def status_snapshot(self, rows: list[tuple[str, str]], notes: list[str]) -> status.StatusSnapshot:
        """What the status page shows now (rolling values read from the exporter's windows)."""
        rolling = self._rolling()
        self.history.sample(self.clock(), lambda: rolling)
        shown = sorted(rolling)[: self.config.metrics.max_series]
        judge = self.judge.judge.stats() if self.judge.judge is not None else None
        outcomes: Counter[str] = Counter()
        for (_, outcome), n in (judge.counts.items() if judge else ()):
            outcomes[outcome] += n
        return status.StatusSnapshot(
            rows=rows,
            series=[status.SeriesView(s, v, rolling[s, v], self.history.of(s, v)) for s, v in shown],
            series_hidden=len(rolling) - len(shown),
            received=dict(self.ingest.spans_received),
            rejected=dict(self.ingest.spans_rejected),
            unmeasured=notes,
            conventions=dict(self.coverage.conventions),
            judge=status.JudgeView(
                self.judge.mode, judge.breaker.value if judge else "", judge.cost_usd if judge else 0.0,
                self.config.judge.max_usd_per_hour, dict(outcomes),
            ),
            probes={p.name: (p.last, dict(p.outcomes)) for p in self.probes.probers},
            worst=self.worst.entries(),
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
        limits = ListenerLimits.from_config(cfg.receiver, self._life.caps[1])
        listener = Listener("metrics", app, limits, self._life.listeners, self._life.log, shutdown_timeout=CLOSE_TIMEOUT)
        port = await listener.start(*address)
        self._life.metrics = listener
        return port

    async def start(self) -> None:
        """Start the worker, the receivers and the metrics server; log what was bound."""
        cfg = self.config
        life = self._life
        life.caps = connection_caps(cfg, _open_files_limit())
        self.registry.register(StatsCollector(life.listeners.collect))
        self.registry.register(StatsCollector(self.scrapes.collect))
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
            life.http = await otlp_http.start(
                *http_address, self.receiver_settings, self.pipeline, self.ingest,
                limits=limits, listeners=life.listeners, log=life.log, gate=gate, budget=budget,
            )
            life.http.feedback = self.feedback
            self.ports.http = life.http.port
            summary.append(f"OTLP/HTTP on {http_address[0]}:{life.http.port}")
        else:
            summary.append("OTLP/HTTP off")
        grpc_address = parse_listen(cfg.receiver.grpc)
        if grpc_address is not None:
            life.grpc, port = await otlp_grpc.start(
                *grpc_address, self.receiver_settings, self.pipeline, self.ingest, limits=limits, log=life.log, gate=gate,
                budget=budget,
            )
            self.ports.grpc = port
            summary.append(f"OTLP/gRPC on {grpc_address[0]}:{port}")
        else:
            summary.append("OTLP/gRPC off")
        summary.append(f"ingest token {'required' if cfg.receiver.token else 'off'}, "
                       f"metrics token {'required' if cfg.metrics.token else 'off'}")
        summary.append(f"judge {self.judge.describe()}")
        summary.append(f"golden set {cfg.scoring.golden} ({len(self._golden.by_text)} queries)" if self._golden is not None
                       else "no golden set")
        await self.probes.start()
        probes = [f"{p.name} ({len(p.queries)} queries every {p.interval:g}s)" for p in self.probes.probers]
        summary.append(f"probes {', '.join(probes)}" if probes else "no probes")

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

    async def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Let the worker score every trace held (at most ``timeout`` seconds, logged if cut),
        then wait briefly for judgements in flight."""
        started = time.monotonic()
        pending, scored = self.assembler.stats().traces_pending, self.pipeline.stats().records
        self.pipeline.stop_timeout = timeout
        self.judge.stop_timeout = min(JUDGE_WAIT, timeout)  # "waits briefly for in-flight judgements"
        await self._workers.aclose()  # the pipeline first, then the judge and its sender
        self._life.drained.set()
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
        if self._life.metrics is not None:
            await self._life.metrics.close()
            self._life.metrics = None

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop probing and accepting, let the worker score every trace held, then close the
        metrics server (no linger: ``ragmon run`` adds it)."""
        await self.stop_ingest(min(SHUTDOWN_GRACE, timeout))
        await self.drain(timeout)
        await self.close()


_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _on_loop_error(limiter: RateLimitedLog) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An asyncio exception handler that logs each kind of error at most once per interval
    (out of file descriptors, asyncio would log every failed ``accept``)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "unhandled error in the event loop")
        held = limiter.admit(f"asyncio: {message}")
        if held is None:
            return
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in _RESOURCE_ERRORS:  # no traceback: not a bug
            log.error("%s: %s%s", message, error, held_back(held))
        else:
            loop.default_exception_handler({**context, "message": message + held_back(held)})

    return handle


async def _run(config: Config, files: str = "") -> int:
    stopping, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (hurry if stopping.is_set() else stopping).set()  # a second signal cuts the linger

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    sidecar = Sidecar(config, own_process=True)
    loop.set_exception_handler(_on_loop_error(RateLimitedLog(log)))
    try:
        await sidecar.start()
    except BaseException:
        await sidecar.stop()
        raise
    log.info("ragmon %s running: %s", __version__, "; ".join([*sidecar.summary, *([files] if files else [])]))
    worker = sidecar.worker
    signalled = asyncio.create_task(stopping.wait())
    await asyncio.wait({signalled, *([worker] if worker else [])}, return_when=asyncio.FIRST_COMPLETED)
    if worker is not None and worker.done():
        signalled.cancel()
        error = None if worker.cancelled() else worker.exception()
        log.error("the pipeline stopped unexpectedly: %r", error)
        await sidecar.stop()
        return 1
    started = loop.time()
    linger = config.metrics.linger
    log.info("stopping: no new requests; finishing the traces held (at most %.0fs)", shutdown_bound(linger))
    await sidecar.stop_ingest()
    await sidecar.drain(DRAIN_TIMEOUT)
    if linger > 0 and sidecar.ports.metrics is not None:
        log.info("shutdown: /metrics answers until a scrape has read the final values (at most %gs)", linger)
        scraped = await sidecar.linger(linger, hurry)
        log.info("shutdown: %s", "final values scraped" if scraped else "no scrape came; not waiting longer")
    await sidecar.close()
    log.info("stopped in %.1fs", loop.time() - started)
    return 0


RESERVED_FILES = 2 * BACKLOG + 128
"""Open files kept out of the connection caps' reach: an accept burst on each aiohttp listener
(asyncio accepts up to the backlog before a refused or evicted connection is closed), logs,
sockets to the judge, files."""


_NR_OPEN = 1 << 20
"""Linux's default ceiling on open files per process (``fs.nr_open``)."""


def _open_files_limit() -> int | None:
    """The soft limit on open files; None when unlimited or unknown."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def connection_caps(config: Config, open_files: int | None) -> tuple[int, int]:
    """The connection caps of each OTLP receiver and of the metrics server: the configured
    ones, lowered (with a warning) when together they could use up ``open_files`` and leave
    /healthz unable to accept."""
    receiver, metrics = config.receiver.max_connections, config.metrics.max_connections
    if open_files is None or 2 * receiver + metrics + RESERVED_FILES <= open_files:
        return receiver, metrics
    room = max(open_files - RESERVED_FILES, 48)
    metrics_cap = min(metrics, max(16, room // 8))
    receiver_cap = min(receiver, max(16, (room - metrics_cap) // 2))
    log.warning(
        "the open-file limit (%d) is too low for receiver.max_connections = %d and "
        "metrics.max_connections = %d: using %d and %d (raise the limit: ulimit -n)",
        open_files, receiver, metrics, receiver_cap, metrics_cap)
    return receiver_cap, metrics_cap


def raise_open_files_limit() -> str:
    """Raise the soft limit on open files to the hard limit (connections are files); says what
    it is now, for the start-up line (a failure is logged as a warning)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = _NR_OPEN if hard == resource.RLIM_INFINITY else hard  # the kernel caps "unlimited"
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit: %s", exc)
        return f"open-file limit {_open_files_limit() or 'unlimited'}"
    now = _open_files_limit()
    shown = "unlimited" if now is None else str(now)
    return f"open-file limit {shown if now == soft else f'raised from {soft} to {shown}'}"


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections in ``ragmon run`` (CPython's default: 700)."""


SWITCH_INTERVAL = 0.001
"""Seconds a thread holds the GIL while another waits for it, in ``ragmon run`` (CPython's
default: 0.005). A scrape renders in a worker thread; each time the event loop wakes (every
socket read and write of an OTLP request) it waits for the GIL at most this long."""


def tune_gc() -> None:
    """Collect less often: each span allocates a few short-lived objects, nearly all freed by
    reference counting; at CPython's default threshold the cycle collector took ~14% of the
    pipeline's time (bench/ingest.py). Objects alive at start-up (modules, config) are frozen
    out of every collection. For ``ragmon run`` only: an embedding process keeps its own policy."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
"""glibc's ``mallopt`` parameters (malloc.h)."""
MALLOC_ARENAS = 2
MALLOC_MMAP_THRESHOLD = 128 * 1024
MALLOC_TRIM_THRESHOLD = 1024 * 1024


def tune_malloc() -> str:
    """Make the C allocator give freed memory back, for ``ragmon run`` (glibc only; elsewhere
    nothing changes). Request bodies, decoded batches and rendered scrapes are large and
    short-lived, and some are made in worker threads: with glibc's defaults each thread gets
    an arena of its own (up to 8 a core) and, once a large block has been freed, the threshold
    for mapping large blocks rises up to 32 MiB, so later ones come from the arenas and their
    freed pages stay in the process (peak RSS after a burst stayed high: docs/reliability.md).
    Fixed: ``MALLOC_ARENAS`` arenas, blocks from ``MALLOC_MMAP_THRESHOLD`` mapped (and unmapped
    when freed), free memory past ``MALLOC_TRIM_THRESHOLD`` at the top of the heap returned.
    The environment's ``MALLOC_*_`` variables win. Says what it did, for the start-up line."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "malloc as is"
    for option, value, variable in (
        (_M_ARENA_MAX, MALLOC_ARENAS, "MALLOC_ARENA_MAX"),
        (_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
        (_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_"),
    ):
        if variable not in os.environ and not mallopt(option, value):
            return "malloc as is"
    return f"malloc arenas {MALLOC_ARENAS}"


def run(config: Config) -> int:
    """``ragmon run``: serve until SIGTERM or SIGINT; returns the exit code."""
    malloc = tune_malloc()
    tune_gc()
    sys.setswitchinterval(SWITCH_INTERVAL)
    files = raise_open_files_limit()
    return asyncio.run(_run(config, f"{files}; {malloc}"))
