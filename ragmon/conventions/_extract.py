"""One assembled ``Trace`` -> one ``RagRecord``: the rules that hold across conventions.

Each span is classified once (retriever, reranker, model call, or other) from
``openinference.span.kind``, else ``gen_ai.operation.name``, else OpenLLMetry's
``llm.request.type``, else ``db.query.result`` events, else the presence of a ``gen_ai`` model;
a span the decoder kept no attribute or event of (plain HTTP/DB spans) is other without a look.
One depth-first walk then gives each retriever, reranker and model-call span what its ancestors
imply (inside a reranker, inside a retriever, inside a span of the same stage, under a model
call carrying tokens; other spans pass it on unchanged) and notes the shallowest other spans
with an input or an output; one backward pass gives what the descendants imply. Only a few
chosen spans have their documents or JSON parsed; OpenInference's flattened documents are
looked up key by key (``_common.resolve_flattened``), not found by scanning every attribute.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from ragmon.conventions import genai, openinference, openllmetry
from ragmon.conventions._common import (
    ConventionOptions,
    Usage,
    answer_text,
    as_str,
    loads,
    query_text,
    resolve_documents,
    resolve_flattened,
)
from ragmon.numbers import as_count, span_seconds
from ragmon.model import (
    Attributes,
    Evaluation,
    LlmCall,
    ModelCalls,
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


_OI_KINDS_EXACT = {
    **_OI_KINDS,
    **dict.fromkeys(("CHAIN", "TOOL", "AGENT", "GUARDRAIL", "EVALUATOR", "PROMPT"), _OTHER),
}
"""``openinference.span.kind`` values as instrumentations spell them (no ``upper()`` needed)."""


def _kind(span: Span) -> int:
    a = span.attributes
    oi_kind = a.get(openinference.KIND)
    if isinstance(oi_kind, str):
        kind = _OI_KINDS_EXACT.get(oi_kind)
        return kind if kind is not None else _OI_KINDS.get(oi_kind.upper(), _OTHER)
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


class _Node:
    """A retriever, reranker or model-call span with what its ancestors imply (inherited from
    ``parent``, its closest ancestor that has a node: other spans pass their ancestors' context
    on unchanged), what its own attributes imply, and (``call_below``, ``tokened_below``,
    filled by ``_walk``) what its descendants imply."""

    __slots__ = (
        "above",
        "call_below",
        "call_parent",
        "docs",
        "docs_above",
        "kind",
        "parent",
        "purpose",
        "span",
        "stage",
        "tokened_above",
        "tokened_below",
        "under_reranker",
        "under_retriever",
        "usage",
    )
    span: Span
    kind: int
    parent: _Node | None
    above: int
    stage: int
    under_reranker: bool
    under_retriever: bool
    docs: bool
    docs_above: bool
    usage: Usage | None
    tokened_above: bool
    call_parent: _Node | None
    call_below: bool
    tokened_below: bool
    purpose: Purpose

    def __init__(self, span: Span, kind: int, parent: _Node | None) -> None:
        self.span = span
        self.kind = kind
        self.parent = parent
        # what the ancestors imply
        self.above = 0  # stages of the ancestors
        self.under_reranker = False
        self.under_retriever = False
        self.docs_above = False  # under a retriever span listing documents
        self.tokened_above = False  # under a model call carrying tokens
        self.call_parent = None  # the closest model-call ancestor
        if parent is not None:
            parent_kind = parent.kind
            self.above = parent.above | parent.stage
            self.under_reranker = parent.under_reranker or parent_kind in (_RERANKER, _RERANK_CALL)
            self.under_retriever = parent.under_retriever or parent_kind == _RETRIEVER
            self.docs_above = parent.docs_above or parent.docs
            if parent_kind in _CALLS:
                self.call_parent = parent
                self.tokened_above = parent.tokened_above or parent.usage is not None
            else:
                self.call_parent = parent.call_parent
                self.tokened_above = parent.tokened_above
        # what the descendants imply
        self.call_below = False
        self.tokened_below = False
        # what the span's own attributes imply
        self.stage = 0
        self.docs = False  # a retriever span listing documents
        self.usage = None
        self.purpose = "other"
        a = span.attributes
        if kind == _RETRIEVER:
            self.stage = _RETRIEVAL
            self.docs = (
                openinference.has_documents(a)
                or genai.has_documents(a)
                or openllmetry.has_documents(span)
            )
        elif kind == _RERANKER:
            self.stage = _RERANK
        else:  # a model call
            self.usage = openinference.usage(a) or genai.usage(a) or openllmetry.usage(a)
            if kind == _EMBEDDING:
                self.purpose, self.stage = "embedding", _EMBED
            elif kind == _RERANK_CALL or self.under_reranker:
                self.purpose, self.stage = "rerank", _RERANK
            elif self.under_retriever:
                self.purpose = "other"  # e.g. query rewriting inside a retriever
            else:
                self.purpose, self.stage = "generation", _GENERATION


@dataclass(slots=True)
class _Walk:
    """What one depth-first walk of a trace found."""

    first: Span  # the span the walk started from
    nodes: list[_Node]  # retriever, reranker and model-call spans, depth-first
    query_span: Span | None  # the shallowest other span with an input (earliest if several)
    answer_span: Span | None  # the same with an output
    evented: list[Span]  # spans with events, depth-first
    error: bool  # a span has status ERROR
    application: bool  # a top span is not a model call, or its parent (in-process) did not arrive


_IN0, _IN1, _IN2 = _ENTRY_INPUTS
_OUT0, _OUT1, _OUT2 = _ENTRY_OUTPUTS
_start_ns = attrgetter("start_ns")


def _walk(trace: Trace) -> _Walk:
    """Depth-first (root first, siblings by start time), classifying each span once; spans
    without attributes or events (plain HTTP/DB spans: the decoder kept nothing of them) are
    other spans without a look."""
    spans = trace.spans
    by_id = {s.span_id: s for s in spans}
    children: dict[bytes, list[Span]] = {}
    tops: list[Span] = []
    error = application = False
    for span in spans:
        if span.error:
            error = True
        parent = span.parent_span_id
        if parent and parent in by_id and parent != span.span_id:
            kids = children.get(parent)
            if kids is None:
                children[parent] = [span]
            else:
                kids.append(span)
        else:
            tops.append(span)
    if len(tops) > 1:
        root = trace.root
        tops.sort(key=lambda s: (s is not root, s.start_ns))
    nodes: list[_Node] = []
    evented: list[Span] = []
    query_span: Span | None = None
    answer_span: Span | None = None
    query_depth = answer_depth = 0
    seen: set[bytes] = set()
    starts = tops[::-1]
    first = starts[-1] if starts else spans[0]
    while starts or len(seen) < len(by_id):
        if not starts:  # a parent cycle left spans unreached: start again from one of them
            starts = [next(s for s in spans if s.span_id not in seen)]
        stack: list[tuple[Span, _Node | None, int]] = [(starts.pop(), None, 0)]
        while stack:
            span, node, depth = stack.pop()
            span_id = span.span_id
            if span_id in seen:
                continue
            seen.add(span_id)
            a = span.attributes
            if a or span.events:
                kind = _kind(span)
                if kind != _OTHER:
                    node = _Node(span, kind, node)
                    nodes.append(node)
                elif a:
                    # entry spans: the shallowest (then earliest) with an input, an output
                    if (_IN0 in a or _IN1 in a or _IN2 in a) and (
                        query_span is None
                        or depth < query_depth
                        or (depth == query_depth and span.start_ns < query_span.start_ns)
                    ):
                        query_span, query_depth = span, depth
                    if (_OUT0 in a or _OUT1 in a or _OUT2 in a) and (
                        answer_span is None
                        or depth < answer_depth
                        or (depth == answer_depth and span.start_ns < answer_span.start_ns)
                    ):
                        answer_span, answer_depth = span, depth
                if span.events:
                    evented.append(span)
            if not depth and (
                node is None
                or node.span is not span
                or node.kind not in _CALLS
                or (span.parent_span_id and not span.has_remote_parent)  # its local parent is lost
            ):
                application = True
            kids = children.get(span_id)
            if kids:
                depth += 1
                if len(kids) == 1:
                    stack.append((kids[0], node, depth))
                else:
                    kids.sort(key=_start_ns, reverse=True)
                    stack.extend([(kid, node, depth) for kid in kids])
    for node in reversed(nodes):
        up = node.parent
        if up is not None:
            is_call = node.kind in _CALLS
            up.call_below = up.call_below or is_call or node.call_below
            up.tokened_below = (
                up.tokened_below or (is_call and node.usage is not None) or node.tokened_below
            )
    return _Walk(first, nodes, query_span, answer_span, evented, error, application)


def _first(attributes: Attributes, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


_NO_USAGE = Usage()


def _conventions(nodes: list[_Node]) -> frozenset[str]:
    """The conventions ``nodes`` were read by, in ``_kind``'s order of precedence."""
    found = set()
    for node in nodes:
        span = node.span
        a = span.attributes
        if isinstance(a.get(openinference.KIND), str):
            found.add("openinference")
        elif isinstance(a.get(genai.OPERATION), str):
            found.add("genai")
        elif isinstance(a.get(openllmetry.REQUEST_TYPE), str) or (span.events and openllmetry.has_documents(span)):
            found.add("openllmetry")
        else:
            found.add("genai")
    return frozenset(found)


def _llm_call(node: _Node) -> LlmCall:
    a = node.span.attributes
    model, provider = _first(a, _MODEL_KEYS), _first(a, _PROVIDER_KEYS)
    up = node.call_parent
    while up is not None and (model is None or provider is None):
        model = model or _first(up.span.attributes, _MODEL_KEYS)
        provider = provider or _first(up.span.attributes, _PROVIDER_KEYS)
        up = up.call_parent
    usage = node.usage or _NO_USAGE
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


def _retrieved(node: _Node, options: ConventionOptions) -> tuple[RetrievedDocument, ...]:
    """The documents of a retriever span listing them, ranked and identified."""
    span = node.span
    a = span.attributes
    if openinference.has_documents(a):
        return resolve_flattened(
            a, openinference.RETRIEVAL_DOCUMENTS, options, openinference.output_document_ids(span)
        )
    if genai.has_documents(a):
        return resolve_documents(genai.documents(a), options)
    return resolve_documents(openllmetry.documents(span), options)


def _grade(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return as_count(value)


def _relevance(chosen: _Node | None, retrievers: list[_Node], top: Span) -> dict[str, int] | None:
    """The labels on the chosen retriever span, else another retriever span, else the root."""
    if chosen is not None:
        found = _labels(chosen.span.attributes)
        if found is not None:
            return found
    for node in retrievers:
        if node is not chosen:
            found = _labels(node.span.attributes)
            if found is not None:
                return found
    return _labels(top.attributes)


def _labels(attributes: Attributes) -> dict[str, int] | None:
    """``ragmon.relevant_document_ids`` (grade 1) merged under ``ragmon.relevance`` (id -> grade)."""
    ids, graded = attributes.get(RELEVANT_IDS), attributes.get(RELEVANCE)
    if ids is None and graded is None:
        return None
    labels: dict[str, int] = {}
    # object, not AttrValue: a JSON array holds anything (compiled, a narrower item type is checked)
    items: tuple[object, ...] = ()
    if isinstance(ids, str):  # a JSON array, or a single id
        parsed: Any = loads(ids) if ids.lstrip().startswith("[") else None
        items = tuple(parsed) if isinstance(parsed, list) else (ids,)
    elif isinstance(ids, tuple):
        items = ids
    for item in items:
        if isinstance(item, (str, int)) and not isinstance(item, bool) and item != "":
            labels[str(item)] = 1
    grades: Any = loads(graded) if isinstance(graded, str) else None
    if isinstance(grades, Mapping):
        for key, value in grades.items():
            grade = _grade(value)
            if grade is not None:
                labels[str(key)] = grade
    return labels


def _entry_text(span: Span | None, keys: tuple[str, ...], want_query: bool) -> str | None:
    """Text from the entry span the walk found (the shallowest non-model span carrying an input,
    or an output, attribute)."""
    if span is not None:
        a = span.attributes
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


@dataclass(frozen=True, slots=True)
class TraceReader:
    """The extraction stage: ``read_trace`` with one set of ``options``."""

    options: ConventionOptions

    def read(self, trace: Trace) -> RagRecord | ModelCalls | None:
        """``read_trace(trace, self.options)``."""
        return read_trace(trace, self.options)


def extract_rag_record(trace: Trace, options: ConventionOptions) -> RagRecord | None:
    """Read one finished trace's RAG request; None when it is not one (``read_trace``)."""
    read = read_trace(trace, options)
    return read if isinstance(read, RagRecord) else None


def read_trace(trace: Trace, options: ConventionOptions) -> RagRecord | ModelCalls | None:
    """Read one finished trace: a ``RagRecord`` when it is a RAG request (a retriever or
    reranker span, or a chat/completion call under an application span); else its model calls
    (``ModelCalls``: a bare client's call, embeddings alone), counted once each as in a
    record; else None (no model call either)."""
    spans = trace.spans
    if not spans:
        return None
    walk = _walk(trace)
    retrievers: list[_Node] = []
    rerankers: list[_Node] = []
    calls: list[_Node] = []
    generation: list[_Node] = []
    stage_seconds: dict[Stage, float] = {}
    invalid: list[str] = []
    for node in walk.nodes:
        kind = node.kind
        if kind == _RETRIEVER:
            retrievers.append(node)
        elif kind == _RERANKER:
            rerankers.append(node)
        else:
            calls.append(node)
            if kind == _RERANK_CALL:
                rerankers.append(node)
            elif node.purpose == "generation":
                generation.append(node)
        stage = node.stage
        if stage and not node.above & stage:
            name = _STAGE_NAMES[stage]
            seconds = span_seconds(node.span.start_ns, node.span.end_ns, options.max_duration)
            if seconds is None:
                invalid.append(name)
            else:
                stage_seconds[name] = stage_seconds.get(name, 0.0) + seconds
    root = trace.root
    top = root if root is not None else walk.first
    service = top.service or next((s.service for s in spans if s.service), "")
    if not walk.application or (
        not retrievers and not rerankers and not any(n.kind != _EMBEDDING for n in calls)
    ):
        counted = tuple([_llm_call(n) for n in calls if _counted(n)])
        if not counted:
            return None
        start_ns = top.start_ns if root is not None else min(s.start_ns for s in spans)
        return ModelCalls(trace.trace_id, service, start_ns, counted)

    chosen: _Node | None = None  # the outermost retriever listing documents (earliest if several)
    for node in retrievers:
        if (
            node.docs
            and not node.docs_above
            and (chosen is None or node.span.start_ns < chosen.span.start_ns)
        ):
            chosen = node
    retrieved = _retrieved(chosen, options) if chosen is not None else ()

    reranked: tuple[RetrievedDocument, ...] | None = None
    if rerankers:
        reranked_nodes = [n for n in rerankers if openinference.has_reranked(n.span.attributes)]
        if reranked_nodes:
            outer = [n for n in reranked_nodes if not _has_ancestor_in(n, reranked_nodes)]
            first = min(outer, key=lambda n: n.span.start_ns)
            reranked = resolve_flattened(
                first.span.attributes, openinference.RERANKER_OUTPUT_DOCUMENTS, options
            )

    query = _entry_text(walk.query_span, _ENTRY_INPUTS, want_query=True)
    if query is None and retrievers:
        if chosen is not None:
            query = _retrieval_query(chosen)
        if query is None:
            for node in retrievers:
                if node is not chosen:
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

    answer = _entry_text(walk.answer_span, _ENTRY_OUTPUTS, want_query=False)
    if answer is None:
        latest = sorted(generation, key=lambda n: n.span.end_ns, reverse=True)
        answer = next((t for t in map(_call_answer, latest) if t), None)

    relevance = _relevance(chosen, retrievers, top)

    evaluations: list[Evaluation] = []
    for span in walk.evented:
        evaluations.extend(genai.evaluations(span))

    return RagRecord(
        trace_id=trace.trace_id,
        service=service,
        variant=_variant(top, options.variant_attribute),
        start_ns=top.start_ns if root is not None else min(s.start_ns for s in spans),
        end_ns=top.end_ns if root is not None else max(s.end_ns for s in spans),
        error=walk.error,
        query=query,
        retrieved=retrieved,
        reranked=reranked,
        answer=answer,
        relevance=relevance,
        reference_answer=as_str(top.attributes.get(REFERENCE_ANSWER)),
        llm_calls=tuple([_llm_call(n) for n in calls if _counted(n)]),
        stage_seconds=stage_seconds,
        invalid_durations=tuple(invalid),
        evaluations=tuple(evaluations),
        has_retrieval=chosen is not None
        or any(genai.RETRIEVAL_DOCUMENTS in n.span.attributes for n in retrievers)
        or any(openinference.reports_no_documents(n.span) for n in retrievers),
        content_recorded=query is not None or answer is not None,
        conventions=_conventions(walk.nodes),
        root_span_id=root.span_id if root is not None else b"",
    )


def _has_ancestor_in(node: _Node, group: list[_Node]) -> bool:
    up = node.parent
    while up is not None:
        if up in group:
            return True
        up = up.parent
    return False
