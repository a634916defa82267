"""OTLP trace export bodies (protobuf or JSON) -> ``Span`` values. Pure: no I/O, no clock.

Only what ragmon reads is materialized: protobuf bodies are parsed with
``ragmon.otlp_wire.TraceRequest`` (attributes as C-level maps), each attribute key is tested
against an ``AttributeFilter`` and only wanted values are converted; events are kept by name. A span
with a malformed trace or span id is rejected and counted (OTLP partial success); a body
that cannot be parsed at all raises ``DecodeError`` (HTTP 400 / gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError as _ProtobufDecodeError

from ragmon.errors import RagmonError
from ragmon.model import AttributeFilter, AttrValue, Span, SpanEvent
from ragmon.otlp_wire import TraceRequest

__all__ = ["DecodeError", "Decoded", "SpanSelection", "decode_protobuf", "decode_json", "count_spans"]

_STATUS_ERROR = 2
_NO_SPAN = bytes(8)
"""An all-zero parent span id means no parent (some producers send it instead of nothing)."""
_SERVICE_NAME = "service.name"


class DecodeError(RagmonError):
    """The body is not a valid OTLP trace export."""


@dataclass(frozen=True, slots=True)
class SpanSelection:
    """What the decoder keeps: span attributes, resource attributes, and events by name."""

    attributes: AttributeFilter = AttributeFilter()
    resource: AttributeFilter = AttributeFilter()
    events: frozenset[str] = frozenset()
    max_value_chars: int = 16_384
    """Longer string attribute values are cut to this many characters (and counted)."""


@dataclass(slots=True)
class Decoded:
    """Spans decoded from one body, and those rejected: counted per reason, first reason kept
    for the partial-success message."""

    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    reason: str = ""
    reasons: Counter[str] = field(default_factory=Counter)
    truncated: int = 0
    """String attribute values cut to ``SpanSelection.max_value_chars``."""

    def reject(self, reason: str) -> None:
        """Count one rejected span under ``reason`` (a label value: ``invalid_trace_id``, …)."""
        self.rejected += 1
        self.reasons[reason] += 1
        if not self.reason:
            self.reason = reason


# -- protobuf ---------------------------------------------------------------------------------


def _any_value(value: Any) -> AttrValue:
    """An ``AnyValue`` as a Python value; a key-value list as a JSON object string."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return json.dumps({kv.key: _jsonable(_any_value(kv.value)) for kv in value.kvlist_value.values})
    scalar: str | int | float | bool | bytes = getattr(value, kind)
    return scalar


def _jsonable(value: AttrValue) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


_SPAN_OVERHEAD = 1_400
"""Bytes counted for a span beyond its kept text (ids, timestamps, objects)."""


_SCALAR_KINDS = frozenset({"int_value", "double_value", "bool_value", "bytes_value"})


def _wanted(attributes: Any, wanted: AttributeFilter, limit: int, result: Decoded) -> tuple[dict[str, AttrValue], int]:
    """The wanted entries of an attribute map, strings cut to ``limit`` characters (counted in
    ``result.truncated``), and their size in bytes. Keys are iterated; only wanted values are
    converted (strings, the common case, inline)."""
    keys, prefixes = wanted.keys, wanted.prefixes
    out: dict[str, AttrValue] = {}
    size = 0
    for key in attributes:
        if key in keys or key.startswith(prefixes):
            value = attributes[key]
            kind = value.WhichOneof("value")
            if kind == "string_value":
                text: str = value.string_value
                if len(text) > limit:
                    text = text[:limit]
                    result.truncated += 1
                out[key] = text
                size += len(key) + len(text)
            else:
                out[key] = getattr(value, kind) if kind in _SCALAR_KINDS else _any_value(value)
                size += len(key) + 16
    return out, size


def _bound(attributes: dict[str, AttrValue], limit: int, result: Decoded) -> int:
    """Cut long strings in place (counted in ``result.truncated``); return the span's size."""
    size = _SPAN_OVERHEAD
    for key, value in attributes.items():
        if isinstance(value, str):
            if len(value) > limit:
                value = attributes[key] = value[:limit]
                result.truncated += 1
            size += len(key) + len(value)
        else:
            size += len(key) + 16
    return size


def _all(attributes: Iterable[Any]) -> dict[str, AttrValue]:
    return {kv.key: _any_value(kv.value) for kv in attributes}


def decode_protobuf(body: bytes, selection: SpanSelection) -> Decoded:
    """Decode a binary ``ExportTraceServiceRequest``; ``DecodeError`` if it does not parse."""
    request = TraceRequest()
    try:
        request.ParseFromString(body)
    except (_ProtobufDecodeError, ValueError, RuntimeError) as exc:
        raise DecodeError(f"invalid OTLP protobuf: {exc}") from None
    return _from_message(request, selection)


def _from_message(request: Any, selection: SpanSelection) -> Decoded:
    result = Decoded()
    spans = result.spans
    wanted_events = selection.events
    limit = selection.max_value_chars
    for resource_spans in request.resource_spans:
        resource_attrs = resource_spans.resource.attributes
        service = resource_attrs[_SERVICE_NAME].string_value if _SERVICE_NAME in resource_attrs else ""
        resource, _ = _wanted(resource_attrs, selection.resource, selection.max_value_chars, result)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id, span.span_id
                if len(trace_id) != 16 or trace_id == bytes(16):
                    result.reject("invalid_trace_id")
                    continue
                if len(span_id) != 8 or span_id == bytes(8):
                    result.reject("invalid_span_id")
                    continue
                parent = span.parent_span_id
                if parent == _NO_SPAN:
                    parent = b""
                elif parent and len(parent) != 8:
                    result.reject("invalid_parent_span_id")
                    continue
                events: tuple[SpanEvent, ...] = ()
                if wanted_events and span.events:
                    events = tuple(
                        SpanEvent(e.name, e.time_unix_nano, _all(e.attributes))
                        for e in span.events
                        if e.name in wanted_events
                    )
                attributes, size = _wanted(span.attributes, selection.attributes, limit, result)
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent,
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        flags=span.flags,
                        kind=span.kind,
                        error=span.status.code == _STATUS_ERROR,
                        service=service,
                        attributes=attributes,
                        events=events,
                        resource=resource,
                        size=_SPAN_OVERHEAD + size,
                    )
                )
    return result


def count_spans(body: bytes) -> int | None:
    """Number of spans in a protobuf body, or ``None`` if it does not parse (for reject counters)."""
    request = TraceRequest()
    try:
        request.ParseFromString(body)
    except (_ProtobufDecodeError, ValueError, RuntimeError):
        return None
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


# -- JSON (OTLP/JSON: hex ids, lowerCamelCase keys, int64 as strings or numbers) ----------------


def _json_any(value: Any) -> AttrValue:
    if not isinstance(value, Mapping):
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return tuple(_json_any(v) for v in (value["arrayValue"] or {}).get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "kvlistValue" in value:
        pairs = (value["kvlistValue"] or {}).get("values", ())
        return json.dumps({kv.get("key", ""): _jsonable(_json_any(kv.get("value"))) for kv in pairs})
    return None


def _json_attrs(attributes: Any, wanted: AttributeFilter | None) -> dict[str, AttrValue]:
    out: dict[str, AttrValue] = {}
    for kv in attributes or ():
        key = kv.get("key", "")
        if wanted is None or wanted.wants(key):
            out[key] = _json_any(kv.get("value"))
    return out


_KINDS = {"SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}


def _json_kind(value: Any) -> int:
    if isinstance(value, str):
        return _KINDS.get(value, 0)
    return int(value or 0)


def _json_id(value: Any, size: int) -> bytes | None:
    if not value:
        return b""
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        try:  # some producers send base64 (protobuf's canonical JSON for bytes)
            raw = base64.b64decode(value, validate=True)
        except (TypeError, ValueError, binascii.Error):
            return None
    if len(raw) != size:
        return None
    return b"" if raw == bytes(size) else raw


def decode_json(body: bytes, selection: SpanSelection) -> Decoded:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest``; ``DecodeError`` if it is not one."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise DecodeError("invalid OTLP/JSON: expected an object with resourceSpans")
    try:
        return _from_json(request, selection)
    except (AttributeError, TypeError, ValueError, binascii.Error) as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc}") from None


def _from_json(request: Mapping[str, Any], selection: SpanSelection) -> Decoded:
    result = Decoded()
    for resource_spans in request.get("resourceSpans") or ():
        resource_attrs = (resource_spans.get("resource") or {}).get("attributes")
        resource = _json_attrs(resource_attrs, selection.resource)
        service = next(
            (kv.get("value") or {} for kv in resource_attrs or () if kv.get("key") == _SERVICE_NAME), {}
        ).get("stringValue", "")
        for scope_spans in resource_spans.get("scopeSpans") or ():
            for span in scope_spans.get("spans") or ():
                trace_id = _json_id(span.get("traceId"), 16)
                span_id = _json_id(span.get("spanId"), 8)
                parent = _json_id(span.get("parentSpanId"), 8)
                if not trace_id or trace_id == bytes(16):
                    result.reject("invalid_trace_id")
                    continue
                if not span_id or span_id == bytes(8):
                    result.reject("invalid_span_id")
                    continue
                if parent is None:
                    result.reject("invalid_parent_span_id")
                    continue
                try:
                    events = tuple(
                        SpanEvent(e.get("name", ""), int(e.get("timeUnixNano") or 0), _json_attrs(e.get("attributes"), None))
                        for e in span.get("events") or ()
                        if e.get("name") in selection.events
                    )
                    status = span.get("status") or {}
                    attributes = _json_attrs(span.get("attributes"), selection.attributes)
                    size = _bound(attributes, selection.max_value_chars, result)
                    result.spans.append(
                        Span(
                            trace_id=trace_id,
                            span_id=span_id,
                            parent_span_id=parent,
                            name=str(span.get("name", "")),
                            start_ns=int(span.get("startTimeUnixNano") or 0),
                            end_ns=int(span.get("endTimeUnixNano") or 0),
                            flags=int(span.get("flags") or 0),
                            kind=_json_kind(span.get("kind")),
                            error=status.get("code") in (_STATUS_ERROR, "STATUS_CODE_ERROR"),
                            service=str(service),
                            attributes=attributes,
                            events=events,
                            resource=resource,
                            size=size,
                        )
                    )
                except (AttributeError, TypeError, ValueError, binascii.Error):
                    result.reject("malformed_span")
    return result
