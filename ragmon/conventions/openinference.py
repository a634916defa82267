"""OpenInference (Arize): ``openinference.span.kind`` spans, flattened documents and messages.

What the real instrumentors emit (checked against openinference-instrumentation-langchain):
LangChain RETRIEVER spans carry ``retrieval.documents.N.document.{content,metadata}`` only —
no ``document.id``, no score — and the ids sit in ``output.value``
(``{"documents": [{"id": …, "metadata": …, "page_content": …, "type": "Document"}]}``);
LLM spans carry ``llm.input_messages.N.message.{role,content}``,
``llm.output_messages.N.message.{role,content}``, ``llm.provider`` (from LangChain's
``ls_provider``), ``llm.model_name`` only when the model reports one, and
``llm.token_count.*`` only when the model reports usage (``prompt`` includes
``prompt_details.cache_read``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ragmon.conventions._common import (
    RawDocument,
    Usage,
    as_str,
    flattened_documents,
    loads,
)
from ragmon.numbers import MAX_COST_USD, as_count, as_finite
from ragmon.model import Attributes, AttrValue, Span

__all__ = ["KEYS", "KIND", "PREFIXES"]

KIND = "openinference.span.kind"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
RETRIEVAL_DOCUMENTS = "retrieval.documents."
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents."
RERANKER_QUERY = "reranker.query"
INPUT_MESSAGES = "llm.input_messages."
OUTPUT_MESSAGES = "llm.output_messages."

TOKENS_PROMPT = "llm.token_count.prompt"
TOKENS_COMPLETION = "llm.token_count.completion"
TOKENS_TOTAL = "llm.token_count.total"
TOKENS_CACHE_READ = "llm.token_count.prompt_details.cache_read"
COST_TOTAL = "llm.cost.total"
COST_PROMPT = "llm.cost.prompt"
COST_COMPLETION = "llm.cost.completion"

MODEL_KEYS = (
    "llm.model_name",
    "llm.response.model_name",
    "embedding.model_name",
    "llm.request.model_name",
)
PROVIDER_KEYS = ("llm.provider", "llm.system")

KEYS = frozenset(
    {
        KIND,
        INPUT_VALUE,
        INPUT_MIME_TYPE,
        OUTPUT_VALUE,
        OUTPUT_MIME_TYPE,
        RERANKER_QUERY,
        TOKENS_PROMPT,
        TOKENS_COMPLETION,
        TOKENS_TOTAL,
        TOKENS_CACHE_READ,
        COST_TOTAL,
        COST_PROMPT,
        COST_COMPLETION,
        *MODEL_KEYS,
        *PROVIDER_KEYS,
    }
)
PREFIXES = (RETRIEVAL_DOCUMENTS, RERANKER_OUTPUT_DOCUMENTS, INPUT_MESSAGES, OUTPUT_MESSAGES)

_FIRST = tuple(
    f"{RETRIEVAL_DOCUMENTS}0.document.{f}" for f in ("id", "content", "metadata", "score")
)
_FIRST_RERANKED = tuple(
    f"{RERANKER_OUTPUT_DOCUMENTS}0.document.{f}" for f in ("id", "content", "metadata", "score")
)


def has_documents(attributes: Attributes) -> bool:
    """True when the span lists retrieved documents (cheap: looks at the first one only)."""
    k0, k1, k2, k3 = _FIRST
    return k0 in attributes or k1 in attributes or k2 in attributes or k3 in attributes


def documents(attributes: Attributes) -> list[RawDocument]:
    """``retrieval.documents.N.document.*`` by N."""
    return flattened_documents(attributes, RETRIEVAL_DOCUMENTS)


def has_reranked(attributes: Attributes) -> bool:
    """True when a RERANKER span lists its output documents."""
    k0, k1, k2, k3 = _FIRST_RERANKED
    return k0 in attributes or k1 in attributes or k2 in attributes or k3 in attributes


def reranked(attributes: Attributes) -> list[RawDocument]:
    """``reranker.output_documents.N.document.*`` by N."""
    return flattened_documents(attributes, RERANKER_OUTPUT_DOCUMENTS)


def reports_no_documents(span: Span) -> bool:
    """True when a retriever span's ``output.value`` says it found nothing (``{"documents": []}``
    or ``[]``): an empty ranking, to be scored as a miss, not skipped."""
    value = span.attributes.get(OUTPUT_VALUE)
    if not isinstance(value, str) or len(value) > 256:
        return False
    parsed: Any = loads(value)
    items = parsed.get("documents") if isinstance(parsed, Mapping) else parsed
    return isinstance(items, list) and not items


def output_document_ids(span: Span) -> Callable[[], list[str | None]]:
    """Ids by rank from a LangChain retriever's ``output.value`` JSON (parsed when called)."""

    def ids() -> list[str | None]:
        parsed: Any = loads(span.attributes.get(OUTPUT_VALUE))
        items = parsed.get("documents") if isinstance(parsed, Mapping) else parsed
        if not isinstance(items, list):
            return []
        out: list[str | None] = []
        for item in items:
            value = item.get("id") if isinstance(item, Mapping) else None
            out.append(
                str(value)
                if isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""
                else None
            )
        return out

    return ids


def usage(attributes: Attributes) -> Usage | None:
    """``llm.token_count.*``; None when the span carries no count. Only a total counts as input."""
    prompt = as_count(attributes.get(TOKENS_PROMPT))
    completion = as_count(attributes.get(TOKENS_COMPLETION))
    if prompt is None and completion is None:
        total = as_count(attributes.get(TOKENS_TOTAL))
        if total is None:
            return None
        prompt = total
    return Usage(prompt or 0, completion or 0, as_count(attributes.get(TOKENS_CACHE_READ)) or 0)


def cost(attributes: Attributes) -> float | None:
    """``llm.cost.total``, else ``llm.cost.prompt`` + ``llm.cost.completion``; None when absent."""
    raw_total = attributes.get(COST_TOTAL)
    if raw_total is None and COST_PROMPT not in attributes and COST_COMPLETION not in attributes:
        return None  # the common case: no cost recorded
    total = as_finite(raw_total)
    if total is not None:
        return total if 0 <= total <= MAX_COST_USD else None
    parts = [as_finite(attributes.get(COST_PROMPT)), as_finite(attributes.get(COST_COMPLETION))]
    if parts[0] is None and parts[1] is None:
        return None
    value = sum(p for p in parts if p is not None)
    return value if 0 <= value <= MAX_COST_USD else None


def _messages(attributes: Attributes, prefix: str) -> list[tuple[str | None, str]]:
    """(role, text) by index from ``<prefix>N.message.{role,content,contents.M.message_content.text}``."""
    roles: dict[int, str | None] = {}
    texts: dict[int, list[tuple[int, str]]] = {}
    start = len(prefix)
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, dot, rest = key[start:].partition(".")
        if not dot or not index.isdigit():
            continue
        i = int(index)
        if rest == "message.role":
            roles[i] = as_str(value)
        elif rest == "message.content":
            if isinstance(value, str):
                texts.setdefault(i, []).append((-1, value))
        elif rest.startswith("message.contents.") and rest.endswith(".message_content.text"):
            j = rest[len("message.contents.") : -len(".message_content.text")]
            if j.isdigit() and isinstance(value, str):
                texts.setdefault(i, []).append((int(j), value))
    return [
        (roles.get(i), "\n".join(t for _, t in sorted(texts[i])))
        for i in sorted(set(roles) | set(texts))
        if i in texts
    ]


def last_user_message(attributes: Attributes) -> str | None:
    """The text of the last ``user`` message in ``llm.input_messages``."""
    for role, text in reversed(_messages(attributes, INPUT_MESSAGES)):
        if role == "user" and text:
            return text
    return None


def last_output_message(attributes: Attributes) -> str | None:
    """The text of the last assistant (or role-less) message in ``llm.output_messages``."""
    for role, text in reversed(_messages(attributes, OUTPUT_MESSAGES)):
        if role in (None, "assistant", "model", "ai") and text:
            return text
    return None


def plain_output(attributes: Attributes) -> str | None:
    """``output.value`` when it is declared plain text (an LLM span's raw completion)."""
    mime: AttrValue = attributes.get(OUTPUT_MIME_TYPE)
    return as_str(attributes.get(OUTPUT_VALUE)) if mime == "text/plain" else None
