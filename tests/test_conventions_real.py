"""``ragmon.conventions`` against what real instrumentations emit, offline.

(a) OpenInference's LangChain instrumentor around a langchain-core retrieval chain (in-memory
vector store, deterministic fake embedding, fake chat models); (b) the official OpenTelemetry
OpenAI instrumentation (opentelemetry-instrumentation-openai-v2) around the real ``openai``
client talking to a local OpenAI-compatible server on 127.0.0.1, with a GenAI retrieval span
made by opentelemetry-util-genai's ``TelemetryHandler.retrieval()``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings.fake import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.genai.handler import TelemetryHandler
from fake_openai import fake_openai
from test_conventions import decode_trace

from ragmon.conventions import ConventionOptions, extract_rag_record
from ragmon.model import LlmCall, RagRecord

# openinference-instrumentation-langchain 0.1.80 calls a LangChain API that langchain-core 1.x deprecates
pytestmark = pytest.mark.filterwarnings(r"ignore:Calling \.text\(\) as a method is deprecated")

QUESTION = "What do cats do all day?"
ANSWER = "Cats mostly sleep."


class _Recorder:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "v2"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def record(self, options: ConventionOptions = ConventionOptions()) -> RagRecord:
        rec = extract_rag_record(decode_trace(self.spans(), options), options)
        assert rec is not None
        return rec


def _by_name(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    matches = [s for s in spans if s.name == name]
    assert len(matches) == 1, [s.name for s in spans]
    return matches[0]


def _seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


# -- (a) OpenInference LangChain ------------------------------------------------------------------


@pytest.fixture
def langchain() -> Iterator[_Recorder]:
    recorder = _Recorder()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=recorder.provider)
    try:
        yield recorder
    finally:
        instrumentor.uninstrument()
        recorder.provider.shutdown()


def _store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents([
        Document(id=f"chunk-{i}", page_content=f"Cat fact {i}: cats sleep {10 + i} hours.", metadata={"source": f"kb/cats-{i}.md", "doc_id": f"CATS-{i}"})
        for i in range(6)
    ])
    return store


def _format(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


_PROMPT = ChatPromptTemplate.from_messages([("system", "Answer from this context:\n{context}"), ("human", "{question}")])


def test_langchain_retrieval_chain(langchain: _Recorder) -> None:
    store = _store()
    expected = store.similarity_search(QUESTION, k=3)  # a vector store call is not a Runnable: no span
    retriever = store.as_retriever(search_kwargs={"k": 3})
    chain = {"context": retriever | _format, "question": RunnablePassthrough()} | _PROMPT | FakeListChatModel(responses=[ANSWER]) | StrOutputParser()
    assert chain.invoke(QUESTION) == ANSWER

    spans = langchain.spans()
    # The trap, as the real instrumentor emits it: content and metadata, no id, no score ...
    attrs = dict(_by_name(spans, "VectorStoreRetriever").attributes or {})
    assert attrs["openinference.span.kind"] == "RETRIEVER"
    assert "retrieval.documents.0.document.content" in attrs and "retrieval.documents.0.document.metadata" in attrs
    assert not any(k.endswith((".document.id", ".document.score")) for k in attrs)
    # ... and the ids only in output.value
    assert [d["id"] for d in json.loads(str(attrs["output.value"]))["documents"]] == [d.id for d in expected]
    llm_attrs = dict(_by_name(spans, "FakeListChatModel").attributes or {})
    assert "llm.model_name" not in llm_attrs and not any(k.startswith("llm.token_count") for k in llm_attrs)

    rec = langchain.record()
    assert rec.query == QUESTION and rec.answer == ANSWER
    assert [d.id for d in rec.retrieved] == [d.id for d in expected] and len(expected) == 3
    assert [d.content for d in rec.retrieved] == [d.page_content for d in expected]
    assert all(d.score is None for d in rec.retrieved)
    assert rec.reranked is None and rec.relevance is None
    assert rec.llm_calls == (LlmCall("unknown", "fakelistchatmodel", 0, 0),)  # the fake model reports no tokens
    assert set(rec.stage_seconds) == {"retrieval", "generation"} and all(v > 0 for v in rec.stage_seconds.values())
    assert rec.stage_seconds["retrieval"] == pytest.approx(_seconds(_by_name(spans, "VectorStoreRetriever")))
    assert rec.service == "rag-api" and rec.variant == "v2" and not rec.error
    assert rec.has_retrieval and rec.content_recorded

    by_doc_id = langchain.record(ConventionOptions(document_id=("metadata.doc_id",)))
    assert [d.id for d in by_doc_id.retrieved] == [d.metadata["doc_id"] for d in expected]


class _TopTwoReversed(BaseRetriever):
    """A retriever that calls another one: RETRIEVER spans nest."""

    inner: BaseRetriever

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        docs = self.inner.invoke(query, config={"callbacks": run_manager.get_child()})
        return list(reversed(docs[:2]))


class _NamedFakeChatModel(GenericFakeChatModel):
    """A fake chat model that names itself the way real chat models do (``ls_model_name``)."""

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_model_name"] = "fake-gpt-1"
        return params


def test_langchain_nested_retrievers_tokens_and_a_root_with_labels(langchain: _Recorder) -> None:
    store = _store()
    expected = store.similarity_search(QUESTION, k=3)
    retriever = _TopTwoReversed(inner=store.as_retriever(search_kwargs={"k": 3}))
    usage = {"input_tokens": 120, "output_tokens": 9, "total_tokens": 129, "input_token_details": {"cache_read": 64}}
    model = _NamedFakeChatModel(messages=iter([AIMessage(content=ANSWER, usage_metadata=usage)]))
    chain = {"context": retriever | _format, "question": RunnablePassthrough()} | _PROMPT | model | StrOutputParser()
    with langchain.provider.get_tracer("app").start_as_current_span("POST /ask") as root:
        root.set_attribute("ragmon.relevant_document_ids", [expected[1].id or ""])
        root.set_attribute("ragmon.reference_answer", "They sleep.")
        assert chain.invoke(QUESTION) == ANSWER

    spans = langchain.spans()
    inner_attrs = dict(_by_name(spans, "VectorStoreRetriever").attributes or {})
    outer_attrs = dict(_by_name(spans, "_TopTwoReversed").attributes or {})
    assert inner_attrs["openinference.span.kind"] == outer_attrs["openinference.span.kind"] == "RETRIEVER"
    llm_attrs = dict(_by_name(spans, "_NamedFakeChatModel").attributes or {})
    assert llm_attrs["llm.model_name"] == "fake-gpt-1"
    assert (llm_attrs["llm.token_count.prompt"], llm_attrs["llm.token_count.completion"], llm_attrs["llm.token_count.prompt_details.cache_read"]) == (120, 9, 64)

    rec = langchain.record()
    assert [d.id for d in rec.retrieved] == [expected[1].id, expected[0].id]  # the outermost retriever's ranking
    assert rec.stage_seconds["retrieval"] == pytest.approx(_seconds(_by_name(spans, "_TopTwoReversed")))
    assert rec.llm_calls == (LlmCall("fake-gpt-1", "_namedfakechatmodel", 120, 9, cached_input_tokens=64),)
    assert rec.query == QUESTION and rec.answer == ANSWER  # from the chain, the HTTP root has no input
    assert rec.relevance == {expected[1].id: 1} and rec.reference_answer == "They sleep."
    assert rec.start_ns == _by_name(spans, "POST /ask").start_time


# -- (b) OpenTelemetry openai-v2 instrumentation ---------------------------------------------------

_CHAT = {
    "id": "chatcmpl-ragmon-1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 4}},
}
_EMBEDDINGS = {
    "object": "list", "model": "text-embedding-3-small",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
    "usage": {"prompt_tokens": 5, "total_tokens": 5},
}


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with fake_openai(lambda path, _: _EMBEDDINGS if path.endswith("/embeddings") else _CHAT, monkeypatch) as url:
        yield url


@pytest.fixture
def instrumented_openai(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Recorder]:
    """The instrumentor, set up after ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is
    set to the test's parameter (unset for None): it reads the variable once, when instrumenting."""
    capture = getattr(request, "param", None)
    if capture is None:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    else:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture)
    recorder = _Recorder()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=recorder.provider)
    try:
        yield recorder
    finally:
        instrumentor.uninstrument()
        recorder.provider.shutdown()


def _ask(recorder: _Recorder, base_url: str) -> None:
    """A RAG request: a root span, a GenAI retrieval span (util-genai) around an embeddings
    call, then a chat completion; all through the real ``openai`` client."""
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    handler = TelemetryHandler(tracer_provider=recorder.provider)
    with recorder.provider.get_tracer("app").start_as_current_span("POST /ask") as root:
        root.set_attribute("ragmon.relevant_document_ids", ["kb-7"])
        with handler.retrieval(data_source_id="kb", provider="chroma") as retrieval:
            client.embeddings.create(model="text-embedding-3-small", input="capital of France?")
            retrieval.query_text = "capital of France?"
            retrieval.documents = [{"id": "kb-7", "score": 0.93}, {"id": "kb-2", "score": 0.71}]
        reply = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": "Answer from the context."}, {"role": "user", "content": "What is the capital of France?"}],
        )
        assert reply.choices[0].message.content == "Paris."
    client.close()


_CALLS = (
    LlmCall("text-embedding-3-small", "openai", 5, 0, purpose="embedding"),
    LlmCall("gpt-4o-mini-2024-07-18", "openai", 12, 3),  # the response model; cached tokens are not recorded
)


# The default records no content; this version takes NO_CONTENT / SPAN_ONLY / EVENT_ONLY /
# SPAN_AND_EVENT only, and "true" (the older spelling) records nothing either.
@pytest.mark.parametrize("instrumented_openai", [None, "true"], indirect=True)
def test_openai_v2_without_content(openai_server: str, instrumented_openai: _Recorder) -> None:
    _ask(instrumented_openai, openai_server)

    spans = instrumented_openai.spans()
    chat = dict(_by_name(spans, "chat gpt-4o-mini").attributes or {})
    assert {k: chat[k] for k in ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3,
    }
    assert "gen_ai.input.messages" not in chat and "gen_ai.output.messages" not in chat
    retrieval = dict(_by_name(spans, "retrieval kb").attributes or {})
    assert retrieval["gen_ai.operation.name"] == "retrieval" and "gen_ai.retrieval.documents" not in retrieval

    rec = instrumented_openai.record()
    assert rec.llm_calls == _CALLS
    assert rec.query is None and rec.answer is None and not rec.content_recorded
    assert not rec.has_retrieval and rec.retrieved == ()  # no ranking recorded: nothing to score
    assert set(rec.stage_seconds) == {"retrieval", "embedding", "generation"}
    assert rec.relevance == {"kb-7": 1} and rec.variant == "v2"


@pytest.mark.parametrize("instrumented_openai", ["SPAN_ONLY"], indirect=True)
def test_openai_v2_with_span_content(openai_server: str, instrumented_openai: _Recorder) -> None:
    _ask(instrumented_openai, openai_server)

    spans = instrumented_openai.spans()
    chat = dict(_by_name(spans, "chat gpt-4o-mini").attributes or {})
    assert json.loads(str(chat["gen_ai.output.messages"])) == [{"role": "assistant", "parts": [{"content": "Paris.", "type": "text"}], "finish_reason": "stop"}]
    assert json.loads(str(chat["gen_ai.input.messages"]))[-1] == {"role": "user", "parts": [{"content": "What is the capital of France?", "type": "text"}]}
    retrieval = dict(_by_name(spans, "retrieval kb").attributes or {})
    assert json.loads(str(retrieval["gen_ai.retrieval.documents"])) == [{"id": "kb-7", "score": 0.93}, {"id": "kb-2", "score": 0.71}]

    rec = instrumented_openai.record()
    assert rec.query == "capital of France?"  # the retrieval query wins over the last user message
    assert rec.answer == "Paris."
    assert [(d.id, d.score) for d in rec.retrieved] == [("kb-7", 0.93), ("kb-2", 0.71)]
    assert rec.llm_calls == _CALLS and rec.content_recorded and rec.has_retrieval
