"""Reading RAG records out of traces: OpenInference, OpenTelemetry GenAI and OpenLLMetry.

``read_trace(trace, options)`` turns one assembled ``Trace`` into a ``RagRecord`` when it is a
RAG request: it has a retriever or reranker span, or a chat/completion call under an
application span (a span that is not a model call). Any other trace with model calls gives
``ModelCalls``: a bare instrumented client's call (one trace per call: the model call is the
top span, with no parent or a remote one), embedding calls alone (an indexing job); they count
in tokens and cost only, never as a request. A trace without a model call either is ``None``: the caller counts those and moves
on. ``extract_rag_record`` is ``read_trace`` keeping the ``RagRecord`` only. Pure: no I/O, no
clock.

``span_selection(options)`` is what the decoder must keep for it: span attributes
(``attribute_filter``), resource attributes (``resource_filter``: the variant attribute) and
span events (``EVENTS``). ``SELECTION`` is the selection for the default options.

Rules (SPEC §4):

- the retrieval is the outermost retriever span that lists documents (the earliest if several).
  ``has_retrieval`` is True only when a retriever span recorded its ranking: it lists
  documents, carries ``gen_ai.retrieval.documents`` even as an empty list, or its
  ``output.value`` is an empty document list (``{"documents": []}``). A retriever span
  without documents (GenAI instrumentation records none by default) is unknown, not an empty
  ranking: ``has_retrieval`` stays False, so no miss is scored, and its latency still counts
  in ``stage_seconds``;
- ``reranked`` is the output of the outermost RERANKER span that lists output documents;
- document ids follow ``ConventionOptions.document_id``; LangChain's OpenInference retriever
  spans carry no ``document.id``: ``document.id`` then comes from the span's ``output.value``
  JSON, parsed only when needed;
- model calls: OpenInference LLM/EMBEDDING spans, ``gen_ai.operation.name`` chat /
  text_completion / generate_content / embeddings, OpenLLMetry ``llm.request.type``. Tokens
  are counted once, on the innermost calls carrying them; a call without tokens gives an
  ``LlmCall`` with zero tokens only when no call above or below it carries any. Calls under a
  RERANKER span have ``purpose="rerank"``, embedding calls ``"embedding"``, calls under a
  retriever span (query rewriting) ``"other"``. ``cached_input_tokens`` is included in
  ``input_tokens`` (as both conventions define it). An unknown model is ``"unknown"``;
- ``query``: the shallowest non-model span with ``input.value`` / ``traceloop.entity.input`` /
  ``gen_ai.input.messages`` (plain text, a JSON string, or a JSON object's ``input``,
  ``question``, ``query``, … key), else the retriever's query (``gen_ai.retrieval.query.text``
  or its ``input.value``), else ``reranker.query``, else the last user message of the first
  generation call;
- ``answer``: the same shallowest span's output (``output.value``, ``traceloop.entity.output``,
  ``gen_ai.output.messages``), else the last assistant message of the generation call that
  ended last;
- ``stage_seconds``: the summed durations of the outermost spans of each stage;
- ``relevance``: ``ragmon.relevance`` (JSON id -> integer grade) over
  ``ragmon.relevant_document_ids`` (grade 1) on the chosen retriever span, another retriever
  span, else the root; ``reference_answer``: ``ragmon.reference_answer`` on the root;
- ``variant``: ``options.variant_attribute`` on the root, then its resource, else ``"default"``;
- ``error``: any span with status ERROR; ``content_recorded``: a query or an answer was found;
- ``evaluations``: every ``gen_ai.evaluation.result`` event.
"""

from __future__ import annotations

from ragmon.conventions import genai, openinference, openllmetry
from ragmon.conventions._common import ConventionOptions
from ragmon.conventions._extract import (
    DEFAULT_VARIANT,
    REFERENCE_ANSWER,
    RELEVANCE,
    RELEVANT_IDS,
    TraceReader,
    extract_rag_record,
    read_trace,
)
from ragmon.model import AttributeFilter
from ragmon.otlp.decode import SpanSelection

__all__ = [
    "DEFAULT_VARIANT",
    "EVENTS",
    "SELECTION",
    "ConventionOptions",
    "TraceReader",
    "attribute_filter",
    "extract_rag_record",
    "read_trace",
    "resource_filter",
    "span_selection",
]

RAGMON_PREFIX = "ragmon."
_KEYS = (
    openinference.KEYS | genai.KEYS | openllmetry.KEYS | {RELEVANT_IDS, RELEVANCE, REFERENCE_ANSWER}
)
_PREFIXES = (*openinference.PREFIXES, *genai.PREFIXES, *openllmetry.PREFIXES, RAGMON_PREFIX)

EVENTS: frozenset[str] = genai.EVENTS | openllmetry.EVENTS
"""Span events the conventions read: ``gen_ai.evaluation.result``, ``db.query.result``."""

_DEFAULT = ConventionOptions()


def attribute_filter(options: ConventionOptions = _DEFAULT) -> AttributeFilter:
    """The span attributes ``extract_rag_record`` reads, including the variant attribute."""
    return AttributeFilter(keys=_KEYS | {options.variant_attribute}, prefixes=_PREFIXES)


def resource_filter(options: ConventionOptions = _DEFAULT) -> AttributeFilter:
    """The resource attributes it reads: the variant attribute (``service.name`` is always kept)."""
    return AttributeFilter(keys=frozenset({options.variant_attribute}))


def span_selection(options: ConventionOptions = _DEFAULT) -> SpanSelection:
    """Everything the decoder must keep for ``extract_rag_record`` with ``options``."""
    return SpanSelection(
        attributes=attribute_filter(options), resource=resource_filter(options), events=EVENTS
    )


SELECTION: SpanSelection = span_selection()
"""``span_selection()`` for the default options."""
