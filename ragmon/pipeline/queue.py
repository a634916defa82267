"""The sidecar's pipeline behind the receivers: queue -> assembly -> conventions -> scoring -> metrics.

One asyncio task drains a bounded queue of span batches; receivers only ``offer`` (never
block). A full queue makes ``offer`` return ``Offer.OVERLOADED``, and the receivers answer 503/UNAVAILABLE
so exporters retry: nothing is dropped silently. One bad trace never stops the worker: it is
counted in ``ragmon_dropped_total{reason}`` and the worker goes on.

Lifecycle, as the judge's runner and the onward sender: an async context manager that starts
the worker on enter and, on exit, stops accepting and lets the worker score every trace held,
for at most ``stop_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import Metric

from ragmon import catalogue as cat
from ragmon.config import ReceiverConfig
from ragmon.model import ModelCalls, Offer, RagRecord, Span, Trace, Worker
from ragmon.pipeline.assembly import TraceAssembler
from ragmon.scoring.records import PricedCall, RecordScores

__all__ = ["Pipeline", "PipelineStats", "RecordConsumer", "RecordSink", "Scorer", "TraceReader"]

log = logging.getLogger("ragmon")

_SLICE = 256
"""Traces scored between two yields to the event loop (receivers and scrapes stay responsive)."""
_TAKE_SPANS = 4096
"""Spans moved from the queue into assembly between two yields (a full queue holds 200,000)."""


class TraceReader(Protocol):
    """The extraction stage (``conventions.TraceReader``)."""

    def read(self, trace: Trace) -> RagRecord | ModelCalls | None:
        """A finished trace's RAG request, else its model calls, else None."""


class Scorer(Protocol):
    """The scoring stage (``scoring.records.RecordScorer``)."""

    def score(self, record: RagRecord) -> RecordScores:
        """One request's scores."""

    def price(self, calls: ModelCalls) -> Sequence[PricedCall]:
        """The priced calls of a trace that is not a RAG request."""


class RecordSink(Protocol):
    """Where scored records go: the exporter's ``RagMetrics``."""

    def observe(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """Count one scored request; must not wait."""

    def observe_calls(self, service: str, calls: Sequence[PricedCall]) -> None:
        """Count the model calls of a trace that is not a RAG request; must not wait."""


class RecordConsumer(Protocol):
    """A stage that takes each scored record after the exporter has counted it (the feedback
    store, the status page's views, the judge stage): the pipeline's ``ConsumeTraces``."""

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """Take one scored record; must not wait (queue work for later instead)."""


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """Counters of the pipeline, for ``/metrics`` and the status page."""

    queued_spans: int
    max_queued_spans: int
    queued_bytes: int
    records: int
    ignored: int
    unlabelled: int
    without_content: int
    dropped: dict[str, int]
    model_call_traces: int = 0
    """Ignored traces whose model calls were counted (``ModelCalls``: tokens and cost only)."""

    def collect(self) -> Iterator[Metric]:
        """The pipeline's families: the queue, ignored and dropped traces, traces without content."""
        queue = cat.QUEUE_SPANS.empty()
        queue.add_metric([], self.queued_spans)
        queue_bytes = cat.QUEUE_BYTES.empty()
        queue_bytes.add_metric([], self.queued_bytes)
        capacity = cat.QUEUE_CAPACITY_SPANS.empty()
        capacity.add_metric([], self.max_queued_spans)
        ignored = cat.TRACES_IGNORED.empty()
        ignored.add_metric([], self.ignored)
        dropped = cat.DROPPED.empty()
        dropped.add_metric(["trace_error"], self.dropped.get("trace_error", 0))
        no_content = cat.TRACES_WITHOUT_CONTENT.empty()
        no_content.add_metric([], self.without_content)
        yield from (queue, queue_bytes, capacity, ignored, dropped, no_content)


class Pipeline(Worker):
    """Owns the queue and the worker; a ``SpanSink`` for the receivers.

    ``async with pipeline:`` runs the worker (``worker``) and, on exit, ``stop(stop_timeout)``.
    """

    def __init__(
        self,
        *,
        assembler: TraceAssembler,
        reader: TraceReader,
        scorer: Scorer,
        metrics: RecordSink,
        consumers: Sequence[RecordConsumer] = (),
        clock: Callable[[], float],
        max_queued_spans: int,
        max_queued_bytes: int = ReceiverConfig().max_queued_bytes,
        tick: float = 0.25,
        stop_timeout: float = 10.0,
    ) -> None:
        self._assembler = assembler
        self._reader = reader
        self._scorer = scorer
        self._metrics = metrics
        self._consumers = tuple(consumers)
        """Given each scored record after the exporter, in order."""
        self._clock = clock
        self._max_queued = max_queued_spans
        self._max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0
        self._tick = tick
        self.stop_timeout = stop_timeout
        """Seconds the worker gets on exit to score the traces held."""
        self.worker: asyncio.Task[None] | None = None
        """The worker task while entered (``run``)."""
        self._queue: asyncio.Queue[Sequence[Span]] = asyncio.Queue()
        self._queued = 0
        self._accepting = True
        self._records = 0
        self._ignored = 0
        self._model_call_traces = 0
        self._unlabelled = 0
        self._without_content = 0
        self._dropped: Counter[str] = Counter()

    # -- SpanSink ----------------------------------------------------------------------------

    def offer(self, spans: Sequence[Span]) -> Offer:
        """Queue a batch (``ACCEPTED``), or refuse it: ``OVERLOADED`` when full, ``SHUTTING_DOWN``
        after ``shutdown`` (the receiver answers 503)."""
        if not self._accepting:
            return Offer.SHUTTING_DOWN
        size = sum(span.size for span in spans)
        # an empty queue takes any batch the body limit let in (else a body larger than the
        # queue would be refused forever and its exporter would retry it without end)
        if self._queued and (
            self._queued + len(spans) > self._max_queued or self._queued_bytes + size > self._max_queued_bytes
        ):
            return Offer.OVERLOADED
        self._queued += len(spans)
        self._queued_bytes += size
        self._queue.put_nowait(spans)
        return Offer.ACCEPTED

    @property
    def overloaded(self) -> bool:
        """True while the queue is more than 90% full."""
        return self._queued > 0.9 * self._max_queued

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Run ``run`` in the ``worker`` task."""
        self.worker = asyncio.create_task(self.run(), name="ragmon-pipeline")

    async def stop(self, timeout: float) -> None:
        """``shutdown``, then let the worker score every trace held for at most ``timeout``
        seconds; past that it is cancelled and the traces left are logged."""
        await self.shutdown()
        worker = self.worker
        if worker is not None and not worker.done():
            try:
                await asyncio.wait_for(asyncio.shield(worker), timeout)
            except TimeoutError:
                left = self._assembler.stats().traces_pending
                log.error("shutdown: the pipeline did not finish within %gs; %d trace(s) not scored", timeout, left)
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    # -- worker --------------------------------------------------------------------------------

    async def run(self) -> None:
        """The worker: take every queued batch, finish due traces, score them; on ``shutdown``,
        finish and score everything held, then return."""
        while True:
            batch: Sequence[Span] | None = None
            if self._queue.empty() and self._accepting:
                try:
                    async with asyncio.timeout(self._tick):
                        batch = await self._queue.get()
                except TimeoutError:
                    pass
            now = self._clock()
            taken = 0
            if batch is not None:
                self._take(batch, now)
                taken = len(batch)
            while taken < _TAKE_SPANS and not self._queue.empty():
                batch = self._queue.get_nowait()
                self._take(batch, now)
                taken += len(batch)
            await self._process(self._assembler.expire(now), now)
            if not self._accepting and self._queue.empty():
                await self._process(self._assembler.drain(), now)
                return
            await asyncio.sleep(0)  # between steps, the loop's other work takes its turn

    def _take(self, batch: Sequence[Span], now: float) -> None:
        self._queued -= len(batch)
        self._queued_bytes -= sum(span.size for span in batch)
        if batch:
            self._assembler.add(batch, now)

    async def shutdown(self) -> None:
        """Stop accepting and wake the worker, which scores every trace held and returns."""
        self._accepting = False
        self._queue.put_nowait(())

    async def _process(self, traces: list[Trace], now: float) -> None:
        """Score finished traces (the list is emptied), yielding to the event loop every
        ``_SLICE`` traces. Each trace is let go as soon as it is scored, so its spans are freed
        while they are still in the CPU's caches, not in a separate pass over the whole list.

        The metrics buffer values and flush them themselves (bounded; a scrape flushes first).
        """
        traces.reverse()
        done = 0
        while traces:
            trace = traces.pop()
            done += 1
            if done % _SLICE == 0:
                await asyncio.sleep(0)
            try:
                record = self._reader.read(trace)
                if record is None or isinstance(record, ModelCalls):
                    if record is not None:  # not a request: its calls count in tokens and cost
                        self._metrics.observe_calls(record.service, self._scorer.price(record))
                        self._model_call_traces += 1
                    self._ignored += 1
                    continue
                scores = self._scorer.score(record)
                self._metrics.observe(record, scores, now)
                for consumer in self._consumers:
                    consumer.consume(record, scores, now)
            except Exception:  # one bad trace must not stop the worker
                self._dropped["trace_error"] += 1
                log.exception("could not score trace %s", trace.trace_id.hex())
                continue
            self._records += 1
            self._unlabelled += scores.unlabelled
            self._without_content += not record.content_recorded

    def stats(self) -> PipelineStats:
        """A snapshot of the pipeline's counters."""
        return PipelineStats(
            queued_spans=self._queued,
            max_queued_spans=self._max_queued,
            queued_bytes=self._queued_bytes,
            records=self._records,
            ignored=self._ignored,
            unlabelled=self._unlabelled,
            without_content=self._without_content,
            dropped=dict(self._dropped),
            model_call_traces=self._model_call_traces,
        )
