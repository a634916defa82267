"""Making real OpenTelemetry SDK spans and their OTLP encodings for tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer


def record_spans(build: Callable[[Tracer], None], service: str = "rag-api", **resource: Any) -> Sequence[ReadableSpan]:
    """Run ``build`` with a real SDK tracer and return the finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("tests"))
    provider.shutdown()
    return exporter.get_finished_spans()


def to_protobuf(spans: Sequence[ReadableSpan]) -> bytes:
    """The OTLP protobuf body the SDK's exporters send for ``spans``."""
    return encode_spans(spans).SerializeToString()


def to_otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """The OTLP/JSON body for ``spans``: protobuf JSON mapping with hex trace and span ids."""
    data = MessageToDict(encode_spans(spans))

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in node and isinstance(node[key], str):
                    import base64

                    node[key] = base64.b64decode(node[key]).hex()
            for value in node.values():
                fix(value)
        elif isinstance(node, list):
            for value in node:
                fix(value)

    fix(data)
    return json.dumps(data).encode()
