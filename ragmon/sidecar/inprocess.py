"""In-process mode: a ``SpanProcessor`` an application adds to its own ``TracerProvider``.

It receives spans from the OpenTelemetry SDK instead of the wire and runs the sidecar itself
(``ragmon.sidecar.wiring.Sidecar``: the same pipeline, scoring, judge and exporter, so the same numbers)
on an event loop in a background thread, with no OTLP listener. Its metrics are served on
``serve`` ("host:port", the sidecar's metrics server) or registered into the application's
prometheus_client ``registry`` (then the app's own ``/metrics`` shows them), or both.

``on_end`` never blocks the application: it converts the ``ReadableSpan`` to a ragmon ``Span``
(only the attributes the conventions read, bounded and sized as the OTLP decoders do:
``ragmon.otlp.decode.span_from_values``) and appends it to a buffer bounded by
``receiver.max_queued_spans`` and ``receiver.max_queued_bytes``. The background loop hands the
buffer to the pipeline every ``HAND_OVER`` seconds. A span that finds the buffer or the
pipeline's queue full is dropped and counted in
``ragmon_spans_rejected_total{protocol="inprocess",reason="overloaded"}`` (no exporter to retry);
spans handed over count in ``ragmon_spans_received_total{protocol="inprocess"}``. A resource's
kept attributes are counted once per trace and hand-over (as the decoders count them once per
trace and body: ``ragmon.otlp.decode``).

A scrape of the application's ``registry`` never waits on ragmon's loop for more than
``FRESH_WAIT``, and never raises into the application (a failure is logged; that scrape then
lacks ragmon's families). ragmon's state is only read on its loop, so a scrape asks the loop
to collect its families (one such request at a time: while one is pending, scrapes do not
wait) and is served the most recent families collected there: those it asked for if they are
ready within ``FRESH_WAIT`` (an idle loop takes 1-3 ms), else those collected for an earlier
scrape, at start or at the end of ``force_flush``. While the loop keeps up (a collection per
scrape interval), what a scrape shows is thus at most one scrape interval old; after
``force_flush`` it shows everything flushed. A collection that started later replaces one that
started earlier, never the reverse, so values never go back. One collection may be served to
any number of scrapes, from any thread: its samples (``DeferredFamily``: made on the first read,
then kept) are made once, under a lock, by the first scrape that reads it; so the latest
collection, samples made, is held between scrapes (about the objects one scrape builds). Once
ragmon has stopped, a scrape collects its final values directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ragmon.config import Config
from ragmon.export.server import collect_families
from ragmon.model import Offer, Span
from ragmon.otlp.decode import SharedResource, kept_resource
from ragmon.pipeline.queue import PipelineStats
from ragmon.receivers.inprocess import PROTOCOL, to_span
from ragmon.sidecar.wiring import DRAIN_TIMEOUT, Sidecar

__all__ = ["FRESH_WAIT", "HAND_OVER", "RagmonSpanProcessor"]

log = logging.getLogger("ragmon")

HAND_OVER = 0.05
"""Seconds between two hand-overs of the buffered spans to the pipeline."""
FRESH_WAIT = 0.005
"""Seconds a scrape of the application's registry waits for families fresher than the latest."""
_POLL = 0.005


def _done(stats: PipelineStats) -> int:
    """Traces the worker has finished with: scored, ignored or dropped."""
    return stats.records + stats.ignored + sum(stats.dropped.values())


class _Forward(Collector):
    """The processor's families for the application's registry (``RagmonSpanProcessor.collect``)."""

    def __init__(self, processor: RagmonSpanProcessor) -> None:
        self._processor = processor

    def collect(self) -> Iterator[Metric]:
        yield from self._processor.collect()


class _Collected:
    """Families collected on ragmon's loop (``started``: the number of the collection, in the
    order they started), served to any number of scrapes from any thread. Their samples
    (``DeferredFamily``, made from values copied at collection) are made once, under a lock,
    by the first scrape that serves them; from then on the families are only read."""

    __slots__ = ("_families", "_lock", "_ready", "started")

    def __init__(self, families: list[Metric], started: int) -> None:
        self._families = families
        self._lock = threading.Lock()
        self._ready = False
        self.started = started

    def families(self) -> list[Metric]:
        """The families, every sample made."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    for family in self._families:
                        _ = family.samples  # a DeferredFamily makes them now, and keeps them
                    self._ready = True
        return list(self._families)


class RagmonSpanProcessor(SpanProcessor):
    """ragmon in-process: ``provider.add_span_processor(RagmonSpanProcessor(config, registry=REGISTRY))``.

    ``config`` is the sidecar's (``receiver.http``/``grpc`` are ignored; ``metrics.listen`` is
    replaced by ``serve``, "" for none). ``clock`` (monotonic seconds) and ``environ`` (the
    judge's ``OPENAI_*``) as ``Sidecar``'s. Starts at once; ``shutdown`` scores every trace held.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        registry: CollectorRegistry | None = None,
        serve: str = "",
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        cfg = config or Config()
        cfg = dataclasses.replace(
            cfg,
            receiver=dataclasses.replace(cfg.receiver, http="", grpc=""),
            metrics=dataclasses.replace(cfg.metrics, listen=serve),
        )
        self.sidecar = Sidecar(cfg, clock=clock, environ=dict(os.environ if environ is None else environ))
        self._selection = self.sidecar.receiver_settings.selection
        self._max_spans = cfg.receiver.max_queued_spans
        self._max_bytes = cfg.receiver.max_queued_bytes
        self._lock = threading.Lock()
        self._buffer: list[Span] = []
        self._buffer_bytes = 0
        self._refused = 0
        self._malformed = 0
        self._truncated = 0
        self._resource: tuple[Resource, SharedResource] | None = None
        self._counted: dict[bytes, SharedResource] = {}
        """Traces whose buffered spans count their resource's shared bytes (on the first one)."""
        self._closed = False
        self._collections = threading.Lock()
        self._latest: _Collected | None = None
        self._pending: concurrent.futures.Future[None] | None = None
        self._collecting: set[asyncio.Task[None]] = set()
        self._started_collections = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(started,), name="ragmon", daemon=True)
        self._thread.start()
        started.result()  # re-raises a failed start (a port in use, a bad judge config)
        self.registry = registry
        if registry is not None:
            registry.register(_Forward(self))

    @property
    def port(self) -> int | None:
        """The bound port of the metrics server (``serve``), else None."""
        return self.sidecar.ports.metrics

    # -- SpanProcessor -----------------------------------------------------------------------

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        """Nothing: ragmon reads ended spans."""

    def on_end(self, span: ReadableSpan) -> None:
        """Keep what ragmon reads of ``span`` in the bounded buffer, or count it refused."""
        resource = span.resource
        cached = self._resource
        if cached is None or cached[0] is not resource:
            cached = (resource, kept_resource(resource.attributes, self._selection))
            self._resource = cached
        shared = cached[1]
        try:
            kept, cuts = to_span(span, self._selection, shared, count_resource=False)
        except Exception:  # never into the application's span.end(): counted, logged once a batch
            with self._lock:
                self._malformed += 1
            return
        if kept is None:
            return
        trace_id = kept.trace_id
        with self._lock:
            if self._closed:
                return
            counts = self._counted.get(trace_id) is not shared  # its trace's first span of this hand-over
            size = kept.size + shared.size if counts else kept.size
            buffered = len(self._buffer)
            if buffered and (buffered >= self._max_spans or self._buffer_bytes + size > self._max_bytes):
                self._refused += 1
                return
            if counts:
                kept.size = size  # still only this thread's: it carries the resource's bytes
                self._counted[trace_id] = shared
            self._buffer.append(kept)
            self._buffer_bytes += size
            self._truncated += cuts + (shared.truncated if not buffered else 0)

    def shutdown(self) -> None:
        """Refuse new spans, score every trace held (at most ``DRAIN_TIMEOUT`` seconds), stop
        the metrics server and the background thread. The registry keeps the final values."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        stop = self._stop
        if stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(DRAIN_TIMEOUT + 10)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Hand the buffered spans to the pipeline, finish every trace whose root span has ended
        (without waiting out ``traces.grace``) and wait until they are scored; traces still
        open stay held. False if that took longer than the timeout or ragmon has stopped."""
        if not self._loop.is_running():
            return False
        future = asyncio.run_coroutine_threadsafe(self._flush(), self._loop)
        try:
            future.result(timeout_millis / 1000)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            return False
        return True

    # -- metrics -------------------------------------------------------------------------------

    def collect(self) -> list[Metric]:
        """Every family of ragmon. While it runs: the most recent families collected on its loop,
        waiting at most ``FRESH_WAIT`` for fresher ones (module docstring); once it has stopped,
        collected now. Never raises: a failure is logged and the scrape gets no family of ragmon."""
        try:
            if not self._loop.is_running() or threading.current_thread() is self._thread:
                return list(self.sidecar.registry.collect())
            pending, asked = self._ask_collection()
            if asked:  # the loop has answered every earlier scrape: this one may be answered soon
                concurrent.futures.wait((pending,), FRESH_WAIT)
            latest = self._latest
            return latest.families() if latest is not None else []
        except Exception:  # never into the application's scrape
            log.exception("in-process: ragmon's families could not be served")
            return []

    def _ask_collection(self) -> tuple[concurrent.futures.Future[None], bool]:
        """The collection asked of ragmon's loop and not yet done, else a new one (and True)."""
        with self._collections:
            pending = self._pending
            if pending is not None:
                return pending, False
            pending = self._pending = concurrent.futures.Future()
        try:
            self._loop.call_soon_threadsafe(self._start_collection, pending)
        except RuntimeError:  # the loop closed meanwhile: the scrape gets the latest families
            with self._collections:
                self._pending = None
            pending.set_result(None)
        return pending, True

    def _start_collection(self, pending: concurrent.futures.Future[None]) -> None:
        task = self._loop.create_task(self._collect(pending))
        self._collecting.add(task)
        task.add_done_callback(self._collecting.discard)

    async def _collect(self, pending: concurrent.futures.Future[None] | None = None) -> None:
        """Collect every family on the loop and make them the latest, unless a collection that
        started later has already; then resolve ``pending`` (the scrapes waiting for it)."""
        self._started_collections += 1
        started = self._started_collections
        families: list[Metric] | None = None
        try:
            families = await collect_families(self.sidecar.registry)
        except Exception:
            log.exception("in-process: ragmon's families could not be collected")
        finally:
            with self._collections:
                if families is not None and (self._latest is None or self._latest.started < started):
                    self._latest = _Collected(families, started)
                if pending is not None and self._pending is pending:
                    self._pending = None
            if pending is not None:
                pending.set_result(None)

    # -- the background loop -------------------------------------------------------------------

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(started))
        finally:
            self._loop.close()

    async def _main(self, started: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            await self.sidecar.start()
        except BaseException as error:
            await self.sidecar.stop()
            started.set_exception(error)
            return
        await self._collect()  # what the first scrape shows if the loop is busy by then
        started.set_result(None)
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(HAND_OVER):
                    await self._stop.wait()
            except TimeoutError:
                pass
            self._hand_over()  # the last one after stop: on_end takes no more once closed
        await self.sidecar.stop(DRAIN_TIMEOUT)
        for task in self._collecting:
            task.cancel()
        await asyncio.gather(*self._collecting, return_exceptions=True)

    async def _flush(self) -> None:
        """Hand over the buffer; once the worker has taken it, finish the rooted traces and wait
        until the worker has scored them and every trace finished before (or counted them
        ignored or dropped); then collect the families, so that the application's next scrape
        shows them."""
        self._hand_over()
        pipeline = self.sidecar.pipeline
        while pipeline.stats().queued_spans:
            await asyncio.sleep(_POLL)
        assembler = self.sidecar.assembler
        assembler.finish_rooted()
        # every trace finished so far, those the worker took before this flush and is scoring
        # still included: each one ends scored, ignored or dropped
        target = assembler.stats().traces_finished
        pipeline.offer(())  # wakes the worker
        while _done(pipeline.stats()) < target:
            await asyncio.sleep(_POLL)
        await self._collect()

    def _hand_over(self) -> None:
        """Offer the buffer to the pipeline (on the loop); count what was received or refused."""
        with self._lock:
            batch, self._buffer, self._buffer_bytes = self._buffer, [], 0
            self._counted = {}
            refused, self._refused = self._refused, 0
            malformed, self._malformed = self._malformed, 0
            truncated, self._truncated = self._truncated, 0
        ingest = self.sidecar.ingest
        if batch:
            offer = self.sidecar.pipeline.offer(batch)
            if offer is Offer.ACCEPTED:
                ingest.spans_received[PROTOCOL] += len(batch)
                if truncated:
                    ingest.attributes_truncated[PROTOCOL] += truncated
            else:
                ingest.spans_rejected[(PROTOCOL, offer.value)] += len(batch)
        if refused:
            ingest.spans_rejected[(PROTOCOL, Offer.OVERLOADED.value)] += refused
        if malformed:
            ingest.spans_rejected[(PROTOCOL, "malformed_span")] += malformed
            log.warning("in-process: %d span(s) could not be read", malformed)
