"""What the OTLP receivers share: the sink they hand spans to, and their counters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragmon.decode import Decoded, SpanSelection
from ragmon.model import Span

__all__ = ["REQUEST_REJECT_REASONS", "SPAN_REJECT_REASONS", "SpanSink", "IngestStats", "ReceiverSettings", "hand_over"]

SPAN_REJECT_REASONS = (
    "invalid_trace_id", "invalid_span_id", "invalid_parent_span_id", "malformed_span",
    "overloaded", "shutting_down",
)
"""``reason`` values of ``ragmon_spans_rejected_total`` (exported at 0 before the first)."""
REQUEST_REJECT_REASONS = {
    "http": ("unauthorized", "content_type", "content_encoding", "too_large", "decode", "malformed",
             "aborted", "timeout", "inflight_bytes", "shutting_down"),
    "grpc": ("unauthorized", "decode"),
}
"""``reason`` values of ``ragmon_requests_rejected_total`` per protocol (exported at 0)."""


class SpanSink(Protocol):
    """Where receivers put decoded spans. ``offer`` never blocks: it returns False when the
    pipeline is full, and the receiver answers 503/UNAVAILABLE so the exporter retries."""

    def offer(self, spans: Sequence[Span]) -> bool: ...

    @property
    def refusal(self) -> str:
        """Why the last ``offer`` returned False: ``overloaded`` or ``shutting_down``."""
        ...


@dataclass(frozen=True, slots=True)
class ReceiverSettings:
    """What both OTLP receivers need: what to decode, the size limit, the bearer token."""

    selection: SpanSelection
    max_body_bytes: int
    token: str = ""


@dataclass(slots=True)
class IngestStats:
    """Receiver counters, read by the exporter (``ragmon_spans_received_total`` and friends).

    Keys are ``protocol`` for received spans, ``(protocol, reason)`` for rejections.
    """

    spans_received: Counter[str] = field(default_factory=Counter)
    spans_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    requests_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    attributes_truncated: Counter[str] = field(default_factory=Counter)


def hand_over(decoded: Decoded, sink: SpanSink, stats: IngestStats, protocol: str) -> ExportTraceServiceResponse | None:
    """Offer decoded spans to the sink and count them; the OTLP response, or ``None`` when the
    sink refused them (the receiver answers 503 / UNAVAILABLE and the exporter retries)."""
    if decoded.spans and not sink.offer(decoded.spans):
        # decoded, so countable: the spans are refused, not the body
        stats.spans_rejected[(protocol, sink.refusal)] += len(decoded.spans)
        return None
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
