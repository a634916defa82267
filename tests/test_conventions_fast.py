"""The fast ``extract_rag_record``: document layouts, ids, usage and walk order, case by case.

The literal expectations below were taken once from the implementation the speed-up replaced
(document flattening and resolution, span classification, the depth-first walk, the record
assembly), so they pin the same readings. Hypothesis builds traces with random OpenInference
document layouts (gaps in the indices, missing and unknown fields, ids as int/str/float,
metadata JSON strings, reranker output documents, LangChain ids in ``output.value``), random
span kinds and trees (duplicate ids, cycles, missing parents), and checks that every record is
well formed and that the document layers agree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragmon.conventions import (
    ConventionOptions,
    extract_rag_record,
    genai,
    openinference,
    openllmetry,
)
from ragmon.conventions import _common as common
from ragmon.conventions import _extract as extract
from ragmon.conventions._common import (
    DOCUMENT_FIELDS,
    content_hash,
    flattened_documents,
    resolve_documents,
    resolve_flattened,
)
from ragmon.model import (
    AttrValue,
    LlmCall,
    RagRecord,
    RetrievedDocument,
    Span,
    SpanEvent,
    Trace,
)

# == strategies ===============================================================================

SETTINGS = settings(
    max_examples=400,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RETRIEVAL = openinference.RETRIEVAL_DOCUMENTS
RERANKED = openinference.RERANKER_OUTPUT_DOCUMENTS

_texts = st.text(alphabet="ab ?{}\"", max_size=4)
_ids = st.one_of(
    st.sampled_from(["d1", "d2", "d3", "", "0", " "]),
    st.sampled_from(["", None]),
    st.integers(min_value=-2, max_value=5),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([3.0, 2.5, -0.0, 1e20]),
    st.booleans(),
    st.none(),
    st.just(("d1", 2)),
    st.just(b"d1"),
)
_scores = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, -0.0]),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from(["0.5", "x", "inf", "nan", "", "1e400"]),
    st.none(),
    st.booleans(),
)
_metadata = st.one_of(
    st.sampled_from(
        [
            json.dumps({"source": "s1", "doc_id": 7, "file": {"name": "f.md"}}),
            json.dumps({"source": "s2", "file": {"name": "g.md"}}),
            json.dumps({"file.name": "dotted.md", "doc_id": ""}),
            json.dumps({"doc_id": 2.0}),
            "not json",
            "{}",
            "[]",
            "",
        ]
    ),
    st.none(),
    st.integers(min_value=0, max_value=2),
    st.just(("a", "b")),
)
_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": _ids,
    "score": _scores,
    "content": st.one_of(_texts, st.none(), st.integers(0, 3)),
    "metadata": _metadata,
    "page_content": st.one_of(_texts, st.none()),
    "text": _texts,
    "url": st.one_of(st.sampled_from(["u1", "u2", ""]), st.integers(0, 2)),
    "": st.just("empty-field"),
    "a.b": st.just("dotted-field"),
}
_USUAL = ("id", "score", "content", "metadata")


@st.composite
def oi_documents(draw: st.DrawFn, prefix: str) -> dict[str, AttrValue]:
    """``<prefix>N.document.<field>`` attributes: usually the clean layout (0..n-1, the usual
    fields), else gaps, unknown fields and malformed keys."""
    out: dict[str, AttrValue] = {}
    clean = draw(st.booleans())
    if clean:
        indices = list(range(draw(st.integers(0, 6))))
    else:
        indices = draw(st.lists(st.integers(0, 9), unique=True, max_size=6))
    for i in indices:
        names = _USUAL if clean else tuple(_FIELD_VALUES)
        fields = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=4))
        for field in fields:
            out[f"{prefix}{i}.document.{field}"] = draw(_FIELD_VALUES[field])
    if not clean:
        extras = draw(
            st.lists(
                st.sampled_from(
                    [
                        f"{prefix}01.document.id",
                        f"{prefix}x",
                        f"{prefix}0.foo",
                        f"{prefix}2.document",
                        f"{prefix}3.document.",
                        f"{prefix}130.document.id",
                        f"{prefix}1x.document.id",
                    ]
                ),
                unique=True,
                max_size=2,
            )
        )
        for key in extras:
            out[key] = draw(_ids)
    keys = list(out)
    order = draw(st.permutations(keys))  # decoders keep the wire order, not the index order
    return {key: out[key] for key in order}


_OUTPUT_VALUES = st.sampled_from(
    [
        json.dumps({"documents": [{"id": "L1"}, {"id": 3}, {"id": ""}, {"x": 1}]}),
        json.dumps({"documents": [{"id": "L9", "page_content": "p"}]}),
        json.dumps({"documents": []}),
        json.dumps([{"id": "L2"}]),
        "[]",
        "plain answer",
        json.dumps({"answer": "A"}),
        "{broken",
    ]
)
_KINDS = st.one_of(
    st.sampled_from(
        ["RETRIEVER", "RERANKER", "LLM", "EMBEDDING", "CHAIN", "TOOL", "retriever", "Llm",
         "AGENT", "Reranker", "", "weird"]
    ).map(lambda k: {openinference.KIND: k}),
    st.sampled_from(["chat", "retrieval", "embeddings", "rerank", "Chat", "execute_tool"]).map(
        lambda op: {genai.OPERATION: op}
    ),
    st.sampled_from(["chat", "completion", "embedding", "rerank", "other"]).map(
        lambda t: {openllmetry.REQUEST_TYPE: t}
    ),
    st.just({genai.REQUEST_MODEL: "g-model"}),
    st.just({openinference.KIND: 3}),
)
_counts = st.one_of(
    st.integers(min_value=-1, max_value=50), st.sampled_from([2.0, 2.5, "12", "x", True])
)
_OTHER_ATTRIBUTES: dict[str, st.SearchStrategy[Any]] = {
    openinference.INPUT_VALUE: st.one_of(_texts, st.just(json.dumps({"question": "Q?"}))),
    openinference.INPUT_MIME_TYPE: st.sampled_from(["text/plain", "application/json", ""]),
    openinference.OUTPUT_VALUE: _OUTPUT_VALUES,
    openinference.OUTPUT_MIME_TYPE: st.sampled_from(["text/plain", "application/json"]),
    openinference.TOKENS_PROMPT: _counts,
    openinference.TOKENS_COMPLETION: _counts,
    openinference.TOKENS_TOTAL: _counts,
    openinference.TOKENS_CACHE_READ: _counts,
    openinference.COST_TOTAL: _scores,
    openinference.COST_PROMPT: _scores,
    openinference.COST_COMPLETION: _scores,
    openinference.RERANKER_QUERY: st.one_of(_texts, st.integers(0, 1)),
    "llm.model_name": st.sampled_from(["m1", "", "m2"]),
    "embedding.model_name": st.just("e1"),
    "llm.provider": st.sampled_from(["openai", ""]),
    "llm.system": st.just("sys"),
    genai.RESPONSE_MODEL: st.just("r-model"),
    genai.PROVIDER: st.just("gp"),
    genai.INPUT_TOKENS: _counts,
    genai.OUTPUT_TOKENS: _counts,
    genai.PROMPT_TOKENS: _counts,
    openllmetry.TOTAL_TOKENS: _counts,
    "llm.input_messages.0.message.role": st.sampled_from(["user", "system"]),
    "llm.input_messages.0.message.content": _texts,
    "llm.output_messages.0.message.role": st.just("assistant"),
    "llm.output_messages.0.message.content": _texts,
    genai.INPUT_MESSAGES: st.just(json.dumps([{"role": "user", "parts": [{"content": "gq"}]}])),
    genai.OUTPUT_MESSAGES: st.just(json.dumps([{"role": "assistant", "content": "ga"}])),
    genai.RETRIEVAL_QUERY: _texts,
    genai.RETRIEVAL_DOCUMENTS: st.sampled_from(
        [json.dumps([{"id": "g1", "score": 0.5}, {"content": "gc"}]), "[]", "", ("{\"id\": 1}",)]
    ),
    openllmetry.ENTITY_INPUT: st.just(json.dumps({"args": ["ea"]})),
    openllmetry.ENTITY_OUTPUT: st.just(json.dumps("eo")),
    extract.RELEVANT_IDS: st.one_of(
        st.just(("d1", "d3")), st.sampled_from(['["d2", 5]', "d1", ""]), st.just((1, True, ""))
    ),
    extract.RELEVANCE: st.sampled_from([json.dumps({"d1": 2, "L1": 1.0}), "{}", "x"]),
    extract.REFERENCE_ANSWER: _texts,
    "ragmon.variant": st.one_of(st.sampled_from(["A", ""]), st.integers(0, 2)),
}


def _events() -> st.SearchStrategy[tuple[SpanEvent, ...]]:
    evaluation = st.builds(
        lambda name, score: SpanEvent(
            genai.EVALUATION_EVENT,
            0,
            {genai.EVALUATION_NAME: name, genai.EVALUATION_SCORE: score},
        ),
        st.sampled_from(["relevance", ""]),
        st.one_of(st.floats(0, 1), st.none()),
    )
    result = st.builds(
        lambda doc_id, score, content: SpanEvent(
            openllmetry.QUERY_RESULT_EVENT,
            0,
            {
                "db.query.result.id": doc_id,
                "db.query.result.score": score,
                "db.query.result.document": content,
            },
        ),
        _ids,
        _scores,
        st.one_of(_texts, st.none()),
    )
    return st.lists(st.one_of(evaluation, result), max_size=2).map(tuple)


_SPAN_IDS = [bytes([i]) * 8 for i in range(1, 9)]


_TYPICAL: dict[str, tuple[str, ...]] = {
    # what spans of each OpenInference kind usually carry, drawn more often than the rest
    "RETRIEVER": (RETRIEVAL, openinference.INPUT_VALUE, openinference.OUTPUT_VALUE,
                  extract.RELEVANT_IDS),
    "RERANKER": (RERANKED, openinference.RERANKER_QUERY),
    "LLM": ("llm.model_name", openinference.TOKENS_PROMPT, openinference.TOKENS_COMPLETION,
            "llm.output_messages.0.message.content", "llm.input_messages.0.message.content"),
    "EMBEDDING": ("embedding.model_name", openinference.TOKENS_TOTAL),
    "CHAIN": (openinference.INPUT_VALUE, openinference.OUTPUT_VALUE, extract.REFERENCE_ANSWER),
}


@st.composite
def spans_attributes(draw: st.DrawFn) -> dict[str, AttrValue]:
    if draw(st.integers(0, 3)) == 0:
        return {}  # a plain HTTP/DB span: the decoder kept nothing
    out: dict[str, AttrValue] = {}
    kind = draw(st.sampled_from([*_TYPICAL, "other", "none"]))
    if kind == "other":
        out.update(draw(_KINDS))
    elif kind != "none":
        out[openinference.KIND] = kind
    for key in _TYPICAL.get(kind, ()):
        if draw(st.integers(0, 3)):
            if key in (RETRIEVAL, RERANKED):
                out.update(draw(oi_documents(key)))
            else:
                out[key] = draw(_OTHER_ATTRIBUTES[key])
    for key in draw(st.lists(st.sampled_from(list(_OTHER_ATTRIBUTES)), unique=True, max_size=4)):
        out[key] = draw(_OTHER_ATTRIBUTES[key])
    if draw(st.integers(0, 5)) == 0:
        out.update(draw(oi_documents(RETRIEVAL)))
    if draw(st.integers(0, 7)) == 0:
        out.update(draw(oi_documents(RERANKED)))
    return out


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    count = draw(st.integers(1, 7))
    spans: list[Span] = []
    for i in range(count):
        unique = draw(st.integers(0, 5))
        span_id = _SPAN_IDS[i] if unique else draw(st.sampled_from(_SPAN_IDS))
        parent = draw(st.sampled_from([b"", b"\xff" * 8, *_SPAN_IDS[: max(i, 1) + 1]]))
        if i and draw(st.integers(0, 2)):  # mostly trees: a parent made before
            parent = spans[draw(st.integers(0, i - 1))].span_id
        start = draw(st.integers(0, 3))
        spans.append(
            Span(
                trace_id=b"\x01" * 16,
                span_id=span_id,
                parent_span_id=parent,
                name=f"s{i}",
                start_ns=start * 1_000_000,
                end_ns=(start + draw(st.integers(-1, 5))) * 1_000_000,
                error=draw(st.integers(0, 6)) == 0,
                service=draw(st.sampled_from(["svc", ""])),
                attributes=draw(spans_attributes()),
                events=draw(_events()) if draw(st.integers(0, 3)) == 0 else (),
                resource=draw(st.sampled_from([{}, {"ragmon.variant": "R"}])),
            )
        )
    root_choice = draw(st.integers(-2, count - 1))
    return Trace(b"\x01" * 16, tuple(spans), spans[root_choice] if root_choice >= 0 else None)


_OPTIONS = st.builds(
    ConventionOptions,
    document_id=st.sampled_from(
        [
            *[("document.id",)] * 6,
            ("metadata.source", "document.id"),
            ("document.url",),
            ("document.content",),
            ("metadata.file.name",),
            ("document.id", "metadata.doc_id"),
            ("document.a.b", "document.page_content"),
            ("metadata.doc_id", "document.text"),
        ]
    ),
    keep_content=st.booleans(),
)


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as exc:  # noqa: BLE001 - a failure must be the same failure both ways
        return ("raised", type(exc))


# == the properties: the layers agree, every record is well formed ===========================


@SETTINGS
@given(trace=traces(), options=_OPTIONS)
def test_extract_rag_record_gives_well_formed_records(
    trace: Trace, options: ConventionOptions
) -> None:
    record = extract_rag_record(trace, options)
    assert record == extract_rag_record(trace, options)  # deterministic
    if record is None:
        return
    assert isinstance(record, RagRecord)
    assert record.root_span_id == (trace.root.span_id if trace.root is not None else b"")
    for ranking in (record.retrieved, record.reranked or ()):
        for document in ranking:
            assert isinstance(document, RetrievedDocument) and isinstance(document.id, str)
            assert document.score is None or isinstance(document.score, float)
            assert options.keep_content or document.content is None or document.content == ""
    for call in record.llm_calls:
        assert isinstance(call, LlmCall)


@SETTINGS
@given(
    attributes=st.one_of(oi_documents(RETRIEVAL), spans_attributes()),
    options=_OPTIONS,
    fields=st.sampled_from([DOCUMENT_FIELDS, ("id",), ("content", "url", "text"), ()]),
    with_fallback=st.booleans(),
)
def test_flattened_documents_agree_with_resolution(
    attributes: dict[str, AttrValue],
    options: ConventionOptions,
    fields: tuple[str, ...],
    with_fallback: bool,
) -> None:
    """The field list is only a speed hint; resolving the flattened list in one step gives what
    flattening then resolving gives."""
    flat = _outcome(lambda: flattened_documents(attributes, RETRIEVAL))
    assert _outcome(lambda: flattened_documents(attributes, RETRIEVAL, fields)) == flat
    fallback = (lambda: ["F0", None, "F2"]) if with_fallback else None
    assert _outcome(lambda: resolve_flattened(attributes, RETRIEVAL, options, fallback)) == (
        _outcome(lambda: resolve_documents(flat[1], options, fallback)) if flat[0] == "ok" else flat
    )


# == layouts named in the brief, checked one by one ===========================================


def _docs(prefix: str, layout: dict[int, dict[str, AttrValue]]) -> dict[str, AttrValue]:
    return {
        f"{prefix}{i}.document.{field}": value
        for i, fields in layout.items()
        for field, value in fields.items()
    }


def _retriever_trace(attributes: dict[str, AttrValue]) -> Trace:
    root = Span(b"\x01" * 16, b"\x01" * 8, b"", "root", 0, 10, attributes={"input.value": "q"})
    retriever = Span(
        b"\x01" * 16,
        b"\x02" * 8,
        b"\x01" * 8,
        "retrieve",
        1,
        5,
        attributes={openinference.KIND: "RETRIEVER", **attributes},
    )
    return Trace(b"\x01" * 16, (root, retriever), root)


_BY_URL = ConventionOptions(document_id=("document.url", "document.content"))
_D = RetrievedDocument
_LONG = {i: {"id": f"d{i}"} for i in range(200)}
_SPARSE = {i: {"id": i} for i in range(0, 300, 7)}


@pytest.mark.parametrize(
    ("layout", "flat", "by_id", "by_url"),
    [
        pytest.param(
            {0: {"id": "a"}, 1: {"id": "b"}, 3: {"id": "d"}},
            [{"id": "a"}, {"id": "b"}, {"id": "d"}],
            [_D("a"), _D("b"), _D("d")],
            [_D("#0"), _D("#1"), _D("#2")],
            id="gap",
        ),
        pytest.param(
            {1: {"id": "b"}, 0: {"id": "a"}},
            [{"id": "a"}, {"id": "b"}],
            [_D("a"), _D("b")],
            [_D("#0"), _D("#1")],
            id="out-of-order",
        ),
        pytest.param(
            {0: {"id": "a", "url": "u"}, 1: {"id": "b"}},
            [{"id": "a", "url": "u"}, {"id": "b"}],
            [_D("a"), _D("b")],
            [_D("u"), _D("#1")],
            id="unknown-field",
        ),
        pytest.param(  # the first document has no usual field: the span lists none
            {0: {"url": "u"}, 1: {"id": "b"}}, [{"url": "u"}, {"id": "b"}], [], [],
            id="only-unknown-field",
        ),
        pytest.param(
            {0: {"id": None, "content": "c"}, 1: {"score": 0.5}},
            [{"id": None, "content": "c"}, {"score": 0.5}],
            [_D(content_hash("c"), None, "c"), _D("#1", 0.5)],
            [_D("c", None, "c"), _D("#1", 0.5)],
            id="none-values",
        ),
        pytest.param(
            _LONG,
            [{"id": f"d{i}"} for i in range(200)],
            [_D(f"d{i}") for i in range(200)],
            [_D(f"#{i}") for i in range(200)],
            id="more-than-the-key-table",
        ),
        pytest.param(
            _SPARSE,
            [{"id": i} for i in range(0, 300, 7)],
            [_D(str(i)) for i in range(0, 300, 7)],
            [_D(f"#{n}") for n in range(43)],
            id="sparse-and-long",
        ),
        pytest.param(  # aliases are not usual fields of the first document: none listed
            {0: {"page_content": "p"}, 1: {"text": "t", "id": 2.0}},
            [{"page_content": "p"}, {"text": "t", "id": 2.0}],
            [],
            [],
            id="aliases",
        ),
    ],
)
def test_layouts(
    layout: dict[int, dict[str, AttrValue]],
    flat: list[dict[str, Any]],
    by_id: list[RetrievedDocument],
    by_url: list[RetrievedDocument],
) -> None:
    for prefix in (RETRIEVAL, RERANKED):
        assert flattened_documents(_docs(prefix, layout), prefix) == flat
    trace = _retriever_trace(
        {**_docs(RETRIEVAL, layout), **_docs(RERANKED, layout), "retrieval.documents.x": 1}
    )
    for options, expected in ((ConventionOptions(), by_id), (_BY_URL, by_url)):
        record = extract_rag_record(trace, options)
        assert record is not None
        assert list(record.retrieved) == expected
        assert record.reranked is None  # reranker attributes on a retriever span are not read
        assert (record.query, record.start_ns, record.end_ns) == ("q", 0, 10)
        assert record.stage_seconds == {"retrieval": 4e-09}
        assert record.root_span_id == b"\x01" * 8


def test_index_written_with_a_leading_zero_is_merged_as_before() -> None:
    attributes = _docs(RETRIEVAL, {0: {"id": "a"}, 1: {"id": "b"}})
    attributes[f"{RETRIEVAL}01.document.score"] = 0.25
    attributes[f"{RETRIEVAL}01.document.id"] = "b-again"
    got = flattened_documents(attributes, RETRIEVAL)
    assert got == [{"id": "a"}, {"id": "b-again", "score": 0.25}]


def test_langchain_ids_from_output_value() -> None:
    layout: dict[int, dict[str, AttrValue]] = {
        0: {"content": "c0", "metadata": "{}"},
        1: {"content": "c1"},
        2: {"content": "c2"},
    }
    output = json.dumps({"documents": [{"id": "L0"}, {"id": ""}, {"id": 7}]})
    trace = _retriever_trace({**_docs(RETRIEVAL, layout), openinference.OUTPUT_VALUE: output})
    record = extract_rag_record(trace, ConventionOptions())
    assert record is not None
    assert [d.id for d in record.retrieved] == ["L0", content_hash("c1"), "7"]


def test_ties_in_start_time_keep_the_old_order() -> None:
    """Siblings that start together: the walk visits the later-listed first (as before), so it
    gives the entry text and the order of the model calls."""
    tid = b"\x01" * 16

    def span(n: int, parent: int, attributes: dict[str, AttrValue]) -> Span:
        return Span(tid, bytes([n]) * 8, bytes([parent]) * 8 if parent else b"", f"s{n}", 1, 2,
                    attributes=attributes)

    root = span(1, 0, {openinference.KIND: "CHAIN"})
    spans = (
        root,
        span(2, 1, {openinference.KIND: "CHAIN", openinference.INPUT_VALUE: "first listed"}),
        span(3, 1, {openinference.KIND: "CHAIN", openinference.INPUT_VALUE: "second listed"}),
        span(4, 1, {openinference.KIND: "LLM", "llm.model_name": "m4"}),
        span(5, 1, {openinference.KIND: "LLM", "llm.model_name": "m5"}),
        span(6, 1, {openinference.KIND: "RETRIEVER", **_docs(RETRIEVAL, {0: {"id": "r6"}})}),
        span(7, 1, {openinference.KIND: "RETRIEVER", **_docs(RETRIEVAL, {0: {"id": "r7"}})}),
    )
    rootless = extract_rag_record(Trace(tid, spans[1:], None), ConventionOptions())
    assert rootless is not None  # no root: the orphans are tops, taken in listed order
    assert (rootless.query, rootless.start_ns, rootless.end_ns) == ("first listed", 1, 2)
    assert [c.model for c in rootless.llm_calls] == ["m4", "m5"]
    assert [d.id for d in rootless.retrieved] == ["r6"]
    assert rootless.stage_seconds == {"generation": 2e-09, "retrieval": 2e-09}
    assert rootless.root_span_id == b""
    record = extract_rag_record(Trace(tid, spans, root), ConventionOptions())
    assert record is not None
    assert record.query == "second listed"
    assert [c.model for c in record.llm_calls] == ["m5", "m4"]
    assert [d.id for d in record.retrieved] == ["r7"]


# == ids, scores, counts and usage, case by case ==============================================

_RAW: list[list[dict[str, Any]]] = [
    [],
    [{"id": "d1", "score": 0.5, "content": "c"}],
    [{"id": None, "content": "c"}, {"id": ""}, {"id": 3.0}, {"id": 2.5}, {"id": True}, {"id": math.nan}],
    [
        {"metadata": json.dumps({"source": "s1", "doc_id": 7, "file": {"name": "f.md"}})},
        {"metadata": "not json"},
        {"metadata": {"source": "obj", "file": {"name": "n"}}},
    ],
    [{"score": "0.5"}, {"score": "x"}, {"score": math.inf}, {"score": True}, {"score": -0.0}],
    [{"page_content": "p", "text": "t", "url": "u1"}],
    [{"id": ("d1", 2)}, {"id": b"d1"}],
    [
        {"metadata": json.dumps({"file.name": "dotted.md", "doc_id": ""})},
        {"metadata": json.dumps({"doc_id": 2.0})},
    ],
]


@pytest.mark.parametrize(
    ("raw", "document_id", "with_fallback", "keep_content", "expected"),
    [
        (0, ('document.id',), False, True, []),
        (0, ('document.id',), True, True, []),
        (1, ('document.id',), False, True, [('d1', 0.5, 'c')]),
        (1, ('document.id',), False, False, [('d1', 0.5, None)]),
        (1, ('document.id',), True, True, [('d1', 0.5, 'c')]),
        (1, ('metadata.source', 'document.id'), False, False, [('d1', 0.5, None)]),
        (1, ('document.url',), False, False, [('sha256:2e7d2c03a9507ae2', 0.5, None)]),
        (1, ('document.content',), False, False, [('c', 0.5, None)]),
        (1, ('metadata.file.name',), False, False, [('sha256:2e7d2c03a9507ae2', 0.5, None)]),
        (1, ('document.id', 'metadata.doc_id'), False, False, [('d1', 0.5, None)]),
        (1, ('document.a.b', 'document.page_content'), False, False, [('sha256:2e7d2c03a9507ae2', 0.5, None)]),
        (1, ('metadata.doc_id', 'document.text'), False, False, [('sha256:2e7d2c03a9507ae2', 0.5, None)]),
        (2, ('document.id',), False, True, [('sha256:2e7d2c03a9507ae2', None, 'c'), ('#1', None, None), ('3', None, None), ('2.5', None, None), ('#4', None, None), ('#5', None, None)]),
        (2, ('document.id',), True, True, [('F0', None, 'c'), ('#1', None, None), ('3', None, None), ('2.5', None, None), ('#4', None, None), ('#5', None, None)]),
        (3, ('document.id',), False, True, [('sha256:1ac1497977e0b162', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('document.id',), True, True, [('F0', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('metadata.source', 'document.id'), False, True, [('s1', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('obj', None, None)]),
        (3, ('document.url',), False, True, [('sha256:1ac1497977e0b162', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('document.content',), False, True, [('sha256:1ac1497977e0b162', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('metadata.file.name',), False, True, [('f.md', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('n', None, None)]),
        (3, ('document.id', 'metadata.doc_id'), False, True, [('7', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('document.a.b', 'document.page_content'), False, True, [('sha256:1ac1497977e0b162', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (3, ('metadata.doc_id', 'document.text'), False, True, [('7', None, None), ('sha256:7ccfa1fbf3940e6f', None, None), ('sha256:029c06ac6ffe809f', None, None)]),
        (4, ('document.id',), False, True, [('#0', 0.5, None), ('#1', None, None), ('#2', None, None), ('#3', None, None), ('#4', -0.0, None)]),
        (4, ('document.id',), True, True, [('F0', 0.5, None), ('#1', None, None), ('#2', None, None), ('#3', None, None), ('#4', -0.0, None)]),
        (5, ('document.id',), False, True, [('sha256:148de9c5a7a44d19', None, 'p')]),
        (5, ('document.id',), True, True, [('F0', None, 'p')]),
        (5, ('metadata.source', 'document.id'), False, True, [('sha256:148de9c5a7a44d19', None, 'p')]),
        (5, ('document.url',), False, True, [('u1', None, 'p')]),
        (5, ('document.content',), False, True, [('p', None, 'p')]),
        (5, ('metadata.file.name',), False, True, [('sha256:148de9c5a7a44d19', None, 'p')]),
        (5, ('document.id', 'metadata.doc_id'), False, True, [('sha256:148de9c5a7a44d19', None, 'p')]),
        (5, ('document.a.b', 'document.page_content'), False, True, [('p', None, 'p')]),
        (5, ('metadata.doc_id', 'document.text'), False, True, [('t', None, 'p')]),
        (6, ('document.id',), False, True, [('#0', None, None), ('#1', None, None)]),
        (6, ('document.id',), True, True, [('F0', None, None), ('#1', None, None)]),
        (7, ('document.id',), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('document.id',), True, True, [('F0', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('metadata.source', 'document.id'), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('document.url',), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('document.content',), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('metadata.file.name',), False, True, [('dotted.md', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('document.id', 'metadata.doc_id'), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('2', None, None)]),
        (7, ('document.a.b', 'document.page_content'), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('sha256:629a5dd94308afbd', None, None)]),
        (7, ('metadata.doc_id', 'document.text'), False, True, [('sha256:5be5e2d3fae07d75', None, None), ('2', None, None)]),
    ],
)
def test_resolve_documents(
    raw: int,
    document_id: tuple[str, ...],
    with_fallback: bool,
    keep_content: bool,
    expected: list[tuple[str, float | None, str | None]],
) -> None:
    """Ids from the configured places, else the fallback (empty ones skipped), else a content
    hash, else the position; scores only when finite numbers (numeric text counts)."""
    options = ConventionOptions(document_id=document_id, keep_content=keep_content)
    fallback = (lambda: ["F0", "", None]) if with_fallback else None
    got = resolve_documents(_RAW[raw], options, fallback)
    assert [(d.id, d.score, d.content) for d in got] == expected


def _usage(usage: Any) -> tuple[int, int, int] | None:
    return None if usage is None else (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens)


@pytest.mark.parametrize(
    ("attributes", "oi", "gen_ai", "llm", "cost", "documents", "reranked"),
    [
        ({}, None, None, None, None, False, False),
        ({openinference.TOKENS_PROMPT: 10, openinference.TOKENS_COMPLETION: 5}, (10, 5, 0), None, None, None, False, False),
        ({openinference.TOKENS_TOTAL: 20, openinference.TOKENS_PROMPT: "12"}, (12, 0, 0), None, None, None, False, False),
        ({openinference.TOKENS_COMPLETION: 2.5, openinference.TOKENS_CACHE_READ: 3}, None, None, None, None, False, False),
        ({openinference.TOKENS_PROMPT: True, openinference.TOKENS_COMPLETION: "x"}, None, None, None, None, False, False),
        ({openinference.COST_TOTAL: 0.5}, None, None, None, 0.5, False, False),
        ({openinference.COST_PROMPT: 0.25, openinference.COST_COMPLETION: "0.5"}, None, None, None, 0.75, False, False),
        ({openinference.COST_TOTAL: math.nan, openinference.COST_PROMPT: 1}, None, None, None, 1.0, False, False),
        ({openinference.COST_TOTAL: 1e6}, None, None, None, 1e6, False, False),
        ({openinference.COST_TOTAL: 1.0000001e6}, None, None, None, None, False, False),
        ({openinference.COST_PROMPT: 1e308, openinference.COST_COMPLETION: 1e308}, None, None, None, None, False, False),
        ({openinference.TOKENS_PROMPT: 1e308, openinference.TOKENS_COMPLETION: 2**63 - 1}, None, None, None, None, False, False),
        ({genai.INPUT_TOKENS: "²", genai.OUTPUT_TOKENS: 10**12}, None, (0, 10**12, 0), None, None, False, False),
        ({genai.INPUT_TOKENS: 7, genai.OUTPUT_TOKENS: 3}, None, (7, 3, 0), None, None, False, False),
        ({genai.PROMPT_TOKENS: 4, openllmetry.TOTAL_TOKENS: 9}, None, (4, 0, 0), (9, 0, 0), None, False, False),
        ({genai.INPUT_TOKENS: -1, genai.OUTPUT_TOKENS: 2.0}, None, (0, 2, 0), None, None, False, False),
        ({openllmetry.TOTAL_TOKENS: 9}, None, None, (9, 0, 0), None, False, False),
        ({f"{RETRIEVAL}0.document.id": "a"}, None, None, None, None, True, False),
        ({f"{RERANKED}0.document.id": "a"}, None, None, None, None, False, True),
    ],
)
def test_usage_and_cost(
    attributes: dict[str, AttrValue],
    oi: tuple[int, int, int] | None,
    gen_ai: tuple[int, int, int] | None,
    llm: tuple[int, int, int] | None,
    cost: float | None,
    documents: bool,
    reranked: bool,
) -> None:
    assert _usage(openinference.usage(attributes)) == oi
    assert _usage(genai.usage(attributes)) == gen_ai
    assert _usage(openllmetry.usage(attributes)) == llm
    assert openinference.cost(attributes) == cost
    assert openinference.has_documents(attributes) == documents
    assert openinference.has_reranked(attributes) == reranked


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ('[{}, "a", 1, true, [2], null, ""]', {"a": 1, "1": 1}),
        ('[{"id": "x"}]', {}),
        (("b", "", "c"), {"b": 1, "c": 1}),
        ("d", {"d": 1}),
    ],
)
def test_relevant_ids_take_ids_and_skip_anything_else(ids: Any, expected: dict[str, int]) -> None:
    """A JSON array of relevant ids may hold anything: objects, arrays, booleans and nulls are
    skipped (compiled, an item outside the attribute types once raised TypeError)."""
    assert extract._labels({extract.RELEVANT_IDS: ids}) == expected
