"""One assembled ``Trace`` -> one ``RagRecord``: the rules that hold across conventions.

Each span is classified once (retriever, reranker, model call, or other) from
``openinference.span.kind``, else ``gen_ai.operation.name``, else OpenLLMetry's
``llm.request.type``, else ``db.query.result`` events, else the presence of a ``gen_ai`` model.
One depth-first walk then gives each span what its ancestors imply (inside a reranker, inside a
retriever, inside a span of the same stage, under a model call carrying tokens) and one
backward pass what its descendants imply. Only a few chosen spans have their documents or
JSON parsed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ragmon.conventions import genai, openinference, openllmetry
from ragmon.conventions._common import (
    ConventionOptions,
    RawDocument,
    Usage,
    answer_text,
    as_int,
    as_str,
    loads,
    query_text,
    resolve_documents,
)
from ragmon.model import (
    Attributes,
    Evaluation,
    LlmCall,
    RagRecord,
    RetrievedDocument,
    Span,
    Stage,
    Trace,
)

RELEVANT_IDS = "ragmon.relevant_document_ids"
RELEVANCE = "ragmon.relevance"
REFERENCE_ANSWER = "ragmon.reference_answer"
DEFAULT_VARIANT = "default"

_OTHER, _RETRIEVER, _RERANKER, _LLM, _EMBEDDING, _RERANK_CALL = range(6)
_CALLS = (_LLM, _EMBEDDING, _RERANK_CALL)
_OI_KINDS = {"RETRIEVER": _RETRIEVER, "RERANKER": _RERANKER, "LLM": _LLM, "EMBEDDING": _EMBEDDING}

_RETRIEVAL, _RERANK, _GENERATION, _EMBED = 1, 2, 4, 8
_STAGE_NAMES: dict[int, Stage] = {
    _RETRIEVAL: "retrieval",
    _RERANK: "rerank",
    _GENERATION: "generation",
    _EMBED: "embedding",
}

_MODEL_KEYS = (
    genai.RESPONSE_MODEL,
    "llm.model_name",
    "llm.response.model_name",
    "embedding.model_name",
    genai.REQUEST_MODEL,
    "llm.request.model_name",
)
_PROVIDER_KEYS = (genai.PROVIDER, "llm.provider", genai.SYSTEM, "llm.system")
_ENTRY_INPUTS = (openinference.INPUT_VALUE, openllmetry.ENTITY_INPUT, genai.INPUT_MESSAGES)
_ENTRY_OUTPUTS = (openinference.OUTPUT_VALUE, openllmetry.ENTITY_OUTPUT, genai.OUTPUT_MESSAGES)

Purpose = Literal["generation", "rerank", "embedding", "other"]


def _kind(span: Span) -> int:
    a = span.attributes
    oi_kind = a.get(openinference.KIND)
    if isinstance(oi_kind, str):
        return _OI_KINDS.get(oi_kind.upper(), _OTHER)
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
        return _LLM  # chat, completion, unknown
    if span.events and openllmetry.has_documents(span):
        return _RETRIEVER
    if genai.REQUEST_MODEL in a or genai.RESPONSE_MODEL in a:
        return _LLM
    return _OTHER


@dataclass(slots=True, eq=False)
class _Node:
    span: Span
    kind: int
    parent: _Node | None
    depth: int = 0
    above: int = 0  # stages of the ancestors
    stage: int = 0
    under_reranker: bool = False
    under_retriever: bool = False
    docs: bool = False  # a retriever span listing documents
    docs_above: bool = False
    usage: Usage | None = None
    tokened_above: bool = False
    call_parent: _Node | None = None
    call_below: bool = False
    tokened_below: bool = False
    purpose: Purpose = "other"


def _inherit(node: _Node, parent: _Node) -> None:
    node.depth = parent.depth + 1
    node.above = parent.above | parent.stage
    node.under_reranker = parent.under_reranker or parent.kind in (_RERANKER, _RERANK_CALL)
    node.under_retriever = parent.under_retriever or parent.kind == _RETRIEVER
    node.docs_above = parent.docs_above or parent.docs
    parent_is_call = parent.kind in _CALLS
    node.call_parent = parent if parent_is_call else parent.call_parent
    node.tokened_above = parent.tokened_above or (parent_is_call and parent.usage is not None)


def _settle(node: _Node) -> None:
    """Fill what the node's own attributes imply (after ``_inherit``)."""
    kind, a = node.kind, node.span.attributes
    if kind == _RETRIEVER:
        node.stage = _RETRIEVAL
        node.docs = (
            openinference.has_documents(a)
            or genai.has_documents(a)
            or openllmetry.has_documents(node.span)
        )
    elif kind in (_RERANKER, _RERANK_CALL):
        node.stage = _RERANK
    if kind in _CALLS:
        node.usage = openinference.usage(a) or genai.usage(a) or openllmetry.usage(a)
        if kind == _EMBEDDING:
            node.purpose, node.stage = "embedding", _EMBED
        elif kind == _RERANK_CALL or node.under_reranker:
            node.purpose, node.stage = "rerank", _RERANK
        elif node.under_retriever:
            node.purpose = "other"  # e.g. query rewriting inside a retriever
        else:
            node.purpose, node.stage = "generation", _GENERATION


def _walk(trace: Trace) -> list[_Node]:
    """Nodes in depth-first order (root first, siblings by start time)."""
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
    order: list[_Node] = []
    seen: set[bytes] = set()
    starts = list(reversed(tops))
    while starts or len(seen) < len(by_id):
        if not starts:  # a parent cycle left spans unreached: start again from one of them
            starts = [next(s for s in spans if s.span_id not in seen)]
        stack: list[tuple[Span, _Node | None]] = [(starts.pop(), None)]
        while stack:
            span, parent_node = stack.pop()
            if span.span_id in seen:
                continue
            seen.add(span.span_id)
            node = _Node(span, _kind(span), parent_node)
            if parent_node is not None:
                _inherit(node, parent_node)
            _settle(node)
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


def _first(attributes: Attributes, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = as_str(attributes.get(key))
        if value is not None:
            return value
    return None


def _llm_call(node: _Node) -> LlmCall:
    a = node.span.attributes
    model, provider = _first(a, _MODEL_KEYS), _first(a, _PROVIDER_KEYS)
    up = node.call_parent
    while up is not None and (model is None or provider is None):
        model = model or _first(up.span.attributes, _MODEL_KEYS)
        provider = provider or _first(up.span.attributes, _PROVIDER_KEYS)
        up = up.call_parent
    usage = node.usage or Usage()
    return LlmCall(
        model=model or "unknown",
        provider=provider,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        purpose=node.purpose,
        cost_usd=openinference.cost(a),
        cached_input_tokens=usage.cached_input_tokens,
    )


def _counted(node: _Node) -> bool:
    """Tokens are counted once: on the innermost calls that carry them; a call without tokens
    counts (with zero tokens) only when no call above carries tokens and none is below it."""
    if node.kind not in _CALLS:
        return False
    if node.usage is not None:
        return not node.tokened_below
    return not node.call_below and not node.tokened_above


def _raw_documents(span: Span) -> tuple[list[RawDocument], bool]:
    """The span's documents and whether ids may be missing LangChain-style (OpenInference)."""
    a = span.attributes
    if openinference.has_documents(a):
        return openinference.documents(a), True
    if genai.has_documents(a):
        return genai.documents(a), False
    return openllmetry.documents(span), False


def _retrieved(node: _Node, options: ConventionOptions) -> tuple[RetrievedDocument, ...]:
    raw, openinference_style = _raw_documents(node.span)
    fallback = openinference.output_document_ids(node.span) if openinference_style else None
    return resolve_documents(raw, options, fallback)


def _grade(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return as_int(value)


def _labels(attributes: Attributes) -> dict[str, int] | None:
    """``ragmon.relevant_document_ids`` (grade 1) merged under ``ragmon.relevance`` (id -> grade)."""
    ids, graded = attributes.get(RELEVANT_IDS), attributes.get(RELEVANCE)
    if ids is None and graded is None:
        return None
    labels: dict[str, int] = {}
    if isinstance(ids, str):  # a JSON array, or a single id
        parsed: Any = loads(ids) if ids.lstrip().startswith("[") else None
        ids = tuple(parsed) if isinstance(parsed, list) else (ids,)
    if isinstance(ids, tuple):
        for item in ids:
            if isinstance(item, (str, int)) and not isinstance(item, bool) and item != "":
                labels[str(item)] = 1
    grades: Any = loads(graded) if isinstance(graded, str) else None
    if isinstance(grades, Mapping):
        for key, value in grades.items():
            grade = _grade(value)
            if grade is not None:
                labels[str(key)] = grade
    return labels


def _entry_text(nodes: list[_Node], keys: tuple[str, ...], want_query: bool) -> str | None:
    """Text from the shallowest non-model span carrying an input (or output) attribute (the
    earliest started among equally shallow ones)."""
    best: _Node | None = None
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
            return query_text(a[keys[0]], mime) if want_query else answer_text(a[keys[0]], mime)
        if keys[1] in a:
            return openllmetry.entity_query(a) if want_query else openllmetry.entity_answer(a)
        if keys[2] in a:
            return genai.last_user_message(a) if want_query else genai.last_output_message(a)
    return None


def _retrieval_query(node: _Node) -> str | None:
    a = node.span.attributes
    return genai.retrieval_query(a) or query_text(
        a.get(openinference.INPUT_VALUE), a.get(openinference.INPUT_MIME_TYPE)
    )


def _call_query(node: _Node) -> str | None:
    a = node.span.attributes
    return (
        openinference.last_user_message(a)
        or genai.last_user_message(a)
        or openllmetry.last_user_prompt(a)
    )


def _call_answer(node: _Node) -> str | None:
    a = node.span.attributes
    return (
        openinference.last_output_message(a)
        or genai.last_output_message(a)
        or openllmetry.last_completion(a)
        or openinference.plain_output(a)
    )


def _variant(span: Span | None, attribute: str) -> str:
    if span is None:
        return DEFAULT_VARIANT
    for source in (span.attributes, span.resource):
        value = source.get(attribute)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return json.dumps(value)
    return DEFAULT_VARIANT


def extract_rag_record(trace: Trace, options: ConventionOptions) -> RagRecord | None:
    """Read one finished trace; None when it has no retrieval, rerank or LLM span."""
    if not trace.spans:
        return None
    nodes = _walk(trace)
    retrievers: list[_Node] = []
    rerankers: list[_Node] = []
    calls: list[_Node] = []
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
            name = _STAGE_NAMES[node.stage]
            seconds = max(0, node.span.end_ns - node.span.start_ns) / 1e9
            stage_seconds[name] = stage_seconds.get(name, 0.0) + seconds
    if not retrievers and not rerankers and not any(n.kind != _EMBEDDING for n in calls):
        return None

    root = trace.root
    top = root if root is not None else nodes[0].span

    with_docs = [n for n in retrievers if n.docs and not n.docs_above]
    chosen = min(with_docs, key=lambda n: n.span.start_ns) if with_docs else None
    retrieved = _retrieved(chosen, options) if chosen is not None else ()

    reranked: tuple[RetrievedDocument, ...] | None = None
    reranked_nodes = [n for n in rerankers if openinference.has_reranked(n.span.attributes)]
    if reranked_nodes:
        outer = [n for n in reranked_nodes if not _has_ancestor_in(n, reranked_nodes)]
        first = min(outer, key=lambda n: n.span.start_ns)
        reranked = resolve_documents(openinference.reranked(first.span.attributes), options)

    generation = [n for n in calls if n.purpose == "generation"]
    query = _entry_text(nodes, _ENTRY_INPUTS, want_query=True)
    if query is None:
        for node in ([chosen] if chosen is not None else []) + [
            n for n in retrievers if n is not chosen
        ]:
            query = _retrieval_query(node)
            if query is not None:
                break
    if query is None:
        for node in rerankers:
            query = as_str(node.span.attributes.get(openinference.RERANKER_QUERY))
            if query is not None:
                break
    if query is None:
        query = next((q for q in map(_call_query, generation) if q), None)

    answer = _entry_text(nodes, _ENTRY_OUTPUTS, want_query=False)
    if answer is None:
        latest = sorted(generation, key=lambda n: n.span.end_ns, reverse=True)
        answer = next((t for t in map(_call_answer, latest) if t), None)

    relevance: dict[str, int] | None = None
    label_spans = ([chosen.span] if chosen is not None else []) + [
        n.span for n in retrievers if n is not chosen
    ]
    for span in (*label_spans, top):
        relevance = _labels(span.attributes)
        if relevance is not None:
            break

    evaluations: list[Evaluation] = []
    for node in nodes:
        if node.span.events:
            evaluations.extend(genai.evaluations(node.span))

    return RagRecord(
        trace_id=trace.trace_id,
        service=top.service or next((s.service for s in trace.spans if s.service), ""),
        variant=_variant(top, options.variant_attribute),
        start_ns=top.start_ns if root is not None else min(s.start_ns for s in trace.spans),
        end_ns=top.end_ns if root is not None else max(s.end_ns for s in trace.spans),
        error=any(s.error for s in trace.spans),
        query=query,
        retrieved=retrieved,
        reranked=reranked,
        answer=answer,
        relevance=relevance,
        reference_answer=as_str(top.attributes.get(REFERENCE_ANSWER)),
        llm_calls=tuple(_llm_call(n) for n in calls if _counted(n)),
        stage_seconds=stage_seconds,
        evaluations=tuple(evaluations),
        has_retrieval=chosen is not None
        or any(genai.RETRIEVAL_DOCUMENTS in n.span.attributes for n in retrievers)
        or any(openinference.reports_no_documents(n.span) for n in retrievers),
        content_recorded=query is not None or answer is not None,
    )


def _has_ancestor_in(node: _Node, group: list[_Node]) -> bool:
    up = node.parent
    while up is not None:
        if up in group:
            return True
        up = up.parent
    return False
