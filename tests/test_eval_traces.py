"""``ragmon eval`` on OTLP/JSON trace dumps made by the real OpenTelemetry SDK."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import ragmon, run_json
from opentelemetry.trace import Tracer
from otel_helpers import record_spans, to_otlp_json

# (ranking as (chunk id, source doc), relevant source docs): rr by doc id 1, 1/2, 0
TRACES = [
    ([("c1", "A"), ("c2", "B")], ["A"]),
    ([("c3", "C"), ("c4", "A")], ["A"]),
    ([("c5", "D")], ["Z"]),
]


def _build(tracer: Tracer) -> None:
    for ranking, relevant in TRACES:
        with tracer.start_as_current_span("query") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "where is it?")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, (chunk, doc) in enumerate(ranking):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", chunk)
                    span.set_attribute(f"retrieval.documents.{i}.document.metadata", json.dumps({"doc_id": doc}))
                span.set_attribute("ragmon.relevant_document_ids", relevant)
    with tracer.start_as_current_span("GET /health"):  # not a RAG trace: skipped
        pass


def _dump(tmp_path: Path, pretty: bool) -> Path:
    spans = list(record_spans(_build))
    path = tmp_path / ("pretty.json" if pretty else "dump.jsonl")
    if pretty:
        path.write_text(json.dumps(json.loads(to_otlp_json(spans)), indent=2))
    else:  # as a Collector's file exporter writes: one request per line, here one per span
        path.write_text("".join(to_otlp_json([s]).decode() + "\n" for s in spans))
    return path


def test_dump_one_request_per_line_by_source_document(tmp_path: Path) -> None:
    out = run_json("eval", _dump(tmp_path, pretty=False), "--document-id", "metadata.doc_id", "--k", "1,2")
    assert out["queries"] == 3 and out["unlabelled"] == 0 and out["records"] == 3
    assert out["metrics"]["mrr"] == (1 + 0.5 + 0) / 3
    assert out["metrics"]["hit_rate@1"] == 1 / 3 and out["metrics"]["hit_rate@2"] == 2 / 3


def test_pretty_printed_dump_by_chunk_id(tmp_path: Path) -> None:
    out = run_json("eval", _dump(tmp_path, pretty=True), "--k", "1")
    assert out["queries"] == 3
    assert out["metrics"]["mrr"] == 0.0  # labels name source documents, the ranking has chunk ids


def test_bad_document_id_place_is_a_usage_error(tmp_path: Path) -> None:
    result = ragmon("eval", _dump(tmp_path, pretty=False), "--document-id", "doc_id")
    assert result.returncode == 2 and "--document-id" in result.stderr and "Traceback" not in result.stderr
