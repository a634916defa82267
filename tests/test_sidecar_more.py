"""The sidecar end to end: golden sets, label caps, ignored traces, rejected bodies, and a real
LangChain app instrumented by OpenInference exporting to ragmon over OTLP/HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings.fake import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from net_helpers import wait_until
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, send_rag_traces, value

import ragmon
from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, ReceiverConfig, ScoringConfig
from ragmon.export.exporter import LIMITED_LABELS
from ragmon.model import Offer
from ragmon.receivers.ingest import REQUEST_REJECT_REASONS, SPAN_REJECT_REASONS

pytestmark = pytest.mark.filterwarnings(r"ignore:Calling \.text\(\) as a method is deprecated")


def _sidecar(config: Config) -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


def _config(**sections: object) -> Config:
    base = {
        "receiver": ReceiverConfig(http="127.0.0.1:0", grpc=""),
        "metrics": MetricsConfig(listen="127.0.0.1:0"),
    }
    return Config(**{**base, **sections})  # type: ignore[arg-type]


def _url(car: Sidecar) -> str:
    return f"http://127.0.0.1:{car.ports.http}/v1/traces"


def _finish(car: Sidecar, clock: FakeClock, records: int) -> None:
    clock.now += 3.0
    wait_until(lambda: car.pipeline.stats().records + car.pipeline.stats().ignored >= records)


def test_golden_set_labels_live_queries(tmp_path: Path) -> None:
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"query": "  What is the REFUND window? ", "relevant_document_ids": ["d2"]}) + "\n")
    config = _config(scoring=ScoringConfig(golden=str(golden)))
    for car, clock, _ in _sidecar(config):
        send_rag_traces(OTLPSpanExporter(endpoint=_url(car), timeout=10), "svc")  # query: "what is the refund window?"
        wait_until(lambda: car.assembler.stats().spans_held == 9)
        _finish(car, clock, 3)
        v = samples(scrape(car.ports.metrics))
        gold = {"service": "svc", "variant": "B", "source": "golden"}
        # rankings: [d1 d2 d3] -> rr 1/2; [x d5 y] and [a b c] -> 0
        assert value(v, "ragmon_retrieval_queries_total", **gold) == 3
        assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **gold) == pytest.approx(0.5, abs=1e-12)
        assert value(v, "ragmon_retrieval_hits_total", **gold, k="3") == 1
        assert value(v, "ragmon_retrieval_queries_total", service="svc", variant="B", source="label") == 3


def test_label_cap_folds_services_into_other() -> None:
    for car, clock, _ in _sidecar(_config(metrics=MetricsConfig(listen="127.0.0.1:0", max_label_values=1))):
        send_rag_traces(OTLPSpanExporter(endpoint=_url(car), timeout=10), "first")
        send_rag_traces(OTLPSpanExporter(endpoint=_url(car), timeout=10), "second")
        wait_until(lambda: car.assembler.stats().spans_held == 18)
        _finish(car, clock, 6)
        v = samples(scrape(car.ports.metrics))
        assert value(v, "ragmon_traces_total", service="first", variant="B") == 3
        assert value(v, "ragmon_traces_total", service="other", variant="B") == 3
        assert value(v, "ragmon_label_values_folded_total", label="service") == 3


def test_trouble_counters_are_exported_at_zero_before_the_first_event() -> None:
    """Rejections, folds, errors and unlabelled retrievals show 0 (not "no data") when healthy."""
    for car, clock, _ in _sidecar(_config()):
        v = samples(scrape(car.ports.metrics))
        for protocol, reasons in REQUEST_REJECT_REASONS.items():
            for reason in SPAN_REJECT_REASONS:
                assert value(v, "ragmon_spans_rejected_total", protocol=protocol, reason=reason) == 0
            for reason in reasons:
                assert value(v, "ragmon_requests_rejected_total", protocol=protocol, reason=reason) == 0
        for label in LIMITED_LABELS:
            assert value(v, "ragmon_label_values_folded_total", label=label) == 0
        send_rag_traces(OTLPSpanExporter(endpoint=_url(car), timeout=10), "svc")
        wait_until(lambda: car.assembler.stats().spans_held == 9)
        _finish(car, clock, 3)
        v = samples(scrape(car.ports.metrics))
        assert value(v, "ragmon_trace_errors_total", service="svc", variant="B") == 0
        assert value(v, "ragmon_retrieval_unlabelled_total", service="svc", variant="B") == 0


def test_reject_reasons_and_folded_labels_used_in_the_code_are_the_exported_ones() -> None:
    """Every literal reason or limited label in ragmon's source is in the tables exported at 0."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in Path(ragmon.__file__).parent.rglob("*.py"))
    refusals = {offer.value for offer in Offer if offer is not Offer.ACCEPTED}
    reasons = set(re.findall(r'reject\("([a-z_]+)"\)', source)) | refusals
    known = set(SPAN_REJECT_REASONS) | {r for rs in REQUEST_REJECT_REASONS.values() for r in rs}
    assert reasons and reasons <= known, reasons - known
    labels = set(re.findall(r'limit\("([a-z_]+)"', source))
    assert labels == LIMITED_LABELS


def test_non_rag_traces_are_counted_and_ignored_and_bad_bodies_counted() -> None:
    for car, clock, _ in _sidecar(_config()):
        provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=_url(car), timeout=10)))
        with provider.get_tracer("t").start_as_current_span("GET /health"):
            pass
        provider.shutdown()
        status, _, _ = post(_url(car), b"\xff\xff\xff", {"Content-Type": "application/x-protobuf"})
        assert status == 400
        wait_until(lambda: car.assembler.stats().spans_held == 1)
        _finish(car, clock, 1)
        v = samples(scrape(car.ports.metrics))
        assert value(v, "ragmon_traces_ignored_total") == 1
        assert value(v, "ragmon_requests_rejected_total", protocol="http", reason="decode") == 1
        assert ("ragmon_traces_total", frozenset({"service": "svc", "variant": "default"}.items())) not in v


def test_langchain_app_instrumented_by_openinference() -> None:
    config = _config(scoring=ScoringConfig(document_id=("metadata.doc_id",)))
    for car, clock, _ in _sidecar(config):
        provider = TracerProvider(resource=Resource.create({"service.name": "lc-app"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=_url(car), timeout=10)))
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
            store.add_documents([
                Document(id=f"chunk-{i}", page_content=f"Cat fact {i}: cats sleep {10 + i} hours.", metadata={"doc_id": f"CATS-{i}"})
                for i in range(6)
            ])
            question = "What do cats do all day?"
            expected = [d.metadata["doc_id"] for d in store.similarity_search(question, k=3)]
            retriever = store.as_retriever(search_kwargs={"k": 3})
            prompt = ChatPromptTemplate.from_messages([("system", "Context:\n{context}"), ("human", "{question}")])
            chain = (
                {"context": retriever | (lambda docs: "\n".join(d.page_content for d in docs)), "question": RunnablePassthrough()}
                | prompt | FakeListChatModel(responses=["They sleep."]) | StrOutputParser()
            )
            tracer = provider.get_tracer("app")
            for relevant in ([expected[0]], [expected[2]], ["CATS-missing"]):
                with tracer.start_as_current_span("POST /ask") as root:
                    root.set_attribute("ragmon.relevant_document_ids", relevant)
                    chain.invoke(question)
        finally:
            instrumentor.uninstrument()
            provider.shutdown()
        wait_until(lambda: car.assembler.stats().traces_pending == 3 and car.pipeline.stats().queued_spans == 0)
        _finish(car, clock, 3)
        v = samples(scrape(car.ports.metrics))
        src = {"service": "lc-app", "variant": "default", "source": "label"}
        assert value(v, "ragmon_traces_total", service="lc-app", variant="default") == 3
        assert value(v, "ragmon_retrieval_queries_total", **src) == 3
        # ranks of the relevant document: 1, 3, none -> MRR (1 + 1/3 + 0) / 3
        assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **src) == pytest.approx(1 + 1 / 3, abs=1e-12)
        assert value(v, "ragmon_retrieval_hits_total", **src, k="1") == 1
        assert value(v, "ragmon_retrieval_hits_total", **src, k="3") == 2
        assert value(v, "ragmon_retrieval_mrr", **src, window="5m") == pytest.approx((1 + 1 / 3) / 3, abs=1e-12)
        assert value(v, "ragmon_request_duration_seconds_count", service="lc-app", variant="default", stage="generation") == 3
        # the fake chat model reports no tokens: counted as a call without usage, never priced 0
        assert value(v, "ragmon_llm_calls_without_usage_total", service="lc-app", model="unknown") == 3
        assert ("ragmon_cost_usd_total", frozenset({"service": "lc-app", "model": "unknown"}.items())) not in v
        assert ("ragmon_cost_usd_per_request", frozenset({"service": "lc-app", "variant": "default", "window": "5m"}.items())) not in v
