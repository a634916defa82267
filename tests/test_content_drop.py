"""Document text is held only for the traces the judge stage will read it for
(``ragmon.conventions.content``, ``ragmon.otlp.decode.DocumentText``): every decoder leaves it
out of the others' spans without reading it, exactly as dropping it after a full decode would,
and dropping it changes no value ragmon reports."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from google.protobuf.json_format import MessageToJson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from net_helpers import wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from test_sidecar_judge import DOCS, exporter, judged, running, send_traces

from ragmon.config import JudgeConfig
from ragmon.conventions import SELECTION, ConventionOptions, read_trace
from ragmon.conventions._common import key_table
from ragmon.conventions.content import document_text
from ragmon.judge.prompts import applicable_evaluators
from ragmon.judge.sampling import sampled
from ragmon.model import EVALUATORS, AttrValue, RagRecord, Span, Trace
from ragmon.otlp.decode import (
    Decoded,
    SpanSelection,
    decode_json,
    kept_resource,
    python_decode_protobuf,
    span_from_values,
)
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import score_record

R, O = "retrieval.documents.", "reranker.output_documents."
_TABLES = tuple(key_table(prefix, ("id", "content", "metadata")) for prefix in (R, O))


def drop_document_text(attributes: dict[str, AttrValue]) -> int:
    """The rule, stated after the fact (the oracle): for documents 0, 1, … (retrieved and
    reranked, until one has none of id, content and metadata) whose ``document.id`` is a
    non-empty string, remove the metadata and empty a text content; how many values it dropped."""
    dropped = 0
    for table in _TABLES:
        if table[0][0] not in attributes:
            continue
        for id_key, content_key, metadata_key in table:
            doc_id = attributes.get(id_key)
            if type(doc_id) is str and doc_id:
                content = attributes.get(content_key)
                if type(content) is str and content:
                    attributes[content_key] = ""
                    dropped += 1
                if metadata_key in attributes:
                    del attributes[metadata_key]
                    dropped += 1
            elif doc_id is None and content_key not in attributes and metadata_key not in attributes:
                break
    return dropped


def _compiled() -> Any:
    """The compiled decoder, or None when it is not built (CI builds it: a failure there)."""
    try:
        from ragmon.otlp._walker import decode_protobuf
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        return None
    return decode_protobuf


KEPT, LEFT = b"\x01" * 16, b"\x02" * 16
"""A trace that keeps its documents' text, and one that does not."""


def selection(limit: int = 16_384, asked: list[bytes] | None = None) -> SpanSelection:
    """The sidecar's selection, leaving the text out of every trace but ``KEPT`` (each question
    appended to ``asked``)."""

    def keep(trace_id: bytes) -> bool:
        if asked is not None:
            asked.append(trace_id)
        return trace_id == KEPT

    return dataclasses.replace(SELECTION, max_value_chars=limit, document_text=document_text(ConventionOptions(), keep))


def _any(value: Any, into: AnyValue) -> None:
    if isinstance(value, bool):
        into.bool_value = value
    elif isinstance(value, int):
        into.int_value = value
    elif isinstance(value, float):
        into.double_value = value
    elif isinstance(value, str):
        into.string_value = value
    elif isinstance(value, dict):
        into.kvlist_value.SetInParent()  # set when empty too
        for key, item in value.items():
            pair = into.kvlist_value.values.add()
            pair.key = key
            _any(item, pair.value)
    else:
        into.array_value.SetInParent()
        for item in value:
            _any(item, into.array_value.values.add())


def request(spans: list[tuple[bytes, list[tuple[str, Any]]]]) -> ExportTraceServiceRequest:
    """One request: a span per (trace id, attribute pairs in wire order, keys may repeat)."""
    req = ExportTraceServiceRequest()
    scope = req.resource_spans.add().scope_spans.add()
    for n, (trace_id, pairs) in enumerate(spans):
        span = scope.spans.add(trace_id=trace_id, span_id=(n + 1).to_bytes(8, "big"), name="retrieve")
        for key, value in pairs:
            pair = span.attributes.add(key=key)
            _any(value, pair.value)
    return req


def decoders() -> dict[str, Any]:
    """Every way a span is decoded: protobuf (Python and compiled), OTLP/JSON, in-process."""
    found: dict[str, Any] = {"python": python_decode_protobuf, "json": lambda body, sel: decode_json(MessageToJson(body).encode(), sel)}
    compiled = _compiled()
    if compiled is not None:
        found["compiled"] = compiled
    return found


def decode(name: str, req: ExportTraceServiceRequest, sel: SpanSelection) -> Decoded:
    if name == "json":
        return decode_json(MessageToJson(req).encode(), sel)
    body = req.SerializeToString()
    return python_decode_protobuf(body, sel) if name == "python" else _compiled()(body, sel)


def in_process(trace_id: bytes, attributes: dict[str, Any], sel: SpanSelection) -> tuple[Span, int]:
    """The in-process path: an SDK span's values (``ragmon.sidecar.inprocess``)."""
    span, cuts = span_from_values(
        sel, kept_resource({}, sel), (int.from_bytes(trace_id, "big"), 1, 0), "retrieve", (0, 1), 0, 1, False,
        attributes, (),
    )
    assert span is not None
    return span, cuts


NAMES = ["python", "json"] + (["compiled"] if _compiled() is not None else [])
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
    from ragmon.config import Config, MetricsConfig, ReceiverConfig
    from ragmon.scoring.records import ProbeLabels
    from ragmon.sidecar.wiring import Sidecar

    outside = [(2**128 - 1 - i).to_bytes(16, "big") for i in range(3)]  # low 8 bytes near 2**64: never sampled
    inside = (1).to_bytes(16, "big")
    for send in (True, False):
        config = Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen=""),
                        judge=JudgeConfig(sample_rate=0.1, send_documents=send))
        car = Sidecar(config)
        car.probes.registry.add(outside[0], ProbeLabels("p", {"d1": 1}), now=0.0)
        reads = car._reads_documents(config)
        assert [reads(outside[0]), reads(outside[1]), reads(inside)] == [send, False, send]


_EXAMPLE = [
    (f"{R}0.document.id", "d0"), (f"{R}0.document.content", "text 0"), (f"{R}0.document.metadata", "{}"),
    (f"{R}1.document.metadata", '{"no id": "its metadata is its id"}'),
    (f"{R}2.document.id", 7), (f"{R}2.document.content", "an int id: kept"),
    (f"{R}3.document.id", ""), (f"{R}3.document.content", "an empty id: kept"),
    (f"{R}4.document.content", 42), (f"{R}4.document.metadata", {"k": "v"}), (f"{R}4.document.id", "d4"),
    (f"{R}5.document.score", 0.5),  # none of id, content, metadata: the walk stops here
    (f"{R}6.document.id", "d6"), (f"{R}6.document.content", "after the stop: kept"),
    (f"{O}0.document.content", "reranked"), (f"{O}0.document.id", "r0"), (f"{O}0.document.metadata", "{}"),
    ("input.value", "q"),
]


def test_documents_with_an_id_lose_their_metadata_and_text_in_every_decoder() -> None:
    full = dict(_EXAMPLE)
    expected = {
        **full, f"{R}0.document.content": "", f"{O}0.document.content": "",
    }
    for key in (f"{R}0.document.metadata", f"{R}4.document.metadata", f"{O}0.document.metadata"):
        del expected[key]
    for name in NAMES:
        left, kept = decode(name, request([(LEFT, _EXAMPLE), (KEPT, _EXAMPLE)]), selection()).spans
        assert _plain(left.attributes) == expected, name
        assert _plain(kept.attributes) == full, name
    assert _plain(in_process(LEFT, full, selection())[0].attributes) == expected
    assert _plain(in_process(KEPT, full, selection())[0].attributes) == full


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A kept key-value list (a JSON string) back as the dict it was written from."""
    return {k: json.loads(v) if isinstance(v, str) and v.startswith("{\"k") else v for k, v in attributes.items()}


def test_the_text_left_out_is_not_read_and_the_trace_is_asked_once_a_span_with_documents() -> None:
    """A text past ``max_value_chars`` is cut where it is read (one cut) and not where it is
    left out (none, and the span holds ""); the keep-or-leave question is asked once for each
    span with documents, never for the others."""
    long_text = [(f"{R}0.document.id", "d0"), (f"{R}0.document.content", "x" * 500), (f"{R}1.document.id", "d1"), (f"{R}1.document.content", "y" * 500)]
    plain = [("input.value", "q")]
    for name in NAMES:
        asked: list[bytes] = []
        decoded = decode(name, request([(LEFT, plain), (KEPT, long_text), (LEFT, long_text)]), selection(100, asked))
        assert asked == [KEPT, LEFT], name
        assert decoded.truncated == 2, name  # the kept trace's two texts
        assert [s.attributes.get(f"{R}0.document.content") for s in decoded.spans] == [None, "x" * 100, ""]
    asked = []
    span, cuts = in_process(LEFT, dict(long_text), selection(100, asked))
    assert (span.attributes[f"{R}1.document.content"], cuts, asked) == ("", 0, [LEFT])
    span, cuts = in_process(KEPT, dict(plain), selection(100, asked))
    assert (cuts, asked) == (0, [LEFT])


def test_other_id_places_keep_everything() -> None:
    assert document_text(ConventionOptions(document_id=("metadata.source", "document.id")), lambda _: False) is None


_VALUE = st.one_of(_TEXT, st.text(alphabet="z", min_size=60, max_size=70), st.integers(0, 2), st.lists(_TEXT, max_size=2),
                   st.dictionaries(st.sampled_from("xy"), _TEXT, max_size=2))
_ANY_DOC = st.fixed_dictionaries({}, optional={"id": _ID, "content": _VALUE, "metadata": _VALUE, "score": st.floats(0, 1)})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ANY_DOC, max_size=5), st.lists(_ANY_DOC, max_size=3), st.sampled_from([20, 40, 16_384]), st.data())
def test_every_decoder_leaves_out_what_a_drop_after_decoding_would(
    docs: list[dict[str, Any]], reranked: list[dict[str, Any]], limit: int, data: st.DataObject
) -> None:
    """Attributes in any wire order, keys repeated (the last value counts), values of every kind,
    at limits that cut values and drop keys: each decoder's spans of a trace left out hold what
    its full decode holds after ``drop_document_text`` (in the same order), and their size and
    cuts are those of a request that never carried the text (every key within the limit, none
    repeated: OTLP/JSON counts a repeated key's every value)."""
    pairs = [(f"{prefix}{n}.document.{f}", v) for prefix, listed in ((R, docs), (O, reranked))
             for n, doc in enumerate(listed) for f, v in doc.items() if v is not None]
    pairs = data.draw(st.permutations(pairs + [("input.value", "q")]))
    if pairs:
        pairs += data.draw(st.lists(st.tuples(st.sampled_from([k for k, _ in pairs]), _VALUE), max_size=2))
    raw = dict(pairs)
    # what a request without the text would carry: the rule reads values as kept (a key-value
    # list as its JSON text, an id too)
    kept: dict[str, Any] = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in raw.items()}
    drop_document_text(kept)
    never = {k: "" if kept[k] == "" else raw[k] for k in kept}
    full_selection = dataclasses.replace(SELECTION, max_value_chars=limit)
    for name in NAMES:
        left = decode(name, request([(LEFT, pairs)]), selection(limit)).spans[0]
        after = dict(decode(name, request([(LEFT, pairs)]), full_selection).spans[0].attributes)
        drop_document_text(after)
        assert left.attributes == after and list(left.attributes) == list(after), name
        if limit == 16_384 and len(raw) == len(pairs):  # every key fits, none repeats (JSON counts each repeat)
            without = decode(name, request([(LEFT, list(never.items()))]), full_selection)
            assert left.size == without.spans[0].size, name
            assert decode(name, request([(LEFT, pairs)]), selection(limit)).truncated == without.truncated, name
    span, cuts = in_process(LEFT, raw, selection(limit))
    after = dict(in_process(LEFT, raw, full_selection)[0].attributes)
    drop_document_text(after)
    assert span.attributes == after and list(span.attributes) == list(after)
    if limit == 16_384:
        assert (span.size, cuts) == (in_process(LEFT, never, full_selection)[0].size, in_process(LEFT, never, full_selection)[1])



