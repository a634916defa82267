"""A lean reading of OTLP's ``ExportTraceServiceRequest``: same wire format, fewer objects.

OTLP encodes attributes as ``repeated KeyValue {string key = 1; AnyValue value = 2}``, which
is byte for byte how protobuf encodes a ``map<string, AnyValue>``. ``TraceRequest`` declares
span, event-free resource and span attributes as such maps, so the C parser (upb) builds a
hash map per span and ragmon looks up the keys it reads without creating a Python object per
attribute; walking every ``KeyValue`` wrapper costs several times the parse itself. Fields
ragmon never reads (scope, links, dropped counts, trace state, …) are not declared: the
parser keeps them as unknown bytes and nothing converts them.

Differences from the official classes, all harmless for reading: a key repeated in one
attribute list keeps its last value (the official list keeps both; OTLP forbids repeats), and
map iteration order is unspecified. The descriptors live in a private pool, so they never
clash with ``opentelemetry-proto``'s.

What ``ragmon.otlp.decode`` relies on from the parser: the file is proto3, so every string it
declares (keys, names, string values, nested keys) is checked as UTF-8 while parsing, and a
message nested deeper than upb's limit (100) does not parse; both end in a protobuf
``DecodeError``. A declared field sent with another wire type is kept as an unknown field.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import (
    DescriptorProto,
    FieldDescriptorProto,
    FileDescriptorProto,
)

__all__ = ["TraceRequest"]

_PACKAGE = "ragmon.otlp.wire.v1"
_F = FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (name, number, type, label, message type or "")
_Field = tuple[str, int, int, int, str]

_MESSAGES: dict[str, tuple[_Field, ...]] = {
    "AnyValue": (
        ("string_value", 1, _F.TYPE_STRING, _OPTIONAL, ""),
        ("bool_value", 2, _F.TYPE_BOOL, _OPTIONAL, ""),
        ("int_value", 3, _F.TYPE_INT64, _OPTIONAL, ""),
        ("double_value", 4, _F.TYPE_DOUBLE, _OPTIONAL, ""),
        ("array_value", 5, _F.TYPE_MESSAGE, _OPTIONAL, "ArrayValue"),
        ("kvlist_value", 6, _F.TYPE_MESSAGE, _OPTIONAL, "KeyValueList"),
        ("bytes_value", 7, _F.TYPE_BYTES, _OPTIONAL, ""),
    ),
    "ArrayValue": (("values", 1, _F.TYPE_MESSAGE, _REPEATED, "AnyValue"),),
    "KeyValue": (
        ("key", 1, _F.TYPE_STRING, _OPTIONAL, ""),
        ("value", 2, _F.TYPE_MESSAGE, _OPTIONAL, "AnyValue"),
    ),
    "KeyValueList": (("values", 1, _F.TYPE_MESSAGE, _REPEATED, "KeyValue"),),
    "Resource": (("attributes", 1, _F.TYPE_MESSAGE, _REPEATED, "Resource.AttributesEntry"),),
    "Status": (("code", 3, _F.TYPE_INT32, _OPTIONAL, ""),),
    "Event": (
        ("time_unix_nano", 1, _F.TYPE_FIXED64, _OPTIONAL, ""),
        ("name", 2, _F.TYPE_STRING, _OPTIONAL, ""),
        ("attributes", 3, _F.TYPE_MESSAGE, _REPEATED, "KeyValue"),
    ),
    "Span": (
        ("trace_id", 1, _F.TYPE_BYTES, _OPTIONAL, ""),
        ("span_id", 2, _F.TYPE_BYTES, _OPTIONAL, ""),
        ("parent_span_id", 4, _F.TYPE_BYTES, _OPTIONAL, ""),
        ("name", 5, _F.TYPE_STRING, _OPTIONAL, ""),
        ("kind", 6, _F.TYPE_INT32, _OPTIONAL, ""),  # an enum on the wire: the same varint
        ("start_time_unix_nano", 7, _F.TYPE_FIXED64, _OPTIONAL, ""),
        ("end_time_unix_nano", 8, _F.TYPE_FIXED64, _OPTIONAL, ""),
        ("attributes", 9, _F.TYPE_MESSAGE, _REPEATED, "Span.AttributesEntry"),
        ("events", 11, _F.TYPE_MESSAGE, _REPEATED, "Event"),
        ("status", 15, _F.TYPE_MESSAGE, _OPTIONAL, "Status"),
        ("flags", 16, _F.TYPE_FIXED32, _OPTIONAL, ""),
    ),
    "ScopeSpans": (("spans", 2, _F.TYPE_MESSAGE, _REPEATED, "Span"),),
    "ResourceSpans": (
        ("resource", 1, _F.TYPE_MESSAGE, _OPTIONAL, "Resource"),
        ("scope_spans", 2, _F.TYPE_MESSAGE, _REPEATED, "ScopeSpans"),
    ),
    "TraceRequest": (("resource_spans", 1, _F.TYPE_MESSAGE, _REPEATED, "ResourceSpans"),),
}
_WITH_ATTRIBUTE_MAP = ("Resource", "Span")
_ONEOF = {"AnyValue": "value"}


def _attributes_entry() -> DescriptorProto:
    """``map<string, AnyValue>``'s entry type: what ``KeyValue`` is on the wire."""
    entry = DescriptorProto(name="AttributesEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=_OPTIONAL, type_name=f".{_PACKAGE}.AnyValue")
    return entry


def _file() -> FileDescriptorProto:
    file = FileDescriptorProto(name="ragmon/otlp/wire.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        if name in _WITH_ATTRIBUTE_MAP:
            message.nested_type.append(_attributes_entry())
        if name in _ONEOF:
            message.oneof_decl.add(name=_ONEOF[name])
        for field_name, number, kind, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if name in _ONEOF:
                field.oneof_index = 0
    return file


def _message_class(file: FileDescriptorProto, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


TraceRequest: Any = _message_class(_file(), "TraceRequest")
"""``ExportTraceServiceRequest`` with attribute maps: ``TraceRequest.FromString(body)``."""
