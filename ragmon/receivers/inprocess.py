"""In-process spans: what ragmon reads of an OpenTelemetry SDK ``ReadableSpan``, the same
``Span`` the OTLP decoders make from the SDK's OTLP exporter (only the attributes the
conventions read, bounded and sized as ``ragmon.otlp.decode.span_from_values`` does).
``ragmon.sidecar.inprocess`` is the ``SpanProcessor`` that uses it."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ragmon.model import Span
from ragmon.otlp.decode import SharedResource, SpanSelection, span_from_values

__all__ = ["PROTOCOL", "to_span"]

PROTOCOL = "inprocess"
"""The ``protocol`` label of the ingest counters for spans from the SDK."""
_REMOTE_KNOWN, _REMOTE = 0x100, 0x200
"""OTLP span flags, set as the SDK's OTLP exporter sets them."""


def to_span(
    span: ReadableSpan, selection: SpanSelection, resource: SharedResource, *, count_resource: bool = True
) -> tuple[Span | None, int]:
    """What ragmon reads of an SDK span (``resource``: its resource, reduced once), as the
    OTLP decoder would read it from the SDK's OTLP exporter; and the cuts made. None without
    a valid context. ``count_resource``: whether its size counts the resource's shared bytes
    (the decoders count them on the first span of each trace of a body)."""
    context = span.context
    if context is None:
        return None, 0
    parent = span.parent
    return span_from_values(
        selection,
        resource,
        (context.trace_id, context.span_id, parent.span_id if parent is not None else 0),
        span.name,
        (span.start_time or 0, span.end_time or 0),
        _REMOTE_KNOWN | (_REMOTE if parent is not None and parent.is_remote else 0),
        span.kind.value + 1,  # the SDK's SpanKind counts from 0 (INTERNAL), OTLP's from 1
        span.status.status_code is StatusCode.ERROR,
        span.attributes,
        ((event.name, event.timestamp, event.attributes) for event in span.events),
        count_resource=count_resource,
    )
