"""OTLP trace export bodies (protobuf or JSON) -> ``Span`` values. Pure: no I/O, no clock.

Only what ragmon reads is materialized: protobuf bodies are parsed with
``ragmon.otlp.wire.TraceRequest`` (attributes as C-level maps), each attribute key is tested
against an ``AttributeFilter`` and only wanted values are converted (strings inline, other
kinds by a bounded walk); events are kept by name. A span with a malformed trace or span id
is rejected and counted (OTLP partial success); a body that cannot be parsed at all raises
``DecodeError`` (HTTP 400 / gRPC INVALID_ARGUMENT). Nothing else is raised, whatever the bytes.

``decode_protobuf`` is the compiled decoder (``ragmon/otlp/_walker.pyx``, built by ``pip install``
where a C compiler works) when it is built: it walks the wire bytes itself and gives the same
spans, counts and errors as ``python_decode_protobuf``, the reference and the fallback
(``RAGMON_DECODER=python`` forces it, ``ragmon.compiled.use_compiled_decoder``; ``DECODER`` says which runs).

Hostile bodies are bounded (SPEC §10); every cut counts one in ``Decoded.truncated``:

- span names, ``service.name`` and string or bytes values are cut to
  ``SpanSelection.max_value_chars`` characters or bytes; an array or key-value list is cut to
  that many characters of its JSON text (elements past the budget are dropped); an attribute
  whose key is longer than that is dropped;
- arrays and key-value lists nest at most ``MAX_VALUE_DEPTH`` levels; deeper ones become ``None``
  (``null`` in JSON). A key-value list becomes one JSON object string (nested lists are nested
  objects; bytes are hex), an array a tuple;
- a span keeps at most ``MAX_EVENTS`` of the events the selection names (one cut per span).

``Span.size`` counts the bytes of every object a span keeps (see ``_SPAN_BASE``), so the byte
caps downstream bound real memory. What all spans of one resource share (one dict of its kept
attributes and one ``service.name`` string) is counted once per trace and body: on the first
span of each trace decoded for that resource (in-process: once per trace and hand-over). The
caps let spans go a body (the ingest queue) or a trace (the assembler) at a time, so while
any span holding those objects is held, the trace it belongs to still counts them: the sum
stays an upper bound, and a body of N spans of one trace counts them once, not N times. Its
edge: the assembler also drops single spans of a trace it keeps (a repeated span id, a trace
at its span cap); when the span it drops carried the count and a later span of the same trace
and body is kept, that resource's kept attributes and ``service.name`` (each at most
``max_value_chars``) are held uncounted, at most once per span so kept.

OTLP/JSON: a body must be UTF-8 (a BOM is skipped); lone surrogates (``"\\ud800"``) in kept
strings become U+FFFD. An int64 or fixed64 field is a decimal string or an integral number in
the field's range; anything else (``1.5``, ``NaN``, ``Infinity``, ``1e400``, ``-1`` for a time,
``"12abc"``, ``true``), or a wrong JSON type inside a span or its resource, rejects the span as
``malformed_span``; a wrong type above the spans makes the body a ``DecodeError``. A key
repeated in one JSON object keeps its last value (as ``json.loads`` does; a repeated attribute
key too, as protobuf maps do).
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

from google.protobuf.message import DecodeError as _ProtobufDecodeError

from ragmon.compiled import use_compiled_decoder
from ragmon.errors import DecodedTooLargeError, DecodeError
from ragmon.model import AttributeFilter, AttrValue, Span, SpanEvent
from ragmon.otlp.wire import TraceRequest

__all__ = [
    "MAX_EVENTS",
    "MAX_VALUE_DEPTH",
    "Decoded",
    "SpanSelection",
    "DocumentText",
    "DECODER",
    "decode_protobuf",
    "python_decode_protobuf",
    "decode_json",
    "count_spans",
    "SharedResource",
    "kept_resource",
    "span_from_values",
]

MAX_VALUE_DEPTH = 16
"""Nesting levels of arrays and key-value lists kept in one attribute value; a deeper array or
list becomes ``None`` (counted as truncated). Structured values seen in practice nest a few
levels; the bound keeps the walk's recursion and time trivial."""
MAX_EVENTS = 128
"""Selected events kept per span (e.g. ``db.query.result``, one per retrieved document, ranked
far deeper than any metric's cutoff); later ones are dropped (one cut per span)."""

_STATUS_ERROR = 2
_NO_TRACE, _NO_SPAN = bytes(16), bytes(8)
"""All-zero ids: invalid trace and span ids; an all-zero parent span id means no parent (some
producers send it instead of nothing)."""
_SERVICE_NAME = "service.name"

# -- sizes: CPython 3.11 object sizes (sys.getsizeof) plus allocator rounding ----------------------

_OBJ = 16
"""Allocator rounding and headers beyond ``sys.getsizeof``, per object (pymalloc: 16-byte classes)."""
_STR = 49 + _OBJ
"""An ASCII ``str`` object beyond its characters."""
_PAIR = 2 * _STR
"""A kept attribute's key and string value objects beyond their characters."""
_EMPTY_DICT = 64 + _OBJ
_DICT = _EMPTY_DICT + 120
"""A ``dict`` object with its first key table (up to 5 entries)."""
_ENTRY = 48 + _PAIR
"""An attribute in a dict (its share of the key table, at most 48 bytes at any length) with its
key and string value objects beyond their characters."""
_TUPLE = 40 + _OBJ
"""A ``tuple`` object beyond its 8-byte item pointers."""
_NUMBER = 36 + _OBJ
"""An ``int`` up to 2**90 (36 bytes), a ``float`` (24), ``True``/``False``/``None`` (shared)."""
_SPAN_BASE = 144 + (49 + 41 + 41) + 4 * _NUMBER + 5 * _OBJ
"""A ``Span`` object (15 slots), its three ids (bytes objects) and four ints (times, flags, kind)."""
_EVENT_BASE = 56 + _NUMBER + 2 * _OBJ
"""A ``SpanEvent`` object and its time."""
_sizeof = sys.getsizeof


def _text_size(text: str) -> int:
    """Bytes of a ``str`` object (ASCII: 1 byte a character; else 1, 2 or 4 and a larger header)."""
    return len(text) + _STR if text.isascii() else _sizeof(text) + _OBJ


def _value_size(value: AttrValue) -> int:
    """Bytes of a kept attribute value and everything it holds."""
    if value is None or value is True or value is False:
        return 0
    if isinstance(value, str):
        return _text_size(value)
    if isinstance(value, tuple):
        return _sizeof(value) + _OBJ + sum(_value_size(v) for v in value)
    return _sizeof(value) + _OBJ  # int, float, bytes


@dataclass(frozen=True, slots=True)
class DocumentText:
    """Where documents' text is, and the traces that keep it: the decoders leave it out of every
    other trace's spans without reading it (``ragmon.conventions.content`` says why and when).

    In the spans of a trace ``keep`` says no to, the documents of each table (a document prefix's
    rows of id, content and metadata keys, for documents 0, 1, …, read until one has none of the
    three) whose id is a non-empty string lose their metadata, and a content kept as a non-empty
    string (a non-empty string, or a key-value list: its JSON text) reads as ``""``. Neither
    value is read: no string is made, nothing is cut, and the span's size counts what it holds
    (in OTLP/JSON a metadata value left out is not checked either, so a malformed one does not
    reject its span). Other documents, and every value of a kept trace, are decoded as ever."""

    keep: Callable[[bytes], bool]
    tables: tuple[tuple[tuple[str, ...], ...], ...]
    kinds: Mapping[str, bool] = field(init=False, compare=False, repr=False)
    """Every content key of ``tables`` (True) and metadata key (False)."""

    def __post_init__(self) -> None:
        kinds = {key: is_content for table in self.tables for _, *keys in table for key, is_content in zip(keys, (True, False))}
        object.__setattr__(self, "kinds", kinds)


@dataclass(frozen=True, slots=True)
class SpanSelection:
    """What the decoder keeps: span attributes, resource attributes, and events by name."""

    attributes: AttributeFilter = AttributeFilter()
    resource: AttributeFilter = AttributeFilter()
    events: frozenset[str] = frozenset()
    max_value_chars: int = 16_384
    """Bound of every kept value (characters of a string, bytes of a bytes value, characters of
    an array's or key-value list's JSON text), span name and ``service.name`` (cuts counted)."""
    document_text: DocumentText | None = None
    """Documents' text left out of the traces that will not need it; None: kept everywhere."""


@dataclass(slots=True)
class Decoded:
    """Spans decoded from one body, and those rejected: counted per reason, first reason kept
    for the partial-success message."""

    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    reason: str = ""
    reasons: Counter[str] = field(default_factory=Counter)
    truncated: int = 0
    """Cuts: values cut to ``SpanSelection.max_value_chars`` or past ``MAX_VALUE_DEPTH``, names
    and ``service.name`` cut, attributes dropped for an over-long key, event lists cut to
    ``MAX_EVENTS``; one each."""

    def reject(self, reason: str) -> None:
        """Count one rejected span under ``reason`` (a label value: ``invalid_trace_id``, …)."""
        self.rejected += 1
        self.reasons[reason] += 1
        if not self.reason:
            self.reason = reason


# -- bounded values (both formats) -----------------------------------------------------------------

_NULL, _SCALAR, _STRING, _BYTES, _ARRAY, _KVLIST = range(6)
_Read = Callable[[Any], tuple[int, Any]]
"""A format's reading of one ``AnyValue``: its kind and payload (children for an array, (key,
value) pairs for a key-value list, read lazily so a walk stops at its budget)."""
_SKIP = object()
"""A child that does not fit in what is left of the budget."""


def _same(text: str) -> str:
    return text


class _Walk:
    """The state of one bounded walk: JSON characters left, whether anything was cut."""

    __slots__ = ("read", "left", "clean", "cut")

    def __init__(self, read: _Read, left: int, clean: Callable[[str], str]) -> None:
        self.read, self.left, self.clean, self.cut = read, left, clean, False


def _json_width(text: str) -> int:
    """Characters of ``text`` as a JSON string (quotes and escapes)."""
    return len(encode_basestring(text))


def _fit(text: str, room: int, in_json: bool) -> str | None:
    """The longest prefix of ``text`` that takes at most ``room`` characters (quoted), or None."""
    keep = room - 2
    if keep < 0:
        return None
    piece = text[:keep]
    if in_json:
        width = _json_width(piece)
        while width > room:  # escapes: shrink in proportion, at least one character a round
            keep = min(keep - 1, keep * room // width)
            piece = text[:keep]
            width = _json_width(piece)
    return piece


def _child(raw: Any, depth: int, walk: _Walk, in_json: bool) -> Any:
    """One element of a container at ``depth``, within what is left, or ``_SKIP``."""
    kind, payload = walk.read(raw)
    room = walk.left
    if kind == _STRING:
        text = walk.clean(payload)
        width = _json_width(text) if in_json else len(text) + 2
        if width > room:
            cut = _fit(text, room, in_json)
            if cut is None:
                return _SKIP
            text, walk.cut = cut, True
            width = _json_width(text) if in_json else len(text) + 2
        walk.left -= width
        return text
    if kind == _BYTES:
        data: bytes = payload
        width = 2 * len(data) + 2 if in_json else len(data) + 2
        if width > room:
            if room < 2:
                return _SKIP
            data, walk.cut = data[: (room - 2) // 2 if in_json else room - 2], True
            width = 2 * len(data) + 2 if in_json else len(data) + 2
        walk.left -= width
        return data.hex() if in_json else data
    if kind == _SCALAR or kind == _NULL:
        width = 24 if isinstance(payload, float) else len(repr(payload))  # repr: JSON's width
        if width > room:
            return _SKIP
        walk.left -= width
        return payload
    if depth >= MAX_VALUE_DEPTH:
        if room < 4:
            return _SKIP
        walk.left -= 4
        walk.cut = True
        return None
    if room < 2:
        return _SKIP
    if kind == _ARRAY:
        return _array(payload, depth + 1, walk, in_json)
    tree = _kvlist(payload, depth + 1, walk)
    return tree if in_json else json.dumps(tree, ensure_ascii=False)


def _array(values: Iterable[Any], depth: int, walk: _Walk, in_json: bool) -> Any:
    """An array's elements that fit (a list in JSON, else a tuple)."""
    walk.left -= 2
    items: list[Any] = []
    for raw in values:
        sep = 2 if items else 0
        walk.left -= sep
        item = _child(raw, depth, walk, in_json)
        if item is _SKIP:
            walk.left += sep
            walk.cut = True
            break
        items.append(item)
    return items if in_json else tuple(items)


def _kvlist(pairs: Iterable[tuple[str, Any]], depth: int, walk: _Walk) -> dict[str, Any]:
    """A key-value list's entries that fit, as a dict for ``json.dumps``."""
    walk.left -= 2
    tree: dict[str, Any] = {}
    for key, raw in pairs:
        key = walk.clean(key)
        head = _json_width(key) + 2 + (2 if tree else 0)  # "key": , separator
        walk.left -= head
        item = _child(raw, depth, walk, True)  # _SKIP when nothing is left (or less than nothing)
        if item is _SKIP:
            walk.left += head
            walk.cut = True
            break
        tree[key] = item  # a repeated key keeps its last value
    return tree


def _value(raw: Any, read: _Read, limit: int, clean: Callable[[str], str]) -> tuple[AttrValue, int, bool]:
    """One attribute value bounded by ``limit``, its size in bytes, and whether it was cut."""
    kind, payload = read(raw)
    if kind == _STRING:
        text = clean(payload)
        cut = len(text) > limit
        if cut:
            text = text[:limit]
        return text, _text_size(text), cut
    if kind == _BYTES:
        data: bytes = payload
        cut = len(data) > limit
        if cut:
            data = data[:limit]
        return data, _sizeof(data) + _OBJ, cut
    if kind == _SCALAR:
        return payload, _NUMBER, False
    if kind == _NULL:
        return None, 0, False
    if limit < 2:
        return None, 0, True
    walk = _Walk(read, limit, clean)
    if kind == _KVLIST:
        text = json.dumps(_kvlist(payload, 1, walk), ensure_ascii=False)
        return text, _text_size(text), walk.cut
    items: tuple[AttrValue, ...] = _array(payload, 1, walk, False)
    return items, _value_size(items), walk.cut


def _keep(
    out: dict[str, AttrValue], key: str, raw: Any, read: _Read, limit: int, clean: Callable[[str], str]
) -> tuple[int, int]:
    """Put one attribute in ``out`` (the slow path); its size beyond ``_PAIR``, and cuts."""
    if len(key) > limit:
        return 0, 1
    value, size, cut = _value(raw, read, limit, clean)
    key = clean(key)
    out[key] = value
    return _text_size(key) + size - _PAIR, int(cut)


def _keep_all(
    pairs: Iterable[tuple[str, Any]], read: _Read, limit: int, clean: Callable[[str], str]
) -> tuple[dict[str, AttrValue], int, int]:
    """Every attribute of ``pairs`` (event attributes): the dict, its size in bytes, cuts."""
    out: dict[str, AttrValue] = {}
    size = cuts = 0
    for key, raw in pairs:
        more, cut = _keep(out, key, raw, read, limit, clean)
        size += more
        cuts += cut
    return out, size + len(out) * _ENTRY + (_DICT if out else _EMPTY_DICT), cuts


def _text_or_list(read: tuple[int, Any]) -> bool:
    """Whether a value read (``_Read``) is kept as a non-empty string: a non-empty string, or a
    key-value list (kept as its JSON text)."""
    kind, payload = read
    return kind == _KVLIST or (kind == _STRING and bool(payload))


def _settle_text(
    out: dict[str, AttrValue], deferred: dict[str, Any], text: DocumentText, put: Callable[[str, Any], tuple[int, int]]
) -> tuple[int, int]:
    """After a span's attributes were read with documents' text deferred (``deferred``: each
    content or metadata key left unread, with its raw value; ``out`` holds ``""`` for such a
    content and ``None`` for such metadata, in their places): drop what ``DocumentText`` drops,
    and ``put`` back the rest. The size and cuts this adds."""
    size = cuts = 0
    for table in text.tables:
        if table[0][0] not in out:
            continue
        for id_key, content_key, metadata_key in table:
            doc_id = out.get(id_key)
            if type(doc_id) is str and doc_id:
                if deferred.pop(content_key, None) is not None:
                    size += len(content_key)  # "" inline, as ``_keep`` counts it
                if metadata_key in deferred:
                    del deferred[metadata_key], out[metadata_key]
            elif doc_id is None and content_key not in out and metadata_key not in out:
                break
    for key, raw in deferred.items():
        more, cut = put(key, raw)
        size += more
        cuts += cut
    return size, cuts


# -- protobuf ---------------------------------------------------------------------------------
# ragmon/otlp/_walker.pyx mirrors _from_message, _pb_attributes, _pb_flat_array and _pb_events (and
# reads values through _keep with its own reader): change them together; tests/test_decode_compiled.py
# compares the two decoders.


def _pb_read(value: Any) -> tuple[int, Any]:
    kind = value.WhichOneof("value")
    if kind is None:
        return _NULL, None
    if kind == "string_value":
        return _STRING, value.string_value
    if kind == "bytes_value":
        return _BYTES, value.bytes_value
    if kind == "array_value":
        return _ARRAY, value.array_value.values
    if kind == "kvlist_value":
        return _KVLIST, ((kv.key, kv.value) for kv in value.kvlist_value.values)
    return _SCALAR, getattr(value, kind)


_NUMBERS = frozenset({"int_value", "double_value", "bool_value"})


def _pb_flat_array(values: Any, limit: int) -> tuple[tuple[AttrValue, ...], int] | None:
    """A flat array of ASCII strings and numbers within ``limit`` (as ``_array`` counts, a
    number as 24) as a tuple, and its size in bytes; else None (then ``_value`` walks it)."""
    items: list[AttrValue] = []
    left = limit  # the first element has no separator, the brackets take 2
    size = _TUPLE
    for value in values:
        kind = value.WhichOneof("value")
        if kind == "string_value":
            text: str = value.string_value
            if not text.isascii():
                return None
            left -= len(text) + 4
            size += len(text) + _STR + 8
            items.append(text)
        elif kind in _NUMBERS:
            left -= 26
            size += _NUMBER + 8
            items.append(getattr(value, kind))
        else:
            return None
        if left < 0:
            return None
    return tuple(items), size


def _pb_attributes(
    attributes: Any, wanted: AttributeFilter, limit: int, documents: DocumentText | None = None, trace_id: bytes = b""
) -> tuple[dict[str, AttrValue], int, int]:
    """The wanted entries of an attribute map, bounded; their size in bytes (the dict and every
    key and value object) and the number of cuts. Keys are iterated; only wanted values are
    converted: ASCII strings within the limit and numbers inline, anything else by ``_keep``.
    ``documents``: documents' text left out, not read, unless the trace ``trace_id`` keeps it (asked
    at the first document key met)."""
    keys, prefixes = wanted.keys, wanted.prefixes
    out: dict[str, AttrValue] = {}
    size = cuts = 0
    kinds, keep = (documents.kinds, documents.keep) if documents is not None else (None, None)
    deferred: dict[str, Any] = {}
    for key in attributes:
        if key in keys or key.startswith(prefixes):
            value = attributes[key]
            kind = value.WhichOneof("value")
            if kinds is not None and key in kinds and len(key) <= limit:
                if keep is not None:  # asked once a span, at its first document key
                    kinds, keep = (None if keep(trace_id) else kinds), None
                # a metadata, or a content kept as a non-empty string (its size says so: not read)
                # or as a key-value list's JSON text
                if kinds is not None and (
                    not kinds[key] or (kind == "string_value" and value.ByteSize() > 2) or kind == "kvlist_value"
                ):
                    out[key] = "" if kinds[key] else None
                    deferred[key] = value
                    continue
            if kind == "string_value":
                string: str = value.string_value
                n = len(key) + len(string)
                if n <= limit and string.isascii() and key.isascii():
                    out[key] = string
                    size += n
                    continue
            elif kind in _NUMBERS and len(key) <= limit and key.isascii():
                out[key] = getattr(value, kind)
                size += len(key) + _NUMBER - _STR
                continue
            elif kind == "array_value" and len(key) <= limit and key.isascii():
                flat = _pb_flat_array(value.array_value.values, limit)
                if flat is not None:
                    out[key] = flat[0]
                    size += len(key) + flat[1] - _STR
                    continue
            more, cut = _keep(out, key, value, _pb_read, limit, _same)
            size += more
            cuts += cut
    if deferred and documents is not None:
        more, cut = _settle_text(out, deferred, documents, lambda key, raw: _keep(out, key, raw, _pb_read, limit, _same))
        size += more
        cuts += cut
    return out, size + len(out) * _ENTRY + (_DICT if out else _EMPTY_DICT), cuts


def _bounded_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and 1 if it was cut."""
    return (text[:limit], 1) if len(text) > limit else (text, 0)


# -- Python values (the OpenTelemetry SDK's ReadableSpan, already decoded) --------------------------


def _py_read(value: Any) -> tuple[int, Any]:
    """The kind of an SDK attribute value (as the SDK's OTLP encoder maps it)."""
    if value is None:
        return _NULL, None
    if isinstance(value, str):
        return _STRING, value
    if isinstance(value, bool | int | float):
        return _SCALAR, value
    if isinstance(value, bytes):
        return _BYTES, value
    if isinstance(value, Mapping):
        return _KVLIST, ((str(k), v) for k, v in value.items())
    if isinstance(value, Sequence):
        return _ARRAY, value
    return _STRING, str(value)


def _py_attributes(
    attributes: Mapping[str, Any] | None, wanted: AttributeFilter, limit: int,
    documents: DocumentText | None = None, trace_id: bytes = b"",
) -> tuple[dict[str, AttrValue], int, int]:
    """The wanted entries of an SDK attribute mapping, bounded, sized and cut as
    ``_pb_attributes`` does (ASCII strings within the limit inline, anything else by ``_keep``;
    ``documents``' text left out as there)."""
    out: dict[str, AttrValue] = {}
    size = cuts = 0
    kinds, keep = (documents.kinds, documents.keep) if documents is not None else (None, None)
    deferred: dict[str, Any] = {}
    if attributes:
        keys, prefixes = wanted.keys, wanted.prefixes
        for key, value in attributes.items():
            if key in keys or key.startswith(prefixes):
                if kinds is not None and key in kinds and len(key) <= limit:
                    if keep is not None:  # asked once a span, at its first document key
                        kinds, keep = (None if keep(trace_id) else kinds), None
                    if kinds is not None and (not kinds[key] or _text_or_list(_py_read(value))):
                        out[key] = "" if kinds[key] else None
                        deferred[key] = value
                        continue
                if type(value) is str and len(key) + len(value) <= limit and value.isascii() and key.isascii():
                    out[key] = value
                    size += len(key) + len(value)
                    continue
                more, cut = _keep(out, key, value, _py_read, limit, _same)
                size += more
                cuts += cut
    if deferred and documents is not None:
        more, cut = _settle_text(out, deferred, documents, lambda key, raw: _keep(out, key, raw, _py_read, limit, _same))
        size += more
        cuts += cut
    return out, size + len(out) * _ENTRY + (_DICT if out else _EMPTY_DICT), cuts


@dataclass(frozen=True, slots=True)
class SharedResource:
    """What every span of one resource shares: ``service.name`` (bounded), the kept resource
    attributes, their bytes (counted once per trace: module docstring), and the cuts made once."""

    service: str
    attributes: dict[str, AttrValue]
    size: int
    truncated: int


def kept_resource(attributes: Mapping[str, Any], selection: SpanSelection) -> SharedResource:
    """A resource's attributes (already decoded Python values) reduced as the decoders do."""
    limit = selection.max_value_chars
    raw = attributes.get(_SERVICE_NAME, "")
    service, cut = _bounded_text(str.__str__(raw) if isinstance(raw, str) else "", limit)  # a string, or none (as OTLP)
    resource, shared, cuts = _py_attributes(attributes, selection.resource, limit)
    return SharedResource(service, resource, shared + _text_size(service), cut + cuts)


def span_from_values(
    selection: SpanSelection,
    resource: SharedResource,
    ids: tuple[int, int, int],
    name: str,
    times: tuple[int, int],
    flags: int,
    kind: int,
    error: bool,
    attributes: Mapping[str, Any] | None,
    events: Iterable[tuple[str, int, Mapping[str, Any] | None]],
    *,
    count_resource: bool = True,
) -> tuple[Span | None, int]:
    """One ``Span`` from already-decoded values (an SDK span: integer ids ``(trace, span,
    parent or 0)``, OTLP ``kind``), kept, bounded and sized as the decoders do; and its cuts.
    None for an all-zero trace or span id (the receivers reject those). ``count_resource``:
    whether its size counts ``resource.size`` (the decoders count it on the first span of each
    trace of a body; module docstring)."""
    trace_id, span_id, parent_id = ids
    if not trace_id or not span_id:
        return None, 0
    limit = selection.max_value_chars
    size = _SPAN_BASE + resource.size if count_resource else _SPAN_BASE
    kept: list[SpanEvent] = []
    cuts = 0
    wanted_events = selection.events
    if wanted_events:
        more = 0
        for event_name, time_ns, event_attributes in events:
            if event_name in wanted_events:
                if len(kept) == MAX_EVENTS:
                    cuts += 1
                    break
                kept_attributes, extra, cut = _keep_all(
                    (event_attributes or {}).items(), _py_read, limit, _same
                )
                kept.append(SpanEvent(event_name, time_ns, kept_attributes))
                more += _EVENT_BASE + _text_size(event_name) + extra
                cuts += cut
        size += more + (_TUPLE + 8 * len(kept) if kept else 0)
    trace = trace_id.to_bytes(16, "big")
    kept_attrs, more, cut = _py_attributes(attributes, selection.attributes, limit, selection.document_text, trace)
    size += more
    cuts += cut
    name, cut = _bounded_text(name, limit)
    cuts += cut
    size += _text_size(name)
    span = Span(
        trace,
        span_id.to_bytes(8, "big"),
        parent_id.to_bytes(8, "big") if parent_id else b"",
        name,
        times[0],
        times[1],
        flags,
        kind,
        error,
        resource.service,
        kept_attrs,
        tuple(kept),
        resource.attributes,
        size,
    )
    return span, cuts


def python_decode_protobuf(body: bytes, selection: SpanSelection, max_bytes: int = sys.maxsize) -> Decoded:
    """Decode a binary ``ExportTraceServiceRequest``; ``DecodeError`` if it does not parse,
    ``DecodedTooLargeError`` once its spans take more than ``max_bytes`` (``Span.size``).
    The pure-Python decoder: ``decode_protobuf`` unless the compiled one is built (see ``DECODER``)."""
    request = TraceRequest()
    try:
        request.ParseFromString(body)
    except (_ProtobufDecodeError, ValueError, RuntimeError) as exc:
        raise DecodeError(f"invalid OTLP protobuf: {exc}") from None
    return _from_message(request, selection, max_bytes)


def _from_message(request: Any, selection: SpanSelection, max_bytes: int) -> Decoded:
    result = Decoded()
    held = 0
    spans = result.spans
    wanted_events = selection.events
    limit = selection.max_value_chars
    text = selection.document_text
    for resource_spans in request.resource_spans:
        resource_attrs = resource_spans.resource.attributes
        service = resource_attrs[_SERVICE_NAME].string_value if _SERVICE_NAME in resource_attrs else ""
        service, cut = _bounded_text(service, limit)
        resource, shared, cuts = _pb_attributes(resource_attrs, selection.resource, limit)
        result.truncated += cut + cuts
        shared += _text_size(service)  # once per trace of this resource (module docstring)
        counted: set[bytes] = set()
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id, span.span_id
                if len(trace_id) != 16 or trace_id == _NO_TRACE:
                    result.reject("invalid_trace_id")
                    continue
                if len(span_id) != 8 or span_id == _NO_SPAN:
                    result.reject("invalid_span_id")
                    continue
                parent = span.parent_span_id
                if parent == _NO_SPAN:
                    parent = b""
                elif parent and len(parent) != 8:
                    result.reject("invalid_parent_span_id")
                    continue
                events: tuple[SpanEvent, ...] = ()
                size = _SPAN_BASE
                if trace_id not in counted:
                    counted.add(trace_id)
                    size += shared
                if wanted_events and span.events:
                    events, more, cuts = _pb_events(span.events, wanted_events, limit)
                    size += more
                    result.truncated += cuts
                attributes, more, cuts = _pb_attributes(span.attributes, selection.attributes, limit, text, trace_id)
                size += more
                name: str = span.name
                if len(name) > limit:
                    name = name[:limit]
                    cuts += 1
                size += len(name) + _STR if name.isascii() else _sizeof(name) + _OBJ
                if cuts:
                    result.truncated += cuts
                held += size
                if held > max_bytes:
                    spans.clear()  # the error's traceback holds this frame: not what was decoded
                    raise DecodedTooLargeError(max_bytes)
                spans.append(
                    Span(  # positional: 2.5x faster than by keyword; in the order of Span's fields
                        trace_id,
                        span_id,
                        parent,
                        name,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        span.flags,
                        span.kind,
                        span.status.code == _STATUS_ERROR,
                        service,
                        attributes,
                        events,
                        resource,
                        size,
                    )
                )
    return result


def _pb_events(events: Any, wanted: frozenset[str], limit: int) -> tuple[tuple[SpanEvent, ...], int, int]:
    """The wanted events (at most ``MAX_EVENTS``), their size in bytes, and cuts."""
    kept: list[SpanEvent] = []
    size = cuts = 0
    for event in events:
        name = event.name
        if name in wanted:
            if len(kept) == MAX_EVENTS:
                cuts += 1
                break
            attributes, more, cut = _keep_all(
                ((kv.key, kv.value) for kv in event.attributes), _pb_read, limit, _same
            )
            kept.append(SpanEvent(name, event.time_unix_nano, attributes))
            size += _EVENT_BASE + _text_size(name) + more
            cuts += cut
    return tuple(kept), size + (_TUPLE + 8 * len(kept) if kept else 0), cuts


def count_spans(body: bytes) -> int | None:
    """Number of spans in a protobuf body, or ``None`` if it does not parse (for reject counters)."""
    request = TraceRequest()
    try:
        request.ParseFromString(body)
    except (_ProtobufDecodeError, ValueError, RuntimeError):
        return None
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


# -- JSON (OTLP/JSON: hex ids, lowerCamelCase keys, int64 as strings or numbers) ----------------


class _Malformed(ValueError):
    """A value of the wrong JSON type or out of its field's range."""


_SPAN_ERRORS = (_Malformed, ValueError, TypeError, AttributeError, ArithmeticError)
"""What rejects one JSON span (``_Malformed`` is what the checks raise; the rest is a net)."""
_UINT64, _UINT32 = (0, 2**64 - 1), (0, 2**32 - 1)
_INT64, _INT32 = (-(2**63), 2**63 - 1), (-(2**31), 2**31 - 1)
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: only then can a decoded string hold a lone surrogate."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_surrogates(text: str) -> str:
    """``text`` with lone surrogates (valid pairs are joined by ``json.loads``) as U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _json_int(value: Any, bounds: tuple[int, int]) -> int:
    """An integer field: absent, a decimal string or an integral number within ``bounds``."""
    if value is None:
        return 0
    kind = type(value)
    if kind is int:
        number: int = value
    elif kind is str and _INTEGER_TEXT.fullmatch(value):
        number = int(value)
    elif kind is float and value.is_integer():  # False for NaN and infinities
        number = int(value)
    else:
        raise _Malformed(f"not an integer: {value!r:.40}")
    if not bounds[0] <= number <= bounds[1]:
        raise _Malformed(f"integer out of range: {number}")
    return number


def _json_double(value: Any) -> float:
    """A double: a number, or a string (``"NaN"``, ``"Infinity"``, ``"1.5"``, …)."""
    kind = type(value)
    if kind is float:
        number: float = value
        return number
    if kind is int or kind is str:
        return float(value)  # OverflowError (a huge int), ValueError: malformed
    raise _Malformed(f"not a number: {value!r:.40}")


def _json_list(value: Any) -> list[Any]:
    """A JSON array field (absent or null: empty)."""
    if value is None:
        return []
    if type(value) is not list:
        raise _Malformed(f"expected a list, got {type(value).__name__}")
    return value


def _json_object(value: Any) -> dict[str, Any]:
    """A JSON object field (absent or null: empty)."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise _Malformed(f"expected an object, got {type(value).__name__}")
    return value


def _json_text(value: Any) -> str:
    """A string field (absent or null: empty)."""
    if value is None:
        return ""
    if type(value) is not str:
        raise _Malformed(f"expected a string, got {type(value).__name__}")
    return value


def _json_pairs(values: Any) -> Iterator[tuple[str, Any]]:
    """``[{"key": …, "value": …}, …]`` as pairs, checked as they are read."""
    for kv in _json_list(values):
        kv = _json_object(kv)
        yield _json_text(kv.get("key")), kv.get("value")


def _json_read(value: Any) -> tuple[int, Any]:
    """An OTLP/JSON ``AnyValue``; the first field present wins (OTLP sends one)."""
    if value is None:
        return _NULL, None
    value = _json_object(value)
    if (text := value.get("stringValue")) is not None:
        return _STRING, _json_text(text)
    if (number := value.get("intValue")) is not None:
        return _SCALAR, _json_int(number, _INT64)
    if (number := value.get("doubleValue")) is not None:
        return _SCALAR, _json_double(number)
    if (flag := value.get("boolValue")) is not None:
        if type(flag) is not bool:
            raise _Malformed(f"not a boolean: {flag!r:.40}")
        return _SCALAR, flag
    if "arrayValue" in value:
        return _ARRAY, _json_list(_json_object(value["arrayValue"]).get("values"))
    if (data := value.get("bytesValue")) is not None:
        return _BYTES, base64.b64decode(_json_text(data))
    if "kvlistValue" in value:
        return _KVLIST, _json_pairs(_json_object(value["kvlistValue"]).get("values"))
    return _NULL, None


def _json_attributes(
    items: Any, wanted: AttributeFilter | None, limit: int, clean: Callable[[str], str],
    documents: DocumentText | None = None, trace_id: bytes = b"",
) -> tuple[dict[str, AttrValue], int, int]:
    """The wanted (``None``: all) attributes of a JSON list, bounded; size in bytes and cuts.
    ASCII strings within the limit inline (nothing to clean in them), anything else by ``_keep``;
    ``documents``' text left out as ``_pb_attributes`` does (a key repeated keeps its last value)."""
    keys, prefixes = (wanted.keys, wanted.prefixes) if wanted is not None else (None, ())
    out: dict[str, AttrValue] = {}
    size = cuts = 0
    kinds, keep = (documents.kinds, documents.keep) if documents is not None else (None, None)
    deferred: dict[str, Any] = {}
    for kv in _json_list(items):
        if type(kv) is not dict:
            kv = _json_object(kv)  # raises unless null
        key = kv.get("key")
        if type(key) is not str:
            key = _json_text(key)  # raises unless null
        if keys is not None and key not in keys and not key.startswith(prefixes):
            continue
        value = kv.get("value")
        if kinds is not None and key in kinds and len(key) <= limit:
            if keep is not None:  # asked once a span, at its first document key
                kinds, keep = (None if keep(trace_id) else kinds), None
            if kinds is not None:
                if not kinds[key] or _text_or_list(_json_read(value)):
                    out[key] = "" if kinds[key] else None
                    deferred[key] = value
                    continue
                deferred.pop(key, None)  # an earlier value of the key, now replaced
        if type(value) is dict:
            text = value.get("stringValue")
            if type(text) is str:
                n = len(key) + len(text)
                if n <= limit and text.isascii() and key.isascii():
                    out[key] = text
                    size += n
                    continue
            elif (text is None and type(number := value.get("doubleValue")) is float and "intValue" not in value
                  and len(key) <= limit and key.isascii()):  # the order of _json_read
                out[key] = number
                size += len(key) + _NUMBER - _STR
                continue
        more, cut = _keep(out, key, value, _json_read, limit, clean)
        size += more
        cuts += cut
    if deferred and documents is not None:
        more, cut = _settle_text(out, deferred, documents, lambda key, raw: _keep(out, key, raw, _json_read, limit, clean))
        size += more
        cuts += cut
    return out, size + len(out) * _ENTRY + (_DICT if out else _EMPTY_DICT), cuts


_KINDS = {"SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _json_enum(value: Any, names: Mapping[str, int]) -> int:
    """An enum: its name (unknown names read as 0) or its number."""
    if type(value) is str and not _INTEGER_TEXT.fullmatch(value):
        return names.get(value, 0)
    return _json_int(value, _INT32)


def _json_id(value: Any, size: int) -> bytes | None:
    """A trace or span id in hex (or base64, protobuf's JSON for bytes); ``b""`` when absent or
    all zero, ``None`` when invalid."""
    if value is None or value == "":
        return b""
    if type(value) is not str or len(value) > 2 * size:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        try:  # some producers send base64 (protobuf's canonical JSON for bytes)
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return None
    if len(raw) != size:
        return None
    return b"" if raw == bytes(size) else raw


def decode_json(body: bytes, selection: SpanSelection, max_bytes: int = sys.maxsize) -> Decoded:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest``; ``DecodeError`` if it is not one,
    ``DecodedTooLargeError`` once its spans take more than ``max_bytes`` (``Span.size``)."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        request = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise DecodeError("invalid OTLP/JSON: expected an object with resourceSpans")
    clean = _replace_surrogates if _SURROGATE_ESCAPE.search(text) else _same
    try:
        return _from_json(request, selection, clean, max_bytes)
    except _Malformed as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc}") from None


def _from_json(
    request: Mapping[str, Any], selection: SpanSelection, clean: Callable[[str], str], max_bytes: int,
) -> Decoded:
    result = Decoded()
    limit = selection.max_value_chars
    held = kept = 0
    for resource_spans in _json_list(request.get("resourceSpans")):
        resource_spans = _json_object(resource_spans)
        resource: dict[str, AttrValue] = {}
        service, shared, valid = "", 0, True
        counted: set[bytes] = set()
        try:
            resource_attrs = _json_object(resource_spans.get("resource")).get("attributes")
            resource, shared, cuts = _json_attributes(resource_attrs, selection.resource, limit, clean)
            service = ""
            for key, value in _json_pairs(resource_attrs):
                if key == _SERVICE_NAME:  # the last one, as in a protobuf map
                    kind, payload = _json_read(value)
                    service = clean(payload) if kind == _STRING else ""
            service, cut = _bounded_text(service, limit)
            shared += _text_size(service)  # once per trace of this resource (module docstring)
            result.truncated += cuts + cut
        except _SPAN_ERRORS:
            valid = False  # every span of this resource is rejected
        for scope_spans in _json_list(resource_spans.get("scopeSpans")):
            for span in _json_list(_json_object(scope_spans).get("spans")):
                if not valid:
                    result.reject("malformed_span")
                    continue
                try:
                    _json_span(span, selection, service, resource, (shared, counted), clean, result)
                except _SPAN_ERRORS:
                    result.reject("malformed_span")
                    continue
                if len(result.spans) > kept:
                    kept = len(result.spans)
                    held += result.spans[-1].size
                    if held > max_bytes:
                        result.spans.clear()  # the error's traceback holds this frame: not what was decoded
                        raise DecodedTooLargeError(max_bytes)
    return result


def _json_span(
    span: Any, selection: SpanSelection, service: str, resource: dict[str, AttrValue],
    shared: tuple[int, set[bytes]], clean: Callable[[str], str], result: Decoded,
) -> None:
    """Append one JSON span to ``result`` (or reject it for its ids); ``_Malformed`` if malformed.
    ``shared``: the bytes the resource's spans share and the traces that count them already
    (the span adds its trace once it is appended)."""
    span = _json_object(span)
    trace_id = _json_id(span.get("traceId"), 16)
    span_id = _json_id(span.get("spanId"), 8)
    parent = _json_id(span.get("parentSpanId"), 8)
    if not trace_id:
        result.reject("invalid_trace_id")
        return
    if not span_id:
        result.reject("invalid_span_id")
        return
    if parent is None:
        result.reject("invalid_parent_span_id")
        return
    limit = selection.max_value_chars
    shared_size, counted = shared
    first = trace_id not in counted
    size = _SPAN_BASE + shared_size if first else _SPAN_BASE
    events: list[SpanEvent] = []
    cuts = 0
    for event in _json_list(span.get("events")):
        event = _json_object(event)
        name = _json_text(event.get("name"))
        if name in selection.events:
            if len(events) == MAX_EVENTS:
                cuts += 1
                break
            attributes, more, cut = _json_attributes(event.get("attributes"), None, limit, clean)
            events.append(SpanEvent(name, _json_int(event.get("timeUnixNano"), _UINT64), attributes))
            size += _EVENT_BASE + _text_size(name) + more
            cuts += cut
    kept_events = tuple(events)
    attributes, more, cut = _json_attributes(
        span.get("attributes"), selection.attributes, limit, clean, selection.document_text, trace_id
    )
    name, name_cut = _bounded_text(clean(_json_text(span.get("name"))), limit)
    status = _json_object(span.get("status"))
    decoded = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_ns=_json_int(span.get("startTimeUnixNano"), _UINT64),
        end_ns=_json_int(span.get("endTimeUnixNano"), _UINT64),
        flags=_json_int(span.get("flags"), _UINT32),
        kind=_json_enum(span.get("kind"), _KINDS),
        error=_json_enum(status.get("code"), _STATUS_CODES) == _STATUS_ERROR,
        service=service,
        attributes=attributes,
        events=kept_events,
        resource=resource,
        size=size + more + _text_size(name) + (_TUPLE + 8 * len(kept_events) if kept_events else 0),
    )
    result.spans.append(decoded)
    if first:
        counted.add(trace_id)
    result.truncated += cuts + cut + name_cut


# -- the protobuf decoder that runs ------------------------------------------------------------------


def _choose() -> tuple[str, Callable[[bytes, SpanSelection, int], Decoded]]:
    """The compiled decoder (``ragmon/otlp/_walker.pyx``: the same spans, counts and errors as
    ``python_decode_protobuf``, several times faster) when it is built, unless the environment
    variable ``RAGMON_DECODER`` is on (``ragmon.compiled.switch``); else the pure-Python one."""
    if use_compiled_decoder():
        try:
            from ragmon.otlp._walker import decode_protobuf as compiled
        except ImportError:
            pass
        else:
            return "compiled", compiled
    return "python", python_decode_protobuf


DECODER, decode_protobuf = _choose()
"""``DECODER``: which protobuf decoder runs, ``compiled`` or ``python`` (``ragmon_build_info``'s
``decoder`` label). ``decode_protobuf(body, selection)``: that decoder."""
