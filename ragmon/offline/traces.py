"""OTLP/JSON trace dumps as offline records: the same extraction as the sidecar, from a file.

A dump is what an OpenTelemetry Collector's file exporter writes (one
``ExportTraceServiceRequest`` as JSON per line) or one such request pretty-printed. Spans are
grouped by trace id, each trace's local root found as the sidecar does, and every trace with a
retrieval or a model call becomes a record keyed by its trace id (hex), with the query, the
answer, the reference answer and the contexts (document contents) when content was captured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ragmon.conventions import ConventionOptions, extract_rag_record, span_selection
from ragmon.errors import InputError
from ragmon.model import RagRecord, Span, Trace
from ragmon.offline.records import EvalRecord
from ragmon.errors import DecodeError
from ragmon.otlp.decode import decode_json
from ragmon.pipeline.assembly import local_root
from ragmon.scoring.records import final_ranking

__all__ = ["is_trace_dump", "records_from_requests", "read_whole_dump"]


def is_trace_dump(obj: Any) -> bool:
    """True for an OTLP/JSON ``ExportTraceServiceRequest``."""
    return isinstance(obj, dict) and "resourceSpans" in obj


def read_whole_dump(path: str) -> dict[str, Any] | None:
    """The file as one JSON request if it is a (pretty-printed) OTLP/JSON dump, else ``None``."""
    try:
        with open(path, "rb") as handle:
            obj = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return obj if is_trace_dump(obj) else None


def _contexts(record: RagRecord) -> list[str] | None:
    """The texts the generator saw, in rank order (the reranked list when there was one), or
    ``None`` unless every one was recorded: a partial context would judge claims as unsupported."""
    docs = record.reranked if record.reranked is not None else record.retrieved
    if not docs or any(d.content is None for d in docs):
        return None
    return [d.content for d in docs if d.content is not None]


def records_from_requests(
    path: str, requests: Iterable[tuple[int, dict[str, Any]]], options: ConventionOptions
) -> Iterator[EvalRecord]:
    """Records of the RAG traces in a sequence of ``(line, request)``; ``InputError`` on a bad line."""
    selection = span_selection(options)
    traces: dict[bytes, list[Span]] = {}
    first_line: dict[bytes, int] = {}
    for line, request in requests:
        if not is_trace_dump(request):
            raise InputError(path, 'expected an OTLP/JSON request with "resourceSpans" (the file started as a trace dump)', line)
        try:
            decoded = decode_json(json.dumps(request).encode(), selection)
        except DecodeError as exc:
            raise InputError(path, str(exc), line) from None
        if decoded.rejected:
            raise InputError(path, f"{decoded.rejected} span(s) rejected: {decoded.reason}", line)
        for span in decoded.spans:
            traces.setdefault(span.trace_id, []).append(span)
            first_line.setdefault(span.trace_id, line)
    for trace_id, spans in traces.items():
        record = extract_rag_record(Trace(trace_id, tuple(spans), local_root(spans)), options)
        if record is None or not record.has_retrieval:
            continue
        yield EvalRecord(
            path=path,
            line=first_line[trace_id],
            query_id=trace_id.hex(),
            query=record.query,
            retrieved=final_ranking(record),
            grades=dict(record.relevance) if record.relevance is not None else None,
            answer=record.answer,
            contexts=_contexts(record),
            reference_answer=record.reference_answer,
        )
