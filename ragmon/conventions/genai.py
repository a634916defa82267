"""OpenTelemetry GenAI semantic conventions: ``gen_ai.*`` spans and evaluation events.

What the real instrumentation emits (checked against opentelemetry-instrumentation-openai-v2
2.4b0 with opentelemetry-util-genai 1.1b0): a ``chat {model}`` CLIENT span with
``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.provider.name``, ``gen_ai.response.{id,finish_reasons}``,
``gen_ai.usage.{input,output}_tokens`` — and no content at all by default. Only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY`` (or ``SPAN_AND_EVENT``) do
``gen_ai.input.messages`` / ``gen_ai.output.messages`` appear, as JSON strings
(``[{"role": "user", "parts": [{"type": "text", "content": "…"}]}]``); ``true`` is rejected
by that version (it logs a warning and records nothing). Retrieval spans made with
util-genai's ``handler.retrieval()`` carry ``gen_ai.retrieval.query.text`` and
``gen_ai.retrieval.documents`` (a JSON array of ``{"id", "score"}`` objects, more fields
allowed) only in the same content modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragmon.conventions._common import (
    RawDocument,
    Usage,
    as_str,
    json_documents,
    loads,
)
from ragmon.numbers import as_count, as_finite
from ragmon.model import Attributes, Evaluation, Span

__all__ = ["EVENTS", "KEYS", "PREFIXES"]

OPERATION = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # deprecated for gen_ai.provider.name
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # deprecated
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"  # deprecated
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
RETRIEVAL_QUERY = "gen_ai.retrieval.query.text"
RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"

EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_SCORE = "gen_ai.evaluation.score.value"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"

MODEL_KEYS = (RESPONSE_MODEL, REQUEST_MODEL)
PROVIDER_KEYS = (PROVIDER, SYSTEM)

KEYS = frozenset(
    {
        OPERATION,
        REQUEST_MODEL,
        RESPONSE_MODEL,
        PROVIDER,
        SYSTEM,
        INPUT_TOKENS,
        OUTPUT_TOKENS,
        PROMPT_TOKENS,
        COMPLETION_TOKENS,
        CACHE_READ_TOKENS,
        INPUT_MESSAGES,
        OUTPUT_MESSAGES,
        RETRIEVAL_QUERY,
        RETRIEVAL_DOCUMENTS,
    }
)
PREFIXES: tuple[str, ...] = ()
EVENTS = frozenset({EVALUATION_EVENT})

RETRIEVAL_OPERATIONS = frozenset({"retrieval", "retrieve", "retrieve_documents"})
GENERATION_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
EMBEDDING_OPERATIONS = frozenset({"embeddings", "embedding", "embed"})
RERANK_OPERATIONS = frozenset({"rerank"})


def usage(attributes: Attributes) -> Usage | None:
    """``gen_ai.usage.*`` (and the deprecated prompt/completion names); None when absent."""
    inp = as_count(attributes.get(INPUT_TOKENS))
    if inp is None:
        inp = as_count(attributes.get(PROMPT_TOKENS))
    out = as_count(attributes.get(OUTPUT_TOKENS))
    if out is None:
        out = as_count(attributes.get(COMPLETION_TOKENS))
    if inp is None and out is None:
        return None
    return Usage(inp or 0, out or 0, as_count(attributes.get(CACHE_READ_TOKENS)) or 0)


def has_documents(attributes: Attributes) -> bool:
    """True when ``gen_ai.retrieval.documents`` is present and not an empty list."""
    value = attributes.get(RETRIEVAL_DOCUMENTS)
    if isinstance(value, str):
        return value.strip() not in ("", "[]")
    return isinstance(value, tuple) and len(value) > 0


def documents(attributes: Attributes) -> list[RawDocument]:
    """``gen_ai.retrieval.documents`` parsed: objects with ``id``, ``score`` and maybe more."""
    return json_documents(attributes.get(RETRIEVAL_DOCUMENTS))


def _text(message: Mapping[str, Any]) -> str:
    parts = message.get("parts")
    if parts is None:
        parts = message.get("content")
    if isinstance(parts, str):
        return parts
    texts: list[str] = []
    if isinstance(parts, Sequence):
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                text = part.get("content", part.get("text"))
                if isinstance(text, str):
                    texts.append(text)
    return "\n".join(texts)


def message_text(value: object, roles: frozenset[str]) -> str | None:
    """The text parts of the last message with one of ``roles`` in a JSON messages string."""
    messages: Any = loads(value) if isinstance(value, str) else None
    if isinstance(messages, Mapping):  # tolerate {"messages": [...]}
        messages = messages.get("messages")
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role", "assistant") in roles:
            text = _text(message)
            if text:
                return text
    return None


_USER = frozenset({"user", "human"})
_ASSISTANT = frozenset({"assistant", "model", "ai"})


def last_user_message(attributes: Attributes) -> str | None:
    """The last user message of ``gen_ai.input.messages``."""
    value = attributes.get(INPUT_MESSAGES)
    return message_text(value, _USER) if value else None


def last_output_message(attributes: Attributes) -> str | None:
    """The last assistant message of ``gen_ai.output.messages`` (its text parts)."""
    value = attributes.get(OUTPUT_MESSAGES)
    return message_text(value, _ASSISTANT) if value else None


def retrieval_query(attributes: Attributes) -> str | None:
    """``gen_ai.retrieval.query.text``."""
    return as_str(attributes.get(RETRIEVAL_QUERY))


def evaluations(span: Span) -> list[Evaluation]:
    """``gen_ai.evaluation.result`` events of one span (events without a name are skipped)."""
    out: list[Evaluation] = []
    for event in span.events:
        if event.name != EVALUATION_EVENT:
            continue
        name = as_str(event.attributes.get(EVALUATION_NAME))
        if name is None:
            continue
        out.append(
            Evaluation(
                name,
                as_finite(event.attributes.get(EVALUATION_SCORE)),
                as_str(event.attributes.get(EVALUATION_LABEL)),
            )
        )
    return out
