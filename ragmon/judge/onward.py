"""Judge results sent onward as OpenTelemetry ``gen_ai.evaluation.result`` events (OTLP/HTTP).

Each judged trace gets one short span, ``gen_ai.evaluation`` (emitted by service ``ragmon``),
in the judged trace and parented to its root span, carrying one ``gen_ai.evaluation.result``
event per score (``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``), so trace UIs
show the scores beside the trace. ``evaluation_request`` is pure; ``EvaluationSender`` batches
them to ``<endpoint>/v1/traces`` from a bounded buffer: a full buffer drops (counted), a batch
that still fails after its retries is dropped (counted), nothing blocks the caller.
"""

from __future__ import annotations

import asyncio
import logging
import random
import urllib.parse
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ragmon import __version__
from ragmon.judge.breaker import backoff_delays
from ragmon.model import Worker

__all__ = ["EVENT", "EvaluationResult", "EvaluationSender", "SenderStats", "evaluation_request"]

log = logging.getLogger("ragmon")

EVENT = "gen_ai.evaluation.result"
_SPAN_NAME = "gen_ai.evaluation"
_SCOPE = "ragmon.judge"


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    """The scores of one judged trace, ready to send: ``scores`` maps evaluation name to value."""

    trace_id: bytes
    parent_span_id: bytes
    """The judged trace's root span (``b""`` when unknown: the span is then a root)."""
    span_id: bytes
    time_ns: int
    scores: Mapping[str, float]
    judge: str
    """Which judge scored it (``llm`` or ``lexical``), sent as ``ragmon.judge``."""


def _attribute(key: str, value: str | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=float(value)))


def evaluation_request(results: Sequence[EvaluationResult]) -> ExportTraceServiceRequest:
    """One OTLP export request with a ``gen_ai.evaluation`` span per result."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [_attribute("service.name", "ragmon"), _attribute("service.version", __version__)]
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = _SCOPE
    scope_spans.scope.version = __version__
    for result in results:
        span = scope_spans.spans.add(
            trace_id=result.trace_id,
            span_id=result.span_id,
            parent_span_id=result.parent_span_id,
            name=_SPAN_NAME,
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=result.time_ns,
            end_time_unix_nano=result.time_ns,
        )
        span.attributes.append(_attribute("ragmon.judge", result.judge))
        for name, score in sorted(result.scores.items()):
            event = span.events.add(name=EVENT, time_unix_nano=result.time_ns)
            event.attributes.extend(
                [_attribute("gen_ai.evaluation.name", name), _attribute("gen_ai.evaluation.score.value", score)]
            )
    return request


@dataclass(frozen=True, slots=True)
class SenderStats:
    """Counters of the sender, for ``/metrics``: results sent, dropped (buffer full), failed."""

    sent: int
    dropped: int
    failed: int
    buffered: int


class EvaluationSender(Worker):
    """Buffers results and posts them in batches; ``offer`` never blocks.

    ``start`` runs the sending task, ``stop`` flushes and ends it; ``async with sender:`` does
    both (stopping within ``stop_timeout``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        max_buffered: int = 10_000,
        batch: int = 512,
        interval: float = 1.0,
        timeout: float = 10.0,
        retries: int = 2,
        rng: random.Random | None = None,
        stop_timeout: float = 5.0,
    ) -> None:
        self.url = endpoint.rstrip("/") + "/v1/traces"
        parts = urllib.parse.urlsplit(self.url)
        self._where = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        """The endpoint as logged: no credentials, path or query."""
        self._buffer: deque[EvaluationResult] = deque()
        self._max = max_buffered
        self._batch = batch
        self._interval = interval
        self._timeout = timeout
        self._retries = retries
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._closing = False
        self._sent = self._dropped = self._failed = 0
        self._task: asyncio.Task[None] | None = None
        self.stop_timeout = stop_timeout
        """Seconds the sender gets on exit to flush what is buffered."""

    def offer(self, result: EvaluationResult) -> bool:
        """Buffer one result; ``False`` (and counted as dropped) when the buffer is full."""
        if self._closing or len(self._buffer) >= self._max:
            self._dropped += 1
            return False
        self._buffer.append(result)
        if len(self._buffer) >= self._batch:
            self._wake.set()
        return True

    def stats(self) -> SenderStats:
        """A snapshot of the counters."""
        return SenderStats(self._sent, self._dropped, self._failed, len(self._buffer))

    async def run(self) -> None:
        """Send batches until ``close``; then send what is left (one try each) and return."""
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self._closing:
                try:
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                while self._buffer and not self._closing:
                    await self._send(session, self._take(), self._retries)
            while self._buffer:
                await self._send(session, self._take(), 0)

    async def start(self) -> None:
        """Run ``run`` in a task."""
        self._task = asyncio.create_task(self.run(), name="ragmon-evaluation-sender")

    async def stop(self, timeout: float) -> None:
        """``close``, then let ``run`` flush for at most ``timeout`` seconds; what it could not
        send by then is counted (``failed`` / ``dropped``)."""
        if self._task is None:
            return
        await self.close()
        try:
            await asyncio.wait_for(self._task, max(timeout, 0.0))
        except TimeoutError:
            lost = self.discard()
            log.warning("evaluation sender did not finish in %.0fs; %d result(s) dropped", timeout, lost)

    async def close(self) -> None:
        """Stop accepting; ``run`` flushes what is buffered and returns."""
        self._closing = True
        self._wake.set()

    def discard(self) -> int:
        """Drop what is still buffered (counted ``dropped``), e.g. when ``run`` was cut off at
        shutdown; returns how many."""
        n = len(self._buffer)
        self._dropped += n
        self._buffer.clear()
        return n

    def _take(self) -> list[EvaluationResult]:
        return [self._buffer.popleft() for _ in range(min(self._batch, len(self._buffer)))]

    async def _send(self, session: aiohttp.ClientSession, batch: list[EvaluationResult], retries: int) -> None:
        body = evaluation_request(batch).SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}
        delays = backoff_delays(retries, 0.5, 10.0, self._rng)
        try:
            await self._attempts(session, body, headers, len(batch), retries, delays)
        except asyncio.CancelledError:  # cut off at shutdown: the batch is lost, and counted
            self._failed += len(batch)
            raise

    async def _attempts(
        self, session: aiohttp.ClientSession, body: bytes, headers: dict[str, str], n: int, retries: int,
        delays: list[float],
    ) -> None:
        for attempt in range(retries + 1):
            try:
                async with session.post(self.url, data=body, headers=headers) as response:
                    if response.status < 300:
                        self._sent += n
                        return
                    retryable = response.status in (429, 502, 503, 504)
                    log.warning("evaluation export to %s answered %d", self._where, response.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                retryable = True
                log.warning("evaluation export to %s failed: %s", self._where, type(exc).__name__)
            if not retryable or attempt == retries:
                break
            await asyncio.sleep(delays[attempt])
        self._failed += n
