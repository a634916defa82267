"""OTLP bodies for tests/test_shipped_limits.py: RAG traces made with the real OpenTelemetry
SDK and copied into other traces (``sdk_trace``, ``retrace``, ``otlp_request``), trace ids in
or out of the judge's sample (``trace_id``), and the worst-shaped ingest bodies of a size
(``Bodies``): protobuf of minimal spans, OTLP/JSON whose attribute is an array of small
integers or of empty objects, /v1/feedback JSON of empty arrays, and their gzip."""

from __future__ import annotations

import gzip
import random
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Status, StatusCode, Tracer


def otlp_request(groups: Sequence[tuple[str, Sequence[SpanMessage]]]) -> bytes:
    """An ``ExportTraceServiceRequest``: per (service, spans) one ResourceSpans."""
    request = ExportTraceServiceRequest()
    for service, spans in groups:
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.add(key="service.name").value.string_value = service
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "ragmon-shipped-limits"
        scope_spans.spans.extend(spans)
    return bytes(request.SerializeToString())


UNSAMPLED_LOW = 2**64 - 1
"""Lower 8 bytes of a trace id no sample rate below 1 takes (``low < rate * 2**64``)."""


def trace_id(low: int) -> bytes:
    """A 16-byte trace id with random upper bytes and ``low`` as its lower 8 (the judge samples
    a trace when ``low < sample_rate * 2**64``)."""
    return secrets.token_bytes(8) + low.to_bytes(8, "big")


class _Ids(IdGenerator):
    """The SDK's ids, with trace ids outside the judge's sample (``UNSAMPLED_LOW``)."""

    def generate_span_id(self) -> int:
        return random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(trace_id(UNSAMPLED_LOW), "big")


_UNLIMITED = SpanLimits(max_span_attributes=100_000, max_attribute_length=None, max_span_attribute_length=None)


def sdk_trace(build: Callable[[Tracer], None], service: str = "rag-api") -> list[SpanMessage]:
    """The spans ``build`` makes with the real OpenTelemetry SDK (no attribute limits), as the
    SDK's OTLP exporters encode them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=_Ids(), span_limits=_UNLIMITED)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("shipped-limits"))
    provider.shutdown()
    request = encode_spans(exporter.get_finished_spans())
    return [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


QUERY_MARK = "query-00000000:"
"""The start of a query ``retrace`` numbers."""


def retrace(spans: Sequence[SpanMessage], new: bytes, number: int | None = None) -> list[SpanMessage]:
    """Copies of one trace's spans in trace ``new``; with ``number``, a query (``input.value``)
    that begins with ``QUERY_MARK`` begins with that number instead (no two traces alike)."""
    copies = []
    for span in spans:
        copied = SpanMessage()
        copied.CopyFrom(span)
        copied.trace_id = new
        if number is not None:
            for attribute in copied.attributes:
                text = attribute.value.string_value
                if attribute.key == "input.value" and text.startswith(QUERY_MARK):
                    attribute.value.string_value = f"query-{number:08d}:{text[len(QUERY_MARK):]}"
        copies.append(copied)
    return copies


def text_of(n: int, seed: int = 0) -> str:
    """``n`` printable ASCII characters, different for each seed."""
    base = f"{seed:08d}-ragmon-shipped-limits-"
    return (base * (n // len(base) + 1))[:n]


def minimal_spans_protobuf(size: int) -> bytes:
    """An ``ExportTraceServiceRequest`` of at most ``size`` bytes holding as many minimal valid
    spans (a trace id and a span id, one trace) as fit: the most spans a body can carry."""
    request = ExportTraceServiceRequest.FromString(otlp_request([("x", [])]))
    spans = request.resource_spans[0].scope_spans[0].spans
    tid = trace_id(UNSAMPLED_LOW)
    one = SpanMessage(trace_id=tid, span_id=bytes(8)).ByteSize() + 2  # the field's tag and length
    add = spans.add
    for i in range((size - request.ByteSize() - 16) // one):
        add(trace_id=tid, span_id=struct.pack(">Q", i + 1))
    while request.ByteSize() <= size:
        add(trace_id=tid, span_id=struct.pack(">Q", len(spans) + 1))
    del spans[-1]
    return bytes(request.SerializeToString())


def _json_frame(spans: str) -> str:
    return '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"x"}}]},' \
        '"scopeSpans":[{"scope":{"name":"x"},"spans":[' + spans + "]}]}]}"


def json_array_body(size: int, element: str) -> bytes:
    """OTLP/JSON of about ``size`` bytes (at most): one span whose ``input.value`` is an
    ``arrayValue`` of ``element`` repeated (``{"intValue":"1"}``, ``{}``)."""
    head = '{"traceId":"' + trace_id(UNSAMPLED_LOW).hex() + '","spanId":"00000000000000aa","name":"s",' \
        '"startTimeUnixNano":"1","endTimeUnixNano":"2",' \
        '"attributes":[{"key":"input.value","value":{"arrayValue":{"values":['
    tail = "]}}}]}"
    frame = _json_frame(head + tail)
    n = (size - len(frame) + 1) // (len(element) + 1)
    body = _json_frame(head + ",".join([element] * n) + tail).encode()
    assert len(body) <= size, (len(body), size)
    return body


def feedback_array_body(size: int) -> bytes:
    """A ``/v1/feedback`` JSON body of about ``size`` bytes (at most): ``relevant_document_ids``
    holding empty arrays (three bytes of JSON each; refused once parsed)."""
    head = '{"trace_id":"' + "ab" * 16 + '","relevant_document_ids":['
    n = (size - len(head) - 2 + 1) // 3
    body = (head + ",".join(["[]"] * n) + "]}").encode()
    assert len(body) <= size, (len(body), size)
    return body


def rag_spans(tracer: Tracer, *, query: str, answer: str, ids: Sequence[str], contents: Sequence[str] | None = None,
              relevant: Sequence[str] = (), variant: str = "", model: str = "", error: bool = False) -> None:
    """One OpenInference RAG trace: a CHAIN root with input and output, a RETRIEVER child
    listing documents (ids, and contents when given), and an LLM call when ``model`` is set."""
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", query)
        root.set_attribute("output.value", answer)
        if variant:
            root.set_attribute("ragmon.variant", variant)
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            for i, doc in enumerate(ids):
                span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
                if contents is not None:
                    span.set_attribute(f"retrieval.documents.{i}.document.content", contents[i])
            if relevant:
                span.set_attribute("ragmon.relevant_document_ids", list(relevant))
        if model:
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", model)
                span.set_attribute("llm.token_count.prompt", 120)
                span.set_attribute("llm.token_count.completion", 30)
        if error:
            root.set_status(Status(StatusCode.ERROR, "failed"))


@dataclass
class Bodies:
    """The worst-shaped ingest bodies for one ``max_body_bytes``, built once and reused."""

    max_body: int
    protobuf: bytes = b""
    protobuf_gzip: bytes = b""
    json_integers: bytes = b""
    json_objects: bytes = b""
    json_objects_gzip: bytes = b""
    feedback: bytes = b""

    def build(self) -> Bodies:
        self.protobuf = minimal_spans_protobuf(self.max_body)
        self.protobuf_gzip = gzip.compress(self.protobuf, 6)
        self.json_integers = json_array_body(self.max_body, '{"intValue":"1"}')
        self.json_objects = json_array_body(self.max_body, "{}")
        self.json_objects_gzip = gzip.compress(self.json_objects, 6)
        self.feedback = feedback_array_body(self.max_body)
        return self

    def http_shapes(self) -> list[tuple[str, str, bytes, dict[str, str]]]:
        """(shape, path, body, headers) of every HTTP shape."""
        pb, js = {"Content-Type": "application/x-protobuf"}, {"Content-Type": "application/json"}
        gz = {"Content-Encoding": "gzip"}
        return [
            ("protobuf", "/v1/traces", self.protobuf, pb),
            ("protobuf gzip", "/v1/traces", self.protobuf_gzip, {**pb, **gz}),
            ("JSON integer array", "/v1/traces", self.json_integers, js),
            ("JSON empty objects", "/v1/traces", self.json_objects, js),
            ("JSON empty objects gzip", "/v1/traces", self.json_objects_gzip, {**js, **gz}),
            ("feedback JSON empty arrays", "/v1/feedback", self.feedback, js),
        ]
