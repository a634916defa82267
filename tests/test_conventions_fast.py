"""The fast ``extract_rag_record`` reads traces exactly as the implementation it replaced.

``_Old`` below is a frozen copy of the functions the speed-up rewrote (document flattening and
resolution, span classification, the depth-first walk, the record assembly): the oracle.
Helpers the speed-up left alone (``_labels``, JSON text, messages, …) are shared. Hypothesis
builds traces with random OpenInference document layouts (gaps in the indices, missing and
unknown fields, ids as int/str/float, metadata JSON strings, reranker output documents,
LangChain ids in ``output.value``), random span kinds and trees (duplicate ids, cycles, missing
parents), and compares records, documents and raised exceptions.
"""

from __future__ import annotations

import dataclasses

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
    _DOCUMENT_FIELD_ALIASES,
    DOCUMENT_FIELDS,
    _id_text,
    _metadata_value,
    as_float,
    as_str,
    content_hash,
    flattened_documents,
    loads,
    resolve_documents,
    resolve_flattened,
)
from ragmon.model import (
    Attributes,
    AttrValue,
    Evaluation,
    LlmCall,
    RagRecord,
    RetrievedDocument,
    Span,
    SpanEvent,
    Stage,
    Trace,
)

RawDocument = Mapping[str, Any]

# == the oracle: the replaced implementation, frozen =========================================


class _Old:
    """The functions as they were before the speed-up (only renamed)."""

    # -- _common ------------------------------------------------------------------------------

    @staticmethod
    def as_int(value: object) -> int | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value if value >= 0 else None
        if isinstance(value, float):
            return (
                int(value) if math.isfinite(value) and value >= 0 and value.is_integer() else None
            )
        if isinstance(value, str) and value.isdigit():
            return int(value)
        return None

    @staticmethod
    def field(doc: RawDocument, name: str) -> Any:
        for alias in _DOCUMENT_FIELD_ALIASES.get(name, (name,)):
            value = doc.get(alias)
            if value is not None:
                return value
        return None

    @staticmethod
    def resolve_documents(
        raw: Sequence[RawDocument],
        options: ConventionOptions,
        fallback_ids: Callable[[], Sequence[str | None]] | None = None,
    ) -> tuple[RetrievedDocument, ...]:
        places = [
            (head, rest) for head, _, rest in (p.partition(".") for p in options.document_id)
        ]
        fallback: Sequence[str | None] | None = None
        out: list[RetrievedDocument] = []
        for rank, doc in enumerate(raw):
            content = _Old.field(doc, "content")
            text = content if isinstance(content, str) else None
            doc_id: str | None = None
            metadata: Any = None
            metadata_parsed = False
            for head, rest in places:
                if head == "document":
                    doc_id = _id_text(_Old.field(doc, rest))
                    if doc_id is None and rest == "id" and fallback_ids is not None:
                        if fallback is None:
                            fallback = fallback_ids()
                        doc_id = fallback[rank] if rank < len(fallback) else None
                else:
                    if not metadata_parsed:
                        metadata = doc.get("metadata")
                        if isinstance(metadata, str):
                            metadata = loads(metadata)
                        metadata_parsed = True
                    doc_id = _metadata_value(metadata, rest)
                if doc_id:
                    break
            if not doc_id:
                if text is not None:
                    doc_id = content_hash(text)
                elif isinstance(doc.get("metadata"), (str, Mapping)):
                    meta = doc["metadata"]
                    doc_id = content_hash(
                        meta if isinstance(meta, str) else json.dumps(meta, sort_keys=True)
                    )
                else:
                    doc_id = f"#{rank}"
            out.append(
                RetrievedDocument(
                    id=doc_id,
                    score=as_float(doc.get("score")),
                    content=text if options.keep_content else None,
                )
            )
        return tuple(out)

    @staticmethod
    def flattened_documents(attributes: Mapping[str, AttrValue], prefix: str) -> list[RawDocument]:
        docs: dict[int, dict[str, AttrValue]] = {}
        start = len(prefix)
        for key, value in attributes.items():
            if not key.startswith(prefix):
                continue
            index, dot, rest = key[start:].partition(".")
            if not dot or not index.isdigit() or not rest.startswith("document."):
                continue
            docs.setdefault(int(index), {})[rest[9:]] = value
        return [docs[i] for i in sorted(docs)]

    # -- openinference / genai / openllmetry ------------------------------------------------

    @staticmethod
    def oi_has_documents(attributes: Attributes) -> bool:
        return any(
            f"{openinference.RETRIEVAL_DOCUMENTS}0.document.{f}" in attributes
            for f in ("id", "content", "metadata", "score")
        )

    @staticmethod
    def oi_has_reranked(attributes: Attributes) -> bool:
        return any(
            f"{openinference.RERANKER_OUTPUT_DOCUMENTS}0.document.{f}" in attributes
            for f in ("id", "content", "metadata", "score")
        )

    @staticmethod
    def oi_usage(attributes: Attributes) -> _OldUsage | None:
        as_int = _Old.as_int
        prompt = as_int(attributes.get(openinference.TOKENS_PROMPT))
        completion = as_int(attributes.get(openinference.TOKENS_COMPLETION))
        if prompt is None and completion is None:
            total = as_int(attributes.get(openinference.TOKENS_TOTAL))
            if total is None:
                return None
            prompt = total
        return _OldUsage(
            prompt or 0,
            completion or 0,
            as_int(attributes.get(openinference.TOKENS_CACHE_READ)) or 0,
        )

    @staticmethod
    def oi_cost(attributes: Attributes) -> float | None:
        total = as_float(attributes.get(openinference.COST_TOTAL))
        if total is not None:
            return total if total >= 0 else None
        parts = [
            as_float(attributes.get(openinference.COST_PROMPT)),
            as_float(attributes.get(openinference.COST_COMPLETION)),
        ]
        if parts[0] is None and parts[1] is None:
            return None
        value = sum(p for p in parts if p is not None)
        return value if value >= 0 else None

    @staticmethod
    def genai_usage(attributes: Attributes) -> _OldUsage | None:
        as_int = _Old.as_int
        inp = as_int(attributes.get(genai.INPUT_TOKENS))
        if inp is None:
            inp = as_int(attributes.get(genai.PROMPT_TOKENS))
        out = as_int(attributes.get(genai.OUTPUT_TOKENS))
        if out is None:
            out = as_int(attributes.get(genai.COMPLETION_TOKENS))
        if inp is None and out is None:
            return None
        return _OldUsage(inp or 0, out or 0, as_int(attributes.get(genai.CACHE_READ_TOKENS)) or 0)

    @staticmethod
    def openllmetry_usage(attributes: Attributes) -> _OldUsage | None:
        total = _Old.as_int(attributes.get(openllmetry.TOTAL_TOKENS))
        return _OldUsage(total, 0, 0) if total is not None else None

    # -- _extract -----------------------------------------------------------------------------

    @staticmethod
    def kind(span: Span) -> int:
        a = span.attributes
        oi_kind = a.get(openinference.KIND)
        if isinstance(oi_kind, str):
            return extract._OI_KINDS.get(oi_kind.upper(), _OTHER)
        op = a.get(genai.OPERATION)
        if isinstance(op, str):
            op = op.lower()
            if op in genai.GENERATION_OPERATIONS:
                return _LLM
            if op in genai.RETRIEVAL_OPERATIONS:
                return _RETRIEVER
            if op in genai.EMBEDDING_OPERATIONS:
                return _EMBEDDING
            return _RERANK_CALL if op in genai.RERANK_OPERATIONS else _OTHER
        request_type = a.get(openllmetry.REQUEST_TYPE)
        if isinstance(request_type, str):
            request_type = request_type.lower()
            if request_type in openllmetry.EMBEDDING_TYPES:
                return _EMBEDDING
            if request_type in openllmetry.RERANK_TYPES:
                return _RERANK_CALL
            return _LLM
        if span.events and openllmetry.has_documents(span):
            return _RETRIEVER
        if genai.REQUEST_MODEL in a or genai.RESPONSE_MODEL in a:
            return _LLM
        return _OTHER

    @staticmethod
    def inherit(node: _OldNode, parent: _OldNode) -> None:
        node.depth = parent.depth + 1
        node.above = parent.above | parent.stage
        node.under_reranker = parent.under_reranker or parent.kind in (_RERANKER, _RERANK_CALL)
        node.under_retriever = parent.under_retriever or parent.kind == _RETRIEVER
        node.docs_above = parent.docs_above or parent.docs
        parent_is_call = parent.kind in _CALLS
        node.call_parent = parent if parent_is_call else parent.call_parent
        node.tokened_above = parent.tokened_above or (parent_is_call and parent.usage is not None)

    @staticmethod
    def settle(node: _OldNode) -> None:
        kind, a = node.kind, node.span.attributes
        if kind == _RETRIEVER:
            node.stage = _RETRIEVAL
            node.docs = (
                _Old.oi_has_documents(a)
                or genai.has_documents(a)
                or openllmetry.has_documents(node.span)
            )
        elif kind in (_RERANKER, _RERANK_CALL):
            node.stage = _RERANK
        if kind in _CALLS:
            node.usage = _Old.oi_usage(a) or _Old.genai_usage(a) or _Old.openllmetry_usage(a)
            if kind == _EMBEDDING:
                node.purpose, node.stage = "embedding", _EMBED
            elif kind == _RERANK_CALL or node.under_reranker:
                node.purpose, node.stage = "rerank", _RERANK
            elif node.under_retriever:
                node.purpose = "other"
            else:
                node.purpose, node.stage = "generation", _GENERATION

    @staticmethod
    def walk(trace: Trace) -> list[_OldNode]:
        spans = trace.spans
        by_id = {s.span_id: s for s in spans}
        children: dict[bytes, list[Span]] = {}
        tops: list[Span] = []
        for span in spans:
            parent = span.parent_span_id
            if parent and parent in by_id and parent != span.span_id:
                children.setdefault(parent, []).append(span)
            else:
                tops.append(span)
        root = trace.root
        tops.sort(key=lambda s: (s is not root, s.start_ns))
        order: list[_OldNode] = []
        seen: set[bytes] = set()
        starts = list(reversed(tops))
        while starts or len(seen) < len(by_id):
            if not starts:
                starts = [next(s for s in spans if s.span_id not in seen)]
            stack: list[tuple[Span, _OldNode | None]] = [(starts.pop(), None)]
            while stack:
                span, parent_node = stack.pop()
                if span.span_id in seen:
                    continue
                seen.add(span.span_id)
                node = _OldNode(span, _Old.kind(span), parent_node)
                if parent_node is not None:
                    _Old.inherit(node, parent_node)
                _Old.settle(node)
                order.append(node)
                kids = children.get(span.span_id)
                if kids:
                    kids.sort(key=lambda s: s.start_ns, reverse=True)
                    stack.extend((kid, node) for kid in kids)
        for node in reversed(order):
            up = node.parent
            if up is not None:
                is_call = node.kind in _CALLS
                up.call_below = up.call_below or is_call or node.call_below
                up.tokened_below = (
                    up.tokened_below or (is_call and node.usage is not None) or node.tokened_below
                )
        return order

    @staticmethod
    def first(attributes: Attributes, keys: tuple[str, ...]) -> str | None:
        for key in keys:
            value = as_str(attributes.get(key))
            if value is not None:
                return value
        return None

    @staticmethod
    def llm_call(node: _OldNode) -> LlmCall:
        a = node.span.attributes
        first = _Old.first
        model, provider = first(a, extract._MODEL_KEYS), first(a, extract._PROVIDER_KEYS)
        up = node.call_parent
        while up is not None and (model is None or provider is None):
            model = model or first(up.span.attributes, extract._MODEL_KEYS)
            provider = provider or first(up.span.attributes, extract._PROVIDER_KEYS)
            up = up.call_parent
        usage = node.usage or _OldUsage()
        return LlmCall(
            model=model or "unknown",
            provider=provider,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            purpose=node.purpose,
            cost_usd=_Old.oi_cost(a),
            cached_input_tokens=usage.cached_input_tokens,
        )

    @staticmethod
    def counted(node: _OldNode) -> bool:
        if node.kind not in _CALLS:
            return False
        if node.usage is not None:
            return not node.tokened_below
        return not node.call_below and not node.tokened_above

    @staticmethod
    def raw_documents(span: Span) -> tuple[list[RawDocument], bool]:
        a = span.attributes
        if _Old.oi_has_documents(a):
            return _Old.flattened_documents(a, openinference.RETRIEVAL_DOCUMENTS), True
        if genai.has_documents(a):
            return genai.documents(a), False
        return openllmetry.documents(span), False

    @staticmethod
    def retrieved(node: _OldNode, options: ConventionOptions) -> tuple[RetrievedDocument, ...]:
        raw, openinference_style = _Old.raw_documents(node.span)
        fallback = (
            openinference.output_document_ids(node.span) if openinference_style else None
        )
        return _Old.resolve_documents(raw, options, fallback)

    @staticmethod
    def entry_text(nodes: list[_OldNode], keys: tuple[str, ...], want_query: bool) -> str | None:
        best: _OldNode | None = None
        for node in nodes:
            if node.kind == _OTHER and (
                best is None
                or node.depth < best.depth
                or (node.depth == best.depth and node.span.start_ns < best.span.start_ns)
            ):
                a = node.span.attributes
                if keys[0] in a or keys[1] in a or keys[2] in a:
                    best = node
        if best is not None:
            a = best.span.attributes
            if keys[0] in a:
                mime = a.get(
                    openinference.INPUT_MIME_TYPE if want_query else openinference.OUTPUT_MIME_TYPE
                )
                return (
                    common.query_text(a[keys[0]], mime)
                    if want_query
                    else common.answer_text(a[keys[0]], mime)
                )
            if keys[1] in a:
                return openllmetry.entity_query(a) if want_query else openllmetry.entity_answer(a)
            if keys[2] in a:
                return genai.last_user_message(a) if want_query else genai.last_output_message(a)
        return None

    @staticmethod
    def has_ancestor_in(node: _OldNode, group: list[_OldNode]) -> bool:
        up = node.parent
        while up is not None:
            if up in group:
                return True
            up = up.parent
        return False

    @staticmethod
    def extract_rag_record(trace: Trace, options: ConventionOptions) -> RagRecord | None:
        if not trace.spans:
            return None
        nodes = _Old.walk(trace)
        retrievers: list[_OldNode] = []
        rerankers: list[_OldNode] = []
        calls: list[_OldNode] = []
        stage_seconds: dict[Stage, float] = {}
        for node in nodes:
            kind = node.kind
            if kind == _RETRIEVER:
                retrievers.append(node)
            elif kind in _CALLS:
                calls.append(node)
            if kind in (_RERANKER, _RERANK_CALL):
                rerankers.append(node)
            if node.stage and not node.above & node.stage:
                name = extract._STAGE_NAMES[node.stage]
                seconds = max(0, node.span.end_ns - node.span.start_ns) / 1e9
                stage_seconds[name] = stage_seconds.get(name, 0.0) + seconds
        if not retrievers and not rerankers and not any(n.kind != _EMBEDDING for n in calls):
            return None

        root = trace.root
        top = root if root is not None else nodes[0].span

        with_docs = [n for n in retrievers if n.docs and not n.docs_above]
        chosen = min(with_docs, key=lambda n: n.span.start_ns) if with_docs else None
        retrieved = _Old.retrieved(chosen, options) if chosen is not None else ()

        reranked: tuple[RetrievedDocument, ...] | None = None
        reranked_nodes = [n for n in rerankers if _Old.oi_has_reranked(n.span.attributes)]
        if reranked_nodes:
            outer = [n for n in reranked_nodes if not _Old.has_ancestor_in(n, reranked_nodes)]
            first = min(outer, key=lambda n: n.span.start_ns)
            reranked = _Old.resolve_documents(
                _Old.flattened_documents(
                    first.span.attributes, openinference.RERANKER_OUTPUT_DOCUMENTS
                ),
                options,
            )

        generation = [n for n in calls if n.purpose == "generation"]
        query = _Old.entry_text(nodes, extract._ENTRY_INPUTS, want_query=True)
        if query is None:
            for node in ([chosen] if chosen is not None else []) + [
                n for n in retrievers if n is not chosen
            ]:
                query = extract._retrieval_query(node)  # type: ignore[arg-type]
                if query is not None:
                    break
        if query is None:
            for node in rerankers:
                query = as_str(node.span.attributes.get(openinference.RERANKER_QUERY))
                if query is not None:
                    break
        if query is None:
            query = next((q for q in map(extract._call_query, generation) if q), None)  # type: ignore[arg-type]

        answer = _Old.entry_text(nodes, extract._ENTRY_OUTPUTS, want_query=False)
        if answer is None:
            latest = sorted(generation, key=lambda n: n.span.end_ns, reverse=True)
            answer = next((t for t in map(extract._call_answer, latest) if t), None)  # type: ignore[arg-type]

        relevance: dict[str, int] | None = None
        label_spans = ([chosen.span] if chosen is not None else []) + [
            n.span for n in retrievers if n is not chosen
        ]
        for span in (*label_spans, top):
            relevance = extract._labels(span.attributes)
            if relevance is not None:
                break

        evaluations: list[Evaluation] = []
        for node in nodes:
            if node.span.events:
                evaluations.extend(genai.evaluations(node.span))

        return RagRecord(
            trace_id=trace.trace_id,
            service=top.service or next((s.service for s in trace.spans if s.service), ""),
            variant=extract._variant(top, options.variant_attribute),
            start_ns=top.start_ns if root is not None else min(s.start_ns for s in trace.spans),
            end_ns=top.end_ns if root is not None else max(s.end_ns for s in trace.spans),
            error=any(s.error for s in trace.spans),
            query=query,
            retrieved=retrieved,
            reranked=reranked,
            answer=answer,
            relevance=relevance,
            reference_answer=as_str(top.attributes.get(extract.REFERENCE_ANSWER)),
            llm_calls=tuple(_Old.llm_call(n) for n in calls if _Old.counted(n)),
            stage_seconds=stage_seconds,
            evaluations=tuple(evaluations),
            has_retrieval=chosen is not None
            or any(genai.RETRIEVAL_DOCUMENTS in n.span.attributes for n in retrievers)
            or any(openinference.reports_no_documents(n.span) for n in retrievers),
            content_recorded=query is not None or answer is not None,
        )


_OTHER, _RETRIEVER, _RERANKER, _LLM, _EMBEDDING, _RERANK_CALL = range(6)
_CALLS = (_LLM, _EMBEDDING, _RERANK_CALL)
_RETRIEVAL, _RERANK, _GENERATION, _EMBED = 1, 2, 4, 8


@dataclass(frozen=True, slots=True)
class _OldUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


@dataclass(slots=True, eq=False)
class _OldNode:
    span: Span
    kind: int
    parent: _OldNode | None
    depth: int = 0
    above: int = 0
    stage: int = 0
    under_reranker: bool = False
    under_retriever: bool = False
    docs: bool = False
    docs_above: bool = False
    usage: _OldUsage | None = None
    tokened_above: bool = False
    call_parent: _OldNode | None = None
    call_below: bool = False
    tokened_below: bool = False
    purpose: Literal["generation", "rerank", "embedding", "other"] = "other"


def test_oracle_shares_the_kind_constants() -> None:
    assert (extract._OTHER, extract._RETRIEVER, extract._RERANKER) == (_OTHER, _RETRIEVER, _RERANKER)
    assert (extract._LLM, extract._EMBEDDING, extract._RERANK_CALL) == (_LLM, _EMBEDDING, _RERANK_CALL)
    assert (extract._RETRIEVAL, extract._RERANK, extract._GENERATION, extract._EMBED) == (
        _RETRIEVAL,
        _RERANK,
        _GENERATION,
        _EMBED,
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
    except Exception as exc:  # noqa: BLE001 - the old code's failures must stay failures
        return ("raised", type(exc))


# == the properties ===========================================================================


def _old_record(trace: Trace, options: ConventionOptions) -> Any:
    """The old extraction plus ``root_span_id``, which it predates (the local root's id)."""
    record = _Old.extract_rag_record(trace, options)
    if record is None:
        return None
    return dataclasses.replace(record, root_span_id=trace.root.span_id if trace.root is not None else b"")


@SETTINGS
@given(trace=traces(), options=_OPTIONS)
def test_extract_rag_record_matches_the_old_implementation(
    trace: Trace, options: ConventionOptions
) -> None:
    assert _outcome(lambda: extract_rag_record(trace, options)) == _outcome(lambda: _old_record(trace, options))


@SETTINGS
@given(
    attributes=st.one_of(oi_documents(RETRIEVAL), spans_attributes()),
    options=_OPTIONS,
    fields=st.sampled_from([DOCUMENT_FIELDS, ("id",), ("content", "url", "text"), ()]),
    with_fallback=st.booleans(),
)
def test_flattened_documents_match_the_old_implementation(
    attributes: dict[str, AttrValue],
    options: ConventionOptions,
    fields: tuple[str, ...],
    with_fallback: bool,
) -> None:
    old = _outcome(lambda: _Old.flattened_documents(attributes, RETRIEVAL))
    assert _outcome(lambda: flattened_documents(attributes, RETRIEVAL, fields)) == old
    assert _outcome(lambda: flattened_documents(attributes, RETRIEVAL)) == old
    fallback = (lambda: ["F0", None, "F2"]) if with_fallback else None
    assert _outcome(lambda: resolve_flattened(attributes, RETRIEVAL, options, fallback)) == (
        _outcome(lambda: _Old.resolve_documents(old[1], options, fallback))
        if old[0] == "ok"
        else old
    )


_raw_documents = st.lists(
    st.dictionaries(st.sampled_from(list(_FIELD_VALUES)), st.none(), max_size=5).flatmap(
        lambda d: st.fixed_dictionaries({k: _FIELD_VALUES[k] for k in d})
    )
    | st.fixed_dictionaries({"metadata": st.just({"source": "obj", "file": {"name": "n"}})}),
    max_size=5,
)


@SETTINGS
@given(raw=_raw_documents, options=_OPTIONS, with_fallback=st.booleans())
def test_resolve_documents_matches_the_old_implementation(
    raw: list[dict[str, Any]], options: ConventionOptions, with_fallback: bool
) -> None:
    fallback = (lambda: ["F0", "", None]) if with_fallback else None
    assert _outcome(lambda: resolve_documents(raw, options, fallback)) == _outcome(
        lambda: _Old.resolve_documents(raw, options, fallback)
    )


@SETTINGS
@given(value=st.one_of(_counts, _scores, _ids))
def test_as_int_matches_the_old_implementation(value: Any) -> None:
    assert _outcome(lambda: common.as_int(value)) == _outcome(lambda: _Old.as_int(value))


@SETTINGS
@given(attributes=spans_attributes())
def test_usage_and_cost_match_the_old_implementation(attributes: dict[str, AttrValue]) -> None:
    def fields(usage: Any) -> Any:
        if usage is None:
            return None
        return (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens)

    assert fields(openinference.usage(attributes)) == fields(_Old.oi_usage(attributes))
    assert fields(genai.usage(attributes)) == fields(_Old.genai_usage(attributes))
    assert fields(openllmetry.usage(attributes)) == fields(_Old.openllmetry_usage(attributes))
    assert openinference.cost(attributes) == _Old.oi_cost(attributes)
    assert openinference.has_documents(attributes) == _Old.oi_has_documents(attributes)
    assert openinference.has_reranked(attributes) == _Old.oi_has_reranked(attributes)


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


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param({0: {"id": "a"}, 1: {"id": "b"}, 3: {"id": "d"}}, id="gap"),
        pytest.param({1: {"id": "b"}, 0: {"id": "a"}}, id="out-of-order"),
        pytest.param({0: {"id": "a", "url": "u"}, 1: {"id": "b"}}, id="unknown-field"),
        pytest.param({0: {"url": "u"}, 1: {"id": "b"}}, id="only-unknown-field"),
        pytest.param({0: {"id": None, "content": "c"}, 1: {"score": 0.5}}, id="none-values"),
        pytest.param({i: {"id": f"d{i}"} for i in range(200)}, id="more-than-the-key-table"),
        pytest.param({i: {"id": i} for i in range(0, 300, 7)}, id="sparse-and-long"),
        pytest.param({0: {"page_content": "p"}, 1: {"text": "t", "id": 2.0}}, id="aliases"),
    ],
)
@pytest.mark.parametrize(
    "options",
    [ConventionOptions(), ConventionOptions(document_id=("document.url", "document.content"))],
)
def test_layouts(layout: dict[int, dict[str, AttrValue]], options: ConventionOptions) -> None:
    for prefix in (RETRIEVAL, RERANKED):
        attributes = _docs(prefix, layout)
        assert flattened_documents(attributes, prefix) == _Old.flattened_documents(
            attributes, prefix
        )
    trace = _retriever_trace(
        {**_docs(RETRIEVAL, layout), **_docs(RERANKED, layout), "retrieval.documents.x": 1}
    )
    record = extract_rag_record(trace, options)
    assert record == _old_record(trace, options)
    assert record is not None
    if 0 in layout and set(layout[0]) & {"id", "score", "content", "metadata"}:
        assert len(record.retrieved) == len(layout)  # listed: every document, in index order


def test_index_written_with_a_leading_zero_is_merged_as_before() -> None:
    attributes = _docs(RETRIEVAL, {0: {"id": "a"}, 1: {"id": "b"}})
    attributes[f"{RETRIEVAL}01.document.score"] = 0.25
    attributes[f"{RETRIEVAL}01.document.id"] = "b-again"
    got = flattened_documents(attributes, RETRIEVAL)
    assert got == _Old.flattened_documents(attributes, RETRIEVAL)
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
    assert record == _old_record(trace, ConventionOptions())
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
    for trace in (Trace(tid, spans, root), Trace(tid, spans[1:], None)):
        record = extract_rag_record(trace, ConventionOptions())
        assert record == _old_record(trace, ConventionOptions())
    record = extract_rag_record(Trace(tid, spans, root), ConventionOptions())
    assert record is not None
    assert record.query == "second listed"
    assert [c.model for c in record.llm_calls] == ["m5", "m4"]
    assert [d.id for d in record.retrieved] == ["r7"]
