"""``ragmon.conventions``: spans made with the real OpenTelemetry SDK, encoded as OTLP, decoded
with the conventions' own selection (so the filter is proven sufficient), assembled by hand."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from otel_helpers import record_spans, to_otlp_json, to_protobuf

from ragmon.config import ScoringConfig
from ragmon.conventions import (
    EVENTS,
    SELECTION,
    ConventionOptions,
    attribute_filter,
    extract_rag_record,
    read_trace,
    span_selection,
)
from ragmon.otlp.decode import decode_json, decode_protobuf
from ragmon.model import Evaluation, LlmCall, ModelCalls, RagRecord, RetrievedDocument, Span, Trace

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


# -- helpers (also used by test_conventions_real.py) ------------------------------------------


def decode_trace(spans: Sequence[ReadableSpan], options: ConventionOptions = ConventionOptions(), encoding: str = "protobuf") -> Trace:
    """Encode ``spans`` as OTLP, decode them with the conventions' selection, assemble a Trace."""
    selection = span_selection(options)
    if encoding == "protobuf":
        decoded = decode_protobuf(to_protobuf(spans), selection)
    else:
        decoded = decode_json(to_otlp_json(spans), selection)
    assert decoded.rejected == 0
    got = decoded.spans
    assert len({s.trace_id for s in got}) == 1, "one trace at a time"
    ids = {s.span_id for s in got}
    roots = [s for s in got if not s.parent_span_id or s.has_remote_parent] or [
        s for s in got if s.parent_span_id not in ids
    ]
    return Trace(got[0].trace_id, tuple(got), roots[0] if roots else None)


def run(
    build: Callable[[Tracer], None],
    options: ConventionOptions = ConventionOptions(),
    encoding: str = "protobuf",
    **resource: Any,
) -> RagRecord | None:
    return extract_rag_record(decode_trace(record_spans(build, **resource), options, encoding), options)


def record(build: Callable[[Tracer], None], options: ConventionOptions = ConventionOptions(), **resource: Any) -> RagRecord:
    result = run(build, options, **resource)
    assert result is not None
    return result


@contextmanager
def span(tracer: Tracer, name: str, start_ms: int, end_ms: int, attrs: Mapping[str, Any] | None = None) -> Iterator[otel_trace.Span]:
    """A span with explicit times (ms after T0), nested under the current one."""
    with tracer.start_as_current_span(name, start_time=T0 + start_ms * MS, end_on_exit=False) as s:
        for key, value in (attrs or {}).items():
            s.set_attribute(key, value)
        yield s
    s.end(end_time=T0 + end_ms * MS)


def oi_docs(prefix: str, docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OpenInference's flattened document attributes."""
    out: dict[str, Any] = {}
    for i, doc in enumerate(docs):
        for field, value in doc.items():
            out[f"{prefix}.{i}.document.{field}"] = value
    return out


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


# -- OpenInference ----------------------------------------------------------------------------


def _openinference_rag(tracer: Tracer) -> None:
    root_attrs = {
        "openinference.span.kind": "CHAIN",
        "input.value": "What is the capital of France?",
        "output.value": "Paris.",
        "ragmon.reference_answer": "Paris",
        "http.route": "/ask",
    }
    with span(tracer, "rag", 0, 1000, root_attrs) as root:
        root.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "helpfulness", "gen_ai.evaluation.score.value": 0.75, "gen_ai.evaluation.score.label": "good"})
        retriever = {
            "openinference.span.kind": "RETRIEVER",
            "input.value": "capital of France",
            "ragmon.relevant_document_ids": ["d2", "d9"],
            **oi_docs("retrieval.documents", [
                {"id": "d1", "score": 0.9, "content": "Lyon is a city.", "metadata": '{"source": "a.md"}'},
                {"id": "d2", "score": 0.8, "content": "Paris is the capital.", "metadata": '{"source": "b.md"}'},
                {"id": "d3", "score": 0.1, "content": "Nice is nice."},
            ]),
        }
        with span(tracer, "retrieve", 10, 110, retriever):
            with span(tracer, "embed query", 12, 32, {"openinference.span.kind": "EMBEDDING", "embedding.model_name": "text-embedding-3-small", "llm.token_count.prompt": 5, "llm.token_count.total": 5}):
                pass
        reranker = {
            "openinference.span.kind": "RERANKER",
            "reranker.query": "capital of France",
            **oi_docs("reranker.input_documents", [{"id": "d1"}, {"id": "d2"}, {"id": "d3"}]),
            **oi_docs("reranker.output_documents", [{"id": "d2", "score": 0.99}, {"id": "d1", "score": 0.2}]),
        }
        with span(tracer, "rerank", 120, 320, reranker):
            with span(tracer, "judge docs", 130, 310, {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "openai", "llm.token_count.prompt": 100, "llm.token_count.completion": 10, "llm.token_count.total": 110}):
                pass
        llm = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-2024-08-06",
            "llm.provider": "openai",
            "llm.token_count.prompt": 1200,
            "llm.token_count.completion": 40,
            "llm.token_count.total": 1240,
            "llm.token_count.prompt_details.cache_read": 1024,
            "llm.cost.total": 0.0031,
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Answer from the context.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "What is the capital of France?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Paris is the capital of France.",
        }
        with span(tracer, "generate", 330, 930, llm):
            pass


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_openinference_rag_trace(encoding: str) -> None:
    rec = run(_openinference_rag, encoding=encoding, **{"ragmon.variant": "B"})
    assert rec is not None
    assert rec.service == "rag-api" and rec.variant == "B"
    assert rec.start_ns == T0 and rec.end_ns == T0 + 1000 * MS and rec.duration_seconds == pytest.approx(1.0)
    assert rec.query == "What is the capital of France?"
    assert rec.answer == "Paris."  # the root's output wins over the LLM's raw output
    assert rec.retrieved == (
        RetrievedDocument("d1", 0.9, "Lyon is a city."),
        RetrievedDocument("d2", 0.8, "Paris is the capital."),
        RetrievedDocument("d3", 0.1, "Nice is nice."),
    )
    assert rec.reranked == (RetrievedDocument("d2", 0.99), RetrievedDocument("d1", 0.2))
    assert rec.relevance == {"d2": 1, "d9": 1}
    assert rec.reference_answer == "Paris"
    assert rec.llm_calls == (
        LlmCall("text-embedding-3-small", None, 5, 0, purpose="embedding"),
        LlmCall("gpt-4o-mini", "openai", 100, 10, purpose="rerank"),
        LlmCall("gpt-4o-2024-08-06", "openai", 1200, 40, purpose="generation", cost_usd=0.0031, cached_input_tokens=1024),
    )
    assert rec.stage_seconds == pytest.approx({"retrieval": 0.1, "embedding": 0.02, "rerank": 0.2, "generation": 0.6})
    assert rec.evaluations == (Evaluation("helpfulness", 0.75, "good"),)
    assert rec.has_retrieval and rec.content_recorded and not rec.error


def test_the_filter_keeps_what_is_read_and_drops_the_rest() -> None:
    trace = decode_trace(record_spans(_openinference_rag, **{"ragmon.variant": "B", "host.name": "h"}))
    assert trace.root is not None
    assert "http.route" not in trace.root.attributes
    assert "reranker.input_documents.0.document.id" not in {k for s in trace.spans for k in s.attributes}
    assert trace.root.resource == {"ragmon.variant": "B"}
    assert SELECTION.events == EVENTS == {"gen_ai.evaluation.result", "db.query.result"}
    wanted = attribute_filter(ConventionOptions(variant_attribute="deployment.flavor"))
    assert wanted.wants("deployment.flavor") and wanted.wants("ragmon.anything") and not wanted.wants("http.route")


def test_nested_retrievers_only_the_outermost_with_documents_counts() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 500, {"openinference.span.kind": "CHAIN", "input.value": "q"}):
            with span(tracer, "wrapper retriever (no documents)", 10, 210, {"openinference.span.kind": "RETRIEVER"}):
                fused = oi_docs("retrieval.documents", [{"id": "b"}, {"id": "a"}])
                with span(tracer, "ensemble", 20, 200, {"openinference.span.kind": "RETRIEVER", **fused}):
                    with span(tracer, "bm25", 30, 90, {"openinference.span.kind": "RETRIEVER", **oi_docs("retrieval.documents", [{"id": "a"}])}):
                        pass
                    with span(tracer, "dense", 100, 190, {"openinference.span.kind": "RETRIEVER", **oi_docs("retrieval.documents", [{"id": "b"}])}):
                        pass
            with span(tracer, "second retrieval, later", 300, 350, {"openinference.span.kind": "RETRIEVER", **oi_docs("retrieval.documents", [{"id": "z"}])}):
                pass

    rec = record(build)
    assert [d.id for d in rec.retrieved] == ["b", "a"]
    assert rec.stage_seconds == pytest.approx({"retrieval": 0.2 + 0.05})  # outermost spans only
    assert rec.llm_calls == () and rec.answer is None and rec.query == "q"


def test_nested_llm_spans_count_tokens_once_on_the_innermost() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 1000):
            # LlamaIndex: `predict` wraps `chat`; both report the same tokens
            outer = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.provider": "openai",
                     "llm.token_count.prompt": 30, "llm.token_count.completion": 7}
            with span(tracer, "predict", 10, 400, outer):
                with span(tracer, "chat", 20, 390, {"openinference.span.kind": "LLM", "llm.token_count.prompt": 30, "llm.token_count.completion": 7}):
                    pass
            # tokens on the parent only
            with span(tracer, "complete", 400, 600, {"openinference.span.kind": "LLM", "llm.model_name": "m2", "llm.token_count.total": 9}):
                with span(tracer, "inner without tokens", 410, 590, {"openinference.span.kind": "LLM"}):
                    pass
            # no tokens anywhere: one call, the innermost, with the model found above it
            with span(tracer, "agent llm", 600, 800, {"openinference.span.kind": "LLM", "llm.model_name": "m3"}):
                with span(tracer, "inner", 610, 790, {"openinference.span.kind": "LLM"}):
                    pass

    rec = record(build)
    assert rec.llm_calls == (
        LlmCall("gpt-4o", "openai", 30, 7),  # model and provider come from the enclosing call
        LlmCall("m2", None, 9, 0),
        LlmCall("m3", None, 0, 0),
    )
    assert rec.stage_seconds == pytest.approx({"generation": 0.39 + 0.2 + 0.2})


def test_a_generic_model_call_inside_another_convention_counts_once() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 100):
            with span(tracer, "ChatOpenAI", 0, 100, {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.token_count.prompt": 10, "llm.token_count.completion": 2}):
                with span(tracer, "chat gpt-4o", 5, 95, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}):
                    pass

    assert record(build).llm_calls == (LlmCall("gpt-4o-2024-08-06", "openai", 10, 2),)


def test_langchain_retriever_ids_come_from_output_value() -> None:
    docs = [
        {"id": "id-7", "metadata": {"source": "x.md"}, "page_content": "seven", "type": "Document"},
        {"id": None, "metadata": {}, "page_content": "no id", "type": "Document"},
        {"id": "id-3", "metadata": {"source": "y.md"}, "page_content": "three", "type": "Document"},
    ]
    attrs = {
        "openinference.span.kind": "RETRIEVER",
        "input.value": "numbers",
        "output.value": json.dumps({"documents": docs}),
        "output.mime_type": "application/json",
        **oi_docs("retrieval.documents", [
            {"content": d["page_content"], "metadata": json.dumps(d["metadata"])} for d in docs
        ]),
    }

    def build(tracer: Tracer) -> None:
        with span(tracer, "VectorStoreRetriever", 0, 10, attrs):
            pass

    rec = record(build)
    assert [d.id for d in rec.retrieved] == ["id-7", sha("no id"), "id-3"]
    assert [d.score for d in rec.retrieved] == [None, None, None]
    assert rec.query == "numbers" and rec.answer is None and rec.content_recorded
    by_source = record(build, ConventionOptions(document_id=("metadata.source", "document.id")))
    assert [d.id for d in by_source.retrieved] == ["x.md", sha("no id"), "y.md"]


def test_a_broken_output_value_falls_back_to_the_content_hash() -> None:
    attrs = {"openinference.span.kind": "RETRIEVER", "output.value": "{not json", **oi_docs("retrieval.documents", [{"content": "alpha"}])}

    def build(tracer: Tracer) -> None:
        with span(tracer, "r", 0, 1, attrs):
            pass

    assert [d.id for d in record(build).retrieved] == [sha("alpha")]


def test_llamaindex_chunk_ids_and_configurable_document_id() -> None:
    docs = [
        {"id": "5f0c-chunk-uuid-1", "score": 0.7, "content": "chunk one", "metadata": json.dumps({"doc_id": "manual.pdf", "file": {"name": "m.pdf"}})},
        {"id": "a1b2-chunk-uuid-2", "score": 0.6, "content": "chunk two", "metadata": json.dumps({"file": {"name": "faq.md"}})},
        {"score": 0.5, "content": "chunk three"},
    ]

    def build(tracer: Tracer) -> None:
        with span(tracer, "retrieve", 0, 10, {"openinference.span.kind": "RETRIEVER", **oi_docs("retrieval.documents", docs)}):
            pass

    def ids(*places: str) -> list[str]:
        return [d.id for d in record(build, ConventionOptions(document_id=places)).retrieved]

    assert ids("document.id") == ["5f0c-chunk-uuid-1", "a1b2-chunk-uuid-2", sha("chunk three")]
    assert ids("metadata.doc_id", "document.id") == ["manual.pdf", "a1b2-chunk-uuid-2", sha("chunk three")]
    assert ids("metadata.file.name") == ["m.pdf", "faq.md", sha("chunk three")]
    assert ids("metadata.missing") == [sha("chunk one"), sha("chunk two"), sha("chunk three")]
    no_content = record(build, ConventionOptions(keep_content=False)).retrieved
    assert [d.content for d in no_content] == [None, None, None] and no_content[2].id == sha("chunk three")


@pytest.mark.parametrize(
    ("value", "mime", "expected"),
    [
        ("plain question?", None, "plain question?"),
        ('{"input": "from input", "chat_history": []}', "application/json", "from input"),
        ('{"question": "from question", "k": 3}', None, "from question"),
        ('"a JSON string"', "application/json", "a JSON string"),
        ("{not json but text", "text/plain", "{not json but text"),
        ("{not json", None, "{not json"),
        ('{"messages": [1, 2]}', "application/json", None),
    ],
)
def test_input_value_plain_or_json(value: str, mime: str | None, expected: str | None) -> None:
    attrs = {"openinference.span.kind": "CHAIN", "input.value": value}
    if mime:
        attrs["input.mime_type"] = mime

    def build(tracer: Tracer) -> None:
        with span(tracer, "chain", 0, 10, attrs):
            with span(tracer, "llm", 1, 9, {"openinference.span.kind": "LLM"}):
                pass

    assert record(build).query == expected


def test_query_and_answer_fall_back_to_the_llm_messages() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "POST /ask", 0, 10, {"http.route": "/ask"}):
            llm = {
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "first question",
                "llm.input_messages.1.message.role": "assistant",
                "llm.input_messages.1.message.content": "first answer",
                "llm.input_messages.2.message.role": "user",
                "llm.input_messages.2.message.contents.0.message_content.type": "text",
                "llm.input_messages.2.message.contents.0.message_content.text": "follow-up",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "the answer",
            }
            with span(tracer, "llm", 1, 9, llm):
                pass

    rec = record(build)
    assert rec.query == "follow-up" and rec.answer == "the answer"


def test_calls_under_a_retriever_are_other_and_not_the_answer() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 100):
            with span(tracer, "multi-query retriever", 0, 50, {"openinference.span.kind": "RETRIEVER", "input.value": "orig", **oi_docs("retrieval.documents", [{"id": "a"}])}):
                rewrite = {"openinference.span.kind": "LLM", "llm.model_name": "small", "llm.token_count.prompt": 3, "llm.token_count.completion": 4,
                           "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": "rewritten"}
                with span(tracer, "rewrite", 1, 20, rewrite):
                    pass
            gen = {"openinference.span.kind": "LLM", "llm.model_name": "big", "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": "final"}
            with span(tracer, "generate", 50, 100, gen):
                pass

    rec = record(build)
    assert rec.llm_calls == (LlmCall("small", None, 3, 4, purpose="other"), LlmCall("big", None, 0, 0))
    assert rec.answer == "final" and rec.query == "orig"
    assert set(rec.stage_seconds) == {"retrieval", "generation"}


def test_llm_cost_from_parts() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "llm", 0, 1, {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.token_count.prompt": 1, "llm.cost.prompt": 0.25, "llm.cost.completion": 0.5}):
            pass

    calls = read_trace(decode_trace(record_spans(build)), ConventionOptions())
    assert isinstance(calls, ModelCalls)  # a lone model call is not a RAG request
    assert calls.calls == (LlmCall("m", None, 1, 0, cost_usd=0.75),)


# -- traces that are not RAG requests: their model calls only ----------------------------------------


def _read(build: Callable[[Tracer], None]) -> RagRecord | ModelCalls | None:
    return read_trace(decode_trace(record_spans(build)), ConventionOptions())


_BARE_CALLS = [
    ({"gen_ai.operation.name": "chat", "gen_ai.response.model": "m", "gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 2},
     LlmCall("m", None, 7, 2)),
    ({"gen_ai.operation.name": "text_completion", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 7},
     LlmCall("m", None, 7, 0)),
    ({"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e", "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 5},
     LlmCall("e", "openai", 5, 0, purpose="embedding")),
    ({"gen_ai.operation.name": "rerank", "gen_ai.request.model": "r", "gen_ai.usage.input_tokens": 40},
     LlmCall("r", None, 40, 0, purpose="rerank")),
    ({"openinference.span.kind": "EMBEDDING", "embedding.model_name": "e", "llm.token_count.prompt": 9, "llm.token_count.total": 9},
     LlmCall("e", None, 9, 0, purpose="embedding")),
    ({"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.token_count.prompt": 3, "llm.token_count.completion": 1, "llm.cost.total": 0.5},
     LlmCall("m", None, 3, 1, cost_usd=0.5)),
    ({"llm.request.type": "embedding", "gen_ai.request.model": "e", "gen_ai.usage.input_tokens": 4},
     LlmCall("e", None, 4, 0, purpose="embedding")),
    ({"llm.request.type": "chat", "gen_ai.request.model": "m"}, LlmCall("m", None, 0, 0)),  # no usage: a call all the same
]


@pytest.mark.parametrize(("attrs", "call"), _BARE_CALLS)
def test_a_lone_model_call_is_its_calls_not_a_request(attrs: dict[str, Any], call: LlmCall) -> None:
    """A bare instrumented client: one trace per call, the call span at the top (chat,
    completion, embeddings, rerank in each convention)."""
    def build(tracer: Tracer) -> None:
        with span(tracer, "call", 0, 5, attrs):
            with span(tracer, "POST /v1/x", 1, 4, {"http.method": "POST"}):  # the HTTP client span below
                pass

    got = _read(build)
    assert isinstance(got, ModelCalls)
    assert got.calls == (call,) and got.service == "rag-api" and got.start_ns == T0


def test_nested_calls_of_a_bare_trace_count_once_and_a_remote_parent_keeps_it_bare() -> None:
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True, trace_flags=TraceFlags(1))

    def build(tracer: Tracer) -> None:
        ctx = otel_trace.set_span_in_context(NonRecordingSpan(remote))
        with tracer.start_as_current_span("complete", context=ctx, start_time=T0, attributes={"openinference.span.kind": "LLM", "llm.model_name": "m"}):
            with span(tracer, "predict", 1, 4, {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.token_count.prompt": 6, "llm.token_count.completion": 2}):
                pass

    got = _read(build)
    assert isinstance(got, ModelCalls) and got.calls == (LlmCall("m", None, 6, 2),)


def test_embedding_calls_alone_are_calls_even_under_an_application_span() -> None:
    """An indexing job: an application span around embedding calls, no retrieval."""
    def build(tracer: Tracer) -> None:
        with span(tracer, "index batch", 0, 50):
            for i in range(3):
                with span(tracer, f"embed {i}", 10 * i, 10 * i + 5, {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e", "gen_ai.usage.input_tokens": 10 + i}):
                    pass

    got = _read(build)
    assert isinstance(got, ModelCalls)
    assert got.calls == tuple(LlmCall("e", None, 10 + i, 0, purpose="embedding") for i in range(3))


def test_a_call_under_an_application_span_or_a_lost_local_parent_is_a_request() -> None:
    """A chat call under the app's span is a request (as before); so is one whose in-process
    parent span never arrived (not a remote parent: the app's span was lost)."""
    def build(tracer: Tracer) -> None:
        with span(tracer, "POST /chat", 0, 10):
            with span(tracer, "chat", 1, 9, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 3}):
                pass

    trace = decode_trace(record_spans(build))
    got = read_trace(trace, ConventionOptions())
    assert isinstance(got, RagRecord) and got.llm_calls == (LlmCall("m", None, 3, 0),)
    orphan = Trace(trace.trace_id, tuple(s for s in trace.spans if s is not trace.root), None)
    assert isinstance(read_trace(orphan, ConventionOptions()), RagRecord)
    assert extract_rag_record(orphan, ConventionOptions()) is not None


def test_a_trace_without_a_model_call_is_nothing() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "GET /health", 0, 1, {"http.method": "GET"}):
            pass

    assert _read(build) is None


# -- ragmon.* attributes, variant, errors, events ------------------------------------------------


def test_graded_relevance_on_the_root_and_labels_precedence() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10, {"ragmon.relevance": json.dumps({"d1": 2, "d2": 1, "d3": 0, "bad": "x", "f": 1.0}), "ragmon.relevant_document_ids": ["d4"]}):
            with span(tracer, "r", 1, 9, {"openinference.span.kind": "RETRIEVER", **oi_docs("retrieval.documents", [{"id": "d1"}])}):
                pass

    assert record(build).relevance == {"d4": 1, "d1": 2, "d2": 1, "d3": 0, "f": 1}

    def on_retriever(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10, {"ragmon.relevant_document_ids": ["from-root"]}):
            with span(tracer, "r", 1, 9, {"openinference.span.kind": "RETRIEVER", "ragmon.relevant_document_ids": ["from-retriever"], **oi_docs("retrieval.documents", [{"id": "d1"}])}):
                pass

    assert record(on_retriever).relevance == {"from-retriever": 1}


@pytest.mark.parametrize(
    ("root_attrs", "resource", "options", "expected"),
    [
        ({"ragmon.variant": "on-root"}, {"ragmon.variant": "on-resource"}, ConventionOptions(), "on-root"),
        ({}, {"ragmon.variant": "on-resource"}, ConventionOptions(), "on-resource"),
        ({}, {}, ConventionOptions(), "default"),
        ({}, {"deployment.flavor": "canary"}, ConventionOptions(variant_attribute="deployment.flavor"), "canary"),
        ({"app.strategy": "hybrid"}, {}, ConventionOptions(variant_attribute="app.strategy"), "hybrid"),
    ],
)
def test_variant(root_attrs: dict[str, str], resource: dict[str, str], options: ConventionOptions, expected: str) -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10, root_attrs):
            with span(tracer, "llm", 1, 9, {"openinference.span.kind": "LLM"}):
                pass

    assert record(build, options, **resource).variant == expected


def test_an_error_on_any_span_marks_the_record() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10):
            with span(tracer, "llm", 1, 9, {"openinference.span.kind": "LLM"}) as llm:
                llm.set_status(Status(StatusCode.ERROR, "rate limited"))

    assert record(build).error


def test_traces_without_retrieval_or_llm_are_none() -> None:
    def plain(tracer: Tracer) -> None:
        with span(tracer, "GET /health", 0, 1, {"openinference.span.kind": "CHAIN", "input.value": "x"}):
            pass

    def indexing(tracer: Tracer) -> None:
        with span(tracer, "index", 0, 10):
            with span(tracer, "embed", 1, 9, {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e", "gen_ai.usage.input_tokens": 100}):
                pass

    assert run(plain) is None
    assert run(indexing) is None
    assert extract_rag_record(Trace(b"\x01" * 16, (), None), ConventionOptions()) is None


def test_evaluation_events() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10) as root:
            root.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 1})
            root.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.score.value": 0.3})  # no name: skipped
            root.add_event("something.else", {"gen_ai.evaluation.name": "x"})
            with span(tracer, "llm", 1, 9, {"openinference.span.kind": "LLM"}) as llm:
                llm.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "toxicity", "gen_ai.evaluation.score.label": "safe"})

    assert record(build).evaluations == (Evaluation("relevance", 1.0), Evaluation("toxicity", None, "safe"))


def test_a_root_with_a_remote_parent_and_orphans() -> None:
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True, trace_flags=TraceFlags(1))

    def build(tracer: Tracer) -> None:
        ctx = otel_trace.set_span_in_context(NonRecordingSpan(remote))
        with tracer.start_as_current_span("server", context=ctx, start_time=T0, end_on_exit=False) as root:
            root.set_attribute("ragmon.variant", "probe")
            with span(tracer, "llm", 1, 9, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}):
                pass
        root.end(end_time=T0 + 10 * MS)

    trace = decode_trace(record_spans(build))
    assert trace.root is not None and trace.root.has_remote_parent
    rec = extract_rag_record(trace, ConventionOptions())
    assert rec is not None and rec.variant == "probe" and rec.end_ns == T0 + 10 * MS
    # without the root (it never arrived): times from the spans there are, default variant
    orphans = Trace(trace.trace_id, tuple(s for s in trace.spans if s is not trace.root), None)
    rec = extract_rag_record(orphans, ConventionOptions())
    assert rec is not None and rec.variant == "default" and rec.start_ns == T0 + MS and rec.service == "rag-api"


# -- OpenTelemetry GenAI ------------------------------------------------------------------------


def _genai_rag(tracer: Tracer) -> None:
    with span(tracer, "POST /ask", 0, 1000, {"ragmon.relevant_document_ids": ["kb-2"]}):
        documents = [{"id": "kb-1", "score": 0.91, "content": "Paris is in France."}, {"id": "kb-2", "score": 0.87}]
        retrieval = {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb", "gen_ai.provider.name": "chroma",
                     "gen_ai.retrieval.query.text": "capital of France", "gen_ai.retrieval.documents": json.dumps(documents)}
        with span(tracer, "retrieval kb", 10, 60, retrieval):
            with span(tracer, "embeddings text-embedding-3-small", 11, 31, {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "text-embedding-3-small", "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 4}):
                pass
        input_messages = [
            {"role": "system", "parts": [{"type": "text", "content": "Use the context."}]},
            {"role": "user", "parts": [{"type": "text", "content": "What is the capital of France?"}]},
        ]
        output_messages = [
            {"role": "assistant", "parts": [{"type": "text", "content": "Paris"}, {"type": "tool_call", "name": "x"}, {"type": "text", "content": "is the capital."}], "finish_reason": "stop"},
        ]
        chat = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 50, "gen_ai.usage.output_tokens": 8,
            "gen_ai.usage.cache_read.input_tokens": 32,
            "gen_ai.input.messages": json.dumps(input_messages), "gen_ai.output.messages": json.dumps(output_messages),
        }
        with span(tracer, "chat gpt-4o-mini", 100, 900, chat):
            pass


def test_genai_rag_trace() -> None:
    rec = record(_genai_rag)
    assert rec.query == "capital of France"  # the retrieval query is preferred to the last user message
    assert rec.answer == "Paris\nis the capital."
    assert rec.retrieved == (RetrievedDocument("kb-1", 0.91, "Paris is in France."), RetrievedDocument("kb-2", 0.87))
    assert rec.relevance == {"kb-2": 1}
    assert rec.llm_calls == (
        LlmCall("text-embedding-3-small", "openai", 4, 0, purpose="embedding"),
        LlmCall("gpt-4o-mini-2024-07-18", "openai", 50, 8, cached_input_tokens=32),
    )
    assert rec.stage_seconds == pytest.approx({"retrieval": 0.05, "embedding": 0.02, "generation": 0.8})
    assert rec.has_retrieval and rec.content_recorded


def test_genai_query_from_the_last_user_message_and_deprecated_keys() -> None:
    messages = [{"role": "user", "parts": [{"type": "text", "content": "old"}]}, {"role": "assistant", "parts": [{"type": "text", "content": "a"}]},
                {"role": "user", "parts": [{"type": "text", "content": "new question"}]}]

    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10):
            chat = {"gen_ai.operation.name": "text_completion", "gen_ai.request.model": "llama3", "gen_ai.system": "ollama",
                    "gen_ai.usage.prompt_tokens": 9, "gen_ai.usage.completion_tokens": 2, "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": '[{"role": "assistant", "content": "old-style content"}]'}
            with span(tracer, "completion", 1, 9, chat):
                pass

    rec = record(build)
    assert rec.query == "new question" and rec.answer == "old-style content"
    assert rec.llm_calls == (LlmCall("llama3", "ollama", 9, 2),)


def test_genai_without_content_measures_only_latency_and_tokens() -> None:
    def build(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 100):
            with span(tracer, "retrieval kb", 0, 40, {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb"}):
                pass
            with span(tracer, "chat m", 40, 100, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 1}):
                pass
            with span(tracer, "execute_tool search", 50, 60, {"gen_ai.operation.name": "execute_tool", "gen_ai.request.model": "m"}):
                pass

    rec = record(build)
    assert not rec.has_retrieval and rec.retrieved == ()  # a ranking not recorded is unknown, not empty
    assert rec.query is None and rec.answer is None and not rec.content_recorded
    assert rec.llm_calls == (LlmCall("m", None, 5, 1),)
    assert rec.stage_seconds == pytest.approx({"retrieval": 0.04, "generation": 0.06})


def test_an_explicitly_empty_genai_ranking_is_a_retrieval() -> None:
    def build(tracer: Tracer) -> None:
        attrs = {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "nothing matches", "gen_ai.retrieval.documents": "[]"}
        with span(tracer, "retrieval kb", 0, 40, attrs):
            pass

    rec = record(build)
    assert rec.has_retrieval and rec.retrieved == () and rec.query == "nothing matches"


# -- OpenLLMetry (Traceloop) --------------------------------------------------------------------


def test_openllmetry_decorated_workflow_with_vector_db_and_rerank() -> None:
    def build(tracer: Tracer) -> None:
        workflow = {"traceloop.span.kind": "workflow", "traceloop.entity.name": "answer",
                    "traceloop.entity.input": json.dumps({"args": ["How do I reset my password?"], "kwargs": {}}),
                    "traceloop.entity.output": json.dumps("Use the reset link.")}
        with span(tracer, "answer.workflow", 0, 1000, workflow):
            with span(tracer, "retrieve.task", 10, 200, {"traceloop.span.kind": "task", "traceloop.entity.output": json.dumps(["ignored"])}):
                with span(tracer, "chroma.query", 20, 190, {"db.system": "chroma", "db.operation": "query"}) as db:
                    db.add_event("db.query.result", {"db.query.result.id": "faq-3", "db.query.result.distance": 0.2, "db.query.result.document": "Reset via the link."})
                    db.add_event("db.query.result", {"db.query.result.id": "faq-9", "db.query.result.distance": 0.4, "db.query.result.document": "Passwords expire.",
                                                     "db.query.result.metadata": json.dumps({"source": "kb/passwords.md"})})
            with span(tracer, "cohere.rerank", 200, 300, {"llm.request.type": "rerank", "gen_ai.system": "Cohere", "gen_ai.request.model": "rerank-english-v3.0"}):
                pass
            chat = {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06",
                    "gen_ai.usage.prompt_tokens": 70, "gen_ai.usage.completion_tokens": 6, "llm.usage.total_tokens": 76,
                    "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "ctx",
                    "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "How do I reset my password?",
                    "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Use the reset link (from the model)."}
            with span(tracer, "openai.chat", 300, 900, chat):
                pass

    rec = record(build)
    assert rec.query == "How do I reset my password?" and rec.answer == "Use the reset link."
    assert rec.retrieved == (RetrievedDocument("faq-3", None, "Reset via the link."), RetrievedDocument("faq-9", None, "Passwords expire."))
    by_source = record(build, ConventionOptions(document_id=("metadata.source", "document.id")))
    assert [d.id for d in by_source.retrieved] == ["faq-3", "kb/passwords.md"]
    assert rec.llm_calls == (
        LlmCall("rerank-english-v3.0", "Cohere", 0, 0, purpose="rerank"),
        LlmCall("gpt-4o-2024-08-06", "openai", 70, 6),
    )
    assert rec.stage_seconds == pytest.approx({"retrieval": 0.17, "rerank": 0.1, "generation": 0.6})


def test_openllmetry_langchain_callback_json_and_indexed_messages() -> None:
    def build(tracer: Tracer) -> None:
        entity_in = {"inputs": {"question": "What is RAG?", "k": 4}, "tags": [], "metadata": {}, "kwargs": {"name": "RunnableSequence"}}
        entity_out = {"outputs": {"answer": "Retrieval-augmented generation.", "docs": []}, "kwargs": {"tags": []}}
        with span(tracer, "RunnableSequence.workflow", 0, 100, {"traceloop.span.kind": "workflow", "traceloop.entity.input": json.dumps(entity_in), "traceloop.entity.output": json.dumps(entity_out)}):
            with span(tracer, "ChatOpenAI.chat", 10, 90, {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
                                                          "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 3, "gen_ai.usage.cache_read.input_tokens": 0}):
                pass

    rec = record(build)
    assert rec.query == "What is RAG?" and rec.answer == "Retrieval-augmented generation."
    assert rec.llm_calls == (LlmCall("gpt-4o", "openai", 11, 3),) and not rec.has_retrieval

    def bare(tracer: Tracer) -> None:
        with span(tracer, "root", 0, 10):
            with span(tracer, "openai.chat", 1, 9, {"llm.request.type": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.prompt.0.role": "user",
                                                    "gen_ai.prompt.0.content": '[{"type": "text", "text": "parts question"}]', "gen_ai.completion.0.content": "plain answer"}):
                pass

    rec = record(bare)
    assert rec.query == "parts question" and rec.answer == "plain answer"


# -- options and robustness -----------------------------------------------------------------------


def test_options_validate_and_come_from_config() -> None:
    for bad in [(), ("id",), ("doc.id",), ("metadata.",), ("document",)]:
        with pytest.raises(ValueError, match="document_id"):
            ConventionOptions(document_id=bad)
    with pytest.raises(ValueError, match="variant_attribute"):
        ConventionOptions(variant_attribute="")
    options = ConventionOptions.from_config(ScoringConfig(document_id=("metadata.source",), variant_attribute="x.variant"))
    assert options == ConventionOptions(document_id=("metadata.source",), variant_attribute="x.variant")


_KEYS_READ = [
    "openinference.span.kind", "input.value", "input.mime_type", "output.value", "output.mime_type",
    "retrieval.documents.0.document.id", "retrieval.documents.0.document.content", "retrieval.documents.0.document.metadata",
    "retrieval.documents.1.document.score", "reranker.output_documents.0.document.id", "llm.token_count.prompt",
    "llm.token_count.total", "llm.cost.total", "llm.model_name", "llm.input_messages.0.message.role",
    "llm.output_messages.0.message.content", "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.retrieval.documents", "gen_ai.retrieval.query.text",
    "traceloop.entity.input", "traceloop.entity.output", "llm.request.type", "gen_ai.prompt.0.content",
    "ragmon.relevance", "ragmon.relevant_document_ids", "ragmon.variant", "ragmon.reference_answer",
]
_KINDS = st.sampled_from(["RETRIEVER", "LLM", "EMBEDDING", "RERANKER", "CHAIN", "chat", "retrieval", "embeddings", "rerank", "x"])
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=True), st.text(max_size=20),
    st.sampled_from(["{", "[]", "[{}]", '{"documents": 3}', '[{"id": null}]', '{"a": [1]}', '"s"', "[1, {\"role\": 2}]",
                     '{"inputs": 5}', '{"args": [1, "x"]}', '{"d": "2", "e": -1, "f": 1.5}', "application/json"]),
    st.tuples(st.text(max_size=5), st.integers()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 6), _KINDS, st.dictionaries(st.sampled_from(_KEYS_READ), _VALUES, max_size=6), st.booleans()),
        min_size=1, max_size=8,
    )
)
def test_malformed_attributes_never_raise(rows: list[tuple[int, str, dict[str, Any], bool]]) -> None:
    spans = []
    for i, (parent, kind, attrs, as_genai) in enumerate(rows):
        key = "gen_ai.operation.name" if as_genai else "openinference.span.kind"
        spans.append(Span(
            trace_id=b"\x01" * 16, span_id=(i + 1).to_bytes(8, "big"),
            parent_span_id=(parent + 1).to_bytes(8, "big") if parent != i else b"",
            name=str(i), start_ns=i, end_ns=i + parent, attributes={**attrs, key: kind},
        ))
    trace = Trace(b"\x01" * 16, tuple(spans), spans[0])
    rec = extract_rag_record(trace, ConventionOptions(document_id=("metadata.a", "document.id")))
    if rec is not None:
        assert all(isinstance(d.id, str) and d.id for d in rec.retrieved)
        assert all(c.input_tokens >= 0 and c.output_tokens >= 0 for c in rec.llm_calls)
        assert all(v >= 0 for v in rec.stage_seconds.values())


def test_a_retrieval_that_found_nothing_is_an_empty_ranking() -> None:
    def build(tracer):  # type: ignore[no-untyped-def]
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                span.set_attribute("output.value", '{"documents": []}')
                span.set_attribute("ragmon.relevant_document_ids", ["d1"])

    options = ConventionOptions()
    record = extract_rag_record(decode_trace(record_spans(build), options), options)
    assert record is not None and record.has_retrieval and record.retrieved == ()
    assert record.relevance == {"d1": 1}
