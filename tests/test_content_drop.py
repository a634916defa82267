"""Document text is held only for the traces the judge stage will read it for
(``ragmon.conventions.content``): dropping it for the others changes no value ragmon reports."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from net_helpers import wait_until
from test_sidecar_judge import DOCS, exporter, judged, running, send_traces

from ragmon.config import JudgeConfig
from ragmon.conventions import ConventionOptions, read_trace
from ragmon.conventions.content import drop_document_text, text_dropper
from ragmon.judge.prompts import applicable_evaluators
from ragmon.judge.sampling import sampled
from ragmon.model import EVALUATORS, RagRecord, Span, Trace
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import score_record

R, O = "retrieval.documents.", "reranker.output_documents."


def test_documents_with_an_id_lose_their_metadata_and_text() -> None:
    a: dict[str, Any] = {
        f"{R}0.document.id": "d0", f"{R}0.document.content": "text 0", f"{R}0.document.metadata": "{}",
        f"{R}1.document.metadata": '{"no id": "its metadata is its id"}',
        f"{R}2.document.id": 7, f"{R}2.document.content": "an int id: kept",
        f"{R}3.document.id": "", f"{R}3.document.content": "an empty id: kept",
        f"{R}4.document.id": "d4", f"{R}4.document.content": 42, f"{R}4.document.metadata": "{}",
        f"{R}5.document.score": 0.5,  # none of id, content, metadata: the walk stops here
        f"{R}6.document.id": "d6", f"{R}6.document.content": "after the stop: kept",
        f"{O}0.document.id": "r0", f"{O}0.document.content": "reranked", f"{O}0.document.metadata": "{}",
        "input.value": "q",
    }
    assert drop_document_text(a) == 5
    assert a == {
        f"{R}0.document.id": "d0", f"{R}0.document.content": "",
        f"{R}1.document.metadata": '{"no id": "its metadata is its id"}',
        f"{R}2.document.id": 7, f"{R}2.document.content": "an int id: kept",
        f"{R}3.document.id": "", f"{R}3.document.content": "an empty id: kept",
        f"{R}4.document.id": "d4", f"{R}4.document.content": 42,
        f"{R}5.document.score": 0.5,
        f"{R}6.document.id": "d6", f"{R}6.document.content": "after the stop: kept",
        f"{O}0.document.id": "r0", f"{O}0.document.content": "",
        "input.value": "q",
    }


def test_judged_traces_and_other_id_places_keep_everything() -> None:
    judged_ids = {b"\x01" * 16}
    drop = text_dropper(ConventionOptions(), judged_ids.__contains__)
    assert drop is not None
    spans = [
        Span(tid, b"\x02" * 8, b"", "retrieve", 0, 1, attributes={f"{R}0.document.id": "d", f"{R}0.document.content": "t"})
        for tid in (b"\x01" * 16, b"\x03" * 16)
    ]
    drop(spans)
    assert [s.attributes[f"{R}0.document.content"] for s in spans] == ["t", ""]
    assert text_dropper(ConventionOptions(document_id=("metadata.source", "document.id")), judged_ids.__contains__) is None


_TEXT = st.text(alphabet="ab é.", max_size=12)
_ID = st.one_of(st.none(), st.just(""), st.text(alphabet="dk0", min_size=1, max_size=3), st.integers(0, 3))
_DOC = st.fixed_dictionaries({}, optional={"id": _ID, "content": st.one_of(_TEXT, st.integers(0, 2)), "metadata": _TEXT, "score": st.floats(0, 1)})


@settings(max_examples=300, deadline=None)
@given(st.lists(_DOC, max_size=6), st.lists(_DOC, max_size=3), st.sampled_from(["RETRIEVER", "RERANKER"]))
def test_dropping_changes_no_score_and_no_judge_decision(docs: list[dict[str, Any]], reranked: list[dict[str, Any]], kind: str) -> None:
    """The record read after the drop equals the one read before except for emptied texts: the
    same ids, scores, ranks and relevance, the same scores at every k, and the same evaluators
    applicable (what the judge counts for a trace it skips)."""
    attributes: dict[str, Any] = {"openinference.span.kind": kind, "ragmon.relevant_document_ids": '["k", "d0"]', "input.value": "q"}
    for prefix, listed in ((R, docs), (O, reranked)):
        for n, doc in enumerate(listed):
            attributes.update({f"{prefix}{n}.document.{f}": v for f, v in doc.items() if v is not None})
    root = Span(b"\x05" * 16, b"\x01" * 8, b"", "rag", 0, 10, attributes={"openinference.span.kind": "CHAIN", "output.value": "an answer"})
    retriever = Span(b"\x05" * 16, b"\x02" * 8, b"\x01" * 8, "r", 1, 2, attributes=attributes)
    before = read_trace(Trace(root.trace_id, (root, retriever), root), ConventionOptions())
    dropped = dict(attributes)
    drop_document_text(dropped)
    retriever.attributes = dropped
    after = read_trace(Trace(root.trace_id, (root, retriever), root), ConventionOptions())
    if not isinstance(before, RagRecord):
        assert after == before
        return
    assert isinstance(after, RagRecord)
    for was, now in ((before.retrieved, after.retrieved), (before.reranked or (), after.reranked or ())):
        assert [(d.id, d.score) for d in was] == [(d.id, d.score) for d in now]
        assert all(n.content in (w.content, "") and (n.content is None) == (w.content is None) for w, n in zip(was, now))
    assert (before.reranked is None) == (after.reranked is None)
    pricer = Pricer()
    assert score_record(after, (1, 3, 5), pricer) == score_record(before, (1, 3, 5), pricer)
    assert applicable_evaluators(after, EVALUATORS) == applicable_evaluators(before, EVALUATORS)


def test_the_sidecar_holds_text_only_for_the_traces_it_samples_and_counts_the_same() -> None:
    """In ``ragmon run`` with the judge at rate 0.5: while the traces wait out their grace, the
    sampled ones hold their documents' text, the others hold none; every trace is then judged or
    counted ``skipped_rate`` for faithfulness, as when every trace held its text."""
    from judge_server import judge_server_thread

    with judge_server_thread() as server, running(JudgeConfig(base_url=server.base_url, sample_rate=0.5)) as (car, clock, loop):
        ids = send_traces([exporter(car)], 16)
        wait_until(lambda: car.assembler.stats().spans_held == 3 * 16)

        async def texts() -> dict[bytes, list[object]]:
            held = car.assembler._pending.values()  # the traces waiting out their grace
            return {
                state.trace_id: [s.attributes.get(f"{R}{n}.document.content") for s in state.spans.values() for n in range(len(DOCS)) if f"{R}0.document.id" in s.attributes]
                for state in held
            }

        held = loop.run(texts())
        expected = {
            trace_id.to_bytes(16, "big"): [text if sampled(trace_id.to_bytes(16, "big"), 0.5) else "" for _, text in DOCS]
            for trace_id, _ in ids
        }
        assert held == expected and 0 < sum(t[0] != "" for t in held.values()) < 16
        clock.now += 3.0
        wait_until(lambda: car.pipeline.stats().records == 16)
        wait_until(lambda: judged(car) + judged(car, "skipped_rate") == 16)
        assert judged(car, "skipped_rate") == 16 - sum(t[0] != "" for t in held.values())


def test_a_probe_trace_keeps_its_text_and_no_trace_does_without_send_documents() -> None:
    """A probe's trace is always judged: its id is registered before the request is sent, so the
    sidecar keeps its text though it is outside the sample; with ``send_documents = false`` the
    judge never reads a text, so no trace keeps one."""
    from ragmon.sidecar.wiring import Sidecar
    from ragmon.config import Config, MetricsConfig, ReceiverConfig
    from ragmon.scoring.records import ProbeLabels

    outside = [(2**128 - 1 - i).to_bytes(16, "big") for i in range(3)]  # low 8 bytes near 2**64: never sampled
    inside = (1).to_bytes(16, "big")
    for send in (True, False):
        config = Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen=""),
                        judge=JudgeConfig(sample_rate=0.1, send_documents=send))
        car = Sidecar(config)
        car.probes.registry.add(outside[0], ProbeLabels("p", {"d1": 1}), now=0.0)
        reads = car._reads_documents(config)
        assert [reads(outside[0]), reads(outside[1]), reads(inside)] == [send, False, send]


@settings(max_examples=400, deadline=None)
@given(st.lists(_DOC, max_size=6), st.lists(_DOC, max_size=4), st.booleans())
def test_the_compiled_drop_makes_the_same_changes(docs: list[dict[str, Any]], reranked: list[dict[str, Any]], none_id: bool) -> None:
    """``ragmon.otlp._walker.drop_document_text`` (used when the compiled decoder runs) changes a
    span's attributes exactly as the Python function does."""
    import os

    from ragmon.conventions import content

    try:
        from ragmon.otlp._walker import drop_document_text as compiled  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        return
    attributes: dict[str, Any] = {"input.value": "q"}
    for prefix, listed in ((R, docs), (O, reranked)):
        for n, doc in enumerate(listed):
            attributes.update({f"{prefix}{n}.document.{f}": v for f, v in doc.items() if v is not None or none_id})
    python, fast = dict(attributes), dict(attributes)
    tables = tuple(content.key_table(p, content._FIELDS) for p in content._PREFIXES)
    assert compiled(fast, tables, content._FIRST_IDS) == drop_document_text(python)
    assert fast == python and list(fast) == list(python)


def test_the_compiled_drop_runs_with_the_compiled_decoder() -> None:
    """``RAGMON_DECODER=python`` (CI reruns this file with it) runs the Python drop too."""
    from ragmon.conventions import content
    from ragmon.otlp.decode import DECODER

    assert (content._compiled() is not None) == (DECODER == "compiled")
