"""What the OTLP receivers share: the sink they hand spans to, and their counters."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from prometheus_client.metrics_core import Metric

from ragmon import catalogue as cat
from ragmon.model import Offer, Span
from ragmon.otlp.decode import Decoded, SpanSelection

__all__ = ["DECODE_IN_THREAD_BYTES", "IngestGate", "decode_body", "REQUEST_REJECT_REASONS", "SPAN_REJECT_REASONS", "SpanSink", "IngestStats", "ReceiverSettings", "hand_over"]

SPAN_REJECT_REASONS = (
    "invalid_trace_id", "invalid_span_id", "invalid_parent_span_id", "malformed_span",
    "overloaded", "shutting_down",
)
"""``reason`` values of ``ragmon_spans_rejected_total`` (exported at 0 before the first)."""
REQUEST_REJECT_REASONS = {
    "http": ("busy", "unauthorized", "content_type", "content_encoding", "too_large", "decode", "malformed",
             "aborted", "timeout", "inflight_bytes", "shutting_down"),
    "grpc": ("busy", "unauthorized", "decode", "timeout", "slow", "inflight_bytes", "too_large"),
}
"""``reason`` values of ``ragmon_requests_rejected_total`` per protocol (exported at 0)."""


class SpanSink(Protocol):
    """Where receivers put decoded spans. ``offer`` never blocks: it answers ``Offer.OVERLOADED``
    when the pipeline is full (or ``SHUTTING_DOWN``), and the receiver answers 503/UNAVAILABLE
    so the exporter retries."""

    def offer(self, spans: Sequence[Span]) -> Offer: ...


@dataclass(frozen=True, slots=True)
class ReceiverSettings:
    """What both OTLP receivers need: what to decode, the size limit, the bearer token."""

    selection: SpanSelection
    max_body_bytes: int
    token: str = ""


@dataclass(slots=True)
class IngestStats:
    """Receiver counters (``ragmon_spans_received_total`` and friends), exported by ``collect``.

    Keys are ``protocol`` for received spans, ``(protocol, reason)`` for rejections.
    """

    spans_received: Counter[str] = field(default_factory=Counter)
    spans_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    requests_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    attributes_truncated: Counter[str] = field(default_factory=Counter)

    def collect(self) -> Iterator[Metric]:
        """The receivers' families, every known protocol and reason at 0 before its first event."""
        received = cat.SPANS_RECEIVED.empty()
        rejected = cat.SPANS_REJECTED.empty()
        requests = cat.REQUESTS_REJECTED.empty()
        for protocol in _protocols(self.spans_received):
            received.add_metric([protocol], self.spans_received[protocol])
        known_spans = {(protocol, reason) for protocol in REQUEST_REJECT_REASONS for reason in SPAN_REJECT_REASONS}
        for protocol, reason in sorted(known_spans | self.spans_rejected.keys()):
            rejected.add_metric([protocol, reason], self.spans_rejected[(protocol, reason)])
        known_requests = {(protocol, reason) for protocol, reasons in REQUEST_REJECT_REASONS.items() for reason in reasons}
        for protocol, reason in sorted(known_requests | self.requests_rejected.keys()):
            requests.add_metric([protocol, reason], self.requests_rejected[(protocol, reason)])
        truncated = cat.ATTRIBUTES_TRUNCATED.empty()
        for protocol in _protocols(self.attributes_truncated):
            truncated.add_metric([protocol], self.attributes_truncated[protocol])
        yield from (received, rejected, requests, truncated)


def _protocols(counts: Mapping[str, int]) -> tuple[str, ...]:
    """The OTLP protocols, then any other counted (``inprocess``: the in-process processor)."""
    return ("http", "grpc", *sorted(counts.keys() - {"http", "grpc"}))


class IngestGate:
    """Turns to decompress, decode and hand over a received OTLP body (or feedback), shared by
    both receivers.

    At most ``slots`` bodies are worked on at once; the others (already read, within
    ``receiver.max_inflight_bytes``) wait their turn for at most ``wait`` seconds, then are
    refused with 503 / UNAVAILABLE and a retry delay (reason ``busy``). The event loop so never
    has more than ``slots`` requests' CPU work queued ahead of a liveness probe, a scrape or the
    pipeline, however many exporters send at once; ingest as a whole is no faster with more (it
    is CPU-bound). A slow client holds no turn: bodies are read before the turn is taken.

    Memory: a turn holds at most ``slot_bytes`` of decoding (a JSON body's tree, the spans
    decoded), so decoding takes at most ``slots × slot_bytes`` (the sidecar: its in-flight
    budget again); a body that would take more is refused (413), never decoded past it.
    """

    SLOTS = 2
    """Bodies worked on at once by default."""

    def __init__(self, slots: int = SLOTS, wait: float = 2.0, slot_bytes: int = sys.maxsize) -> None:
        if slots < 1 or not wait > 0:
            raise ValueError(f"an ingest gate needs slots >= 1 and wait > 0, got {slots}, {wait}")
        if slot_bytes < 1:
            raise ValueError(f"an ingest gate needs slot_bytes >= 1, got {slot_bytes}")
        self.slots = slots
        self.wait = wait
        self.slot_bytes = slot_bytes
        self._free = asyncio.Semaphore(slots)

    async def enter(self) -> bool:
        """Wait for a turn (``True``), or give up after ``wait`` seconds (``False``)."""
        try:
            async with asyncio.timeout(self.wait):
                await self._free.acquire()
        except TimeoutError:
            return False
        return True

    def leave(self) -> None:
        """End a turn ``enter`` gave."""
        self._free.release()


DECODE_IN_THREAD_BYTES = 64 * 1024
"""Bodies at least this large are decoded in a worker thread: the event loop (liveness,
scrapes, the pipeline) keeps its turns while a big body is decoded (the GIL switches every
few milliseconds) instead of waiting for the whole decode."""


async def decode_body(
    decode: Callable[[bytes, SpanSelection, int], Decoded], body: bytes, selection: SpanSelection, max_bytes: int,
) -> Decoded:
    """``decode(body, selection, max_bytes)``, off the event loop for a large body
    (``DecodeError``, ``DecodedTooLargeError`` as they are)."""
    if len(body) >= DECODE_IN_THREAD_BYTES:
        return await asyncio.to_thread(decode, body, selection, max_bytes)
    return decode(body, selection, max_bytes)


def hand_over(decoded: Decoded, sink: SpanSink, stats: IngestStats, protocol: str) -> ExportTraceServiceResponse | Offer:
    """Offer decoded spans to the sink and count them; the OTLP response, or the sink's refusal
    (``OVERLOADED`` / ``SHUTTING_DOWN``: the receiver answers 503 / UNAVAILABLE and the exporter
    retries)."""
    if decoded.spans and (offer := sink.offer(decoded.spans)) is not Offer.ACCEPTED:
        # decoded, so countable: the spans are refused, not the body
        stats.spans_rejected[(protocol, offer.value)] += len(decoded.spans)
        return offer
    stats.spans_received[protocol] += len(decoded.spans) + decoded.rejected
    if decoded.truncated:
        stats.attributes_truncated[protocol] += decoded.truncated
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        for reason, n in decoded.reasons.items():
            stats.spans_rejected[(protocol, reason)] += n
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = f"{decoded.rejected} span(s) rejected: {decoded.reason}"
    return response
