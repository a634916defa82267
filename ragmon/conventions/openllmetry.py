"""OpenLLMetry (Traceloop): ``gen_ai.*`` plus ``traceloop.*``, indexed prompts, vector-DB events.

What its instrumentations emit (from traceloop/openllmetry's source): model spans carry
``llm.request.type`` (``chat``, ``completion``, ``embedding``, ``rerank``), ``gen_ai.system``,
``gen_ai.request.model``/``gen_ai.response.model``, ``gen_ai.usage.{input,output}_tokens``
(older releases: ``gen_ai.usage.{prompt,completion}_tokens``), ``llm.usage.total_tokens``, and
content as indexed ``gen_ai.prompt.N.{role,content}`` / ``gen_ai.completion.N.{role,content}``.
Workflow and task spans (``traceloop.span.kind``: workflow, task, agent, tool) carry
``traceloop.entity.input`` / ``traceloop.entity.output`` JSON: ``{"args": […], "kwargs": {…}}``
and the JSON of the return value from the SDK's decorators, ``{"inputs": …, "tags": …,
"metadata": …, "kwargs": …}`` / ``{"outputs": …, "kwargs": …}`` from its LangChain callback.
Vector-DB spans (chroma, pinecone, qdrant, …) list results as ``db.query.result`` events with
``db.query.result.{id,score,distance,document,metadata}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragmon.conventions._common import (
    RawDocument,
    Usage,
    as_str,
    loads,
    pick_answer,
    pick_query,
)
from ragmon.numbers import as_count
from ragmon.model import Attributes, Span

__all__ = ["EVENTS", "KEYS", "PREFIXES"]

SPAN_KIND = "traceloop.span.kind"
ENTITY_INPUT = "traceloop.entity.input"
ENTITY_OUTPUT = "traceloop.entity.output"
REQUEST_TYPE = "llm.request.type"
TOTAL_TOKENS = "llm.usage.total_tokens"
PROMPTS = "gen_ai.prompt."
COMPLETIONS = "gen_ai.completion."
QUERY_RESULT_EVENT = "db.query.result"

KEYS = frozenset({SPAN_KIND, ENTITY_INPUT, ENTITY_OUTPUT, REQUEST_TYPE, TOTAL_TOKENS})
PREFIXES = (PROMPTS, COMPLETIONS)
EVENTS = frozenset({QUERY_RESULT_EVENT})

GENERATION_TYPES = frozenset({"chat", "completion"})
EMBEDDING_TYPES = frozenset({"embedding"})
RERANK_TYPES = frozenset({"rerank"})


def usage(attributes: Attributes) -> Usage | None:
    """``llm.usage.total_tokens`` alone (when no input/output counts were found), as input."""
    total = as_count(attributes.get(TOTAL_TOKENS))
    return Usage(total, 0, 0) if total is not None else None


def entity_query(attributes: Attributes) -> str | None:
    """The question in ``traceloop.entity.input``: ``inputs`` (LangChain), else a query-like
    kwarg, else the first string argument."""
    value = attributes.get(ENTITY_INPUT)
    parsed: Any = loads(value) if isinstance(value, str) else None
    if not isinstance(parsed, Mapping):
        return pick_query(parsed)
    if "inputs" in parsed:
        return pick_query(parsed["inputs"])
    found = pick_query(parsed.get("kwargs"))
    if found:
        return found
    args = parsed.get("args")
    if isinstance(args, list):
        for arg in args:
            if isinstance(arg, str) and arg:
                return arg
    return None


def entity_answer(attributes: Attributes) -> str | None:
    """The answer in ``traceloop.entity.output``: a JSON string, ``outputs`` (LangChain), or an
    answer-like key of the returned object."""
    value = attributes.get(ENTITY_OUTPUT)
    parsed: Any = loads(value) if isinstance(value, str) else None
    if isinstance(parsed, Mapping) and "outputs" in parsed:
        return pick_answer(parsed["outputs"])
    return pick_answer(parsed)


def _indexed(attributes: Attributes, prefix: str) -> list[tuple[str | None, str]]:
    roles: dict[int, str | None] = {}
    texts: dict[int, str] = {}
    start = len(prefix)
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, dot, rest = key[start:].partition(".")
        if not dot or not index.isdigit():
            continue
        if rest == "role":
            roles[int(index)] = as_str(value)
        elif rest == "content" and isinstance(value, str):
            texts[int(index)] = value
    return [(roles.get(i), texts[i]) for i in sorted(texts)]


def _content_text(text: str) -> str:
    """Content that is a JSON list of parts (``[{"type": "text", "text": …}]``) -> its text."""
    if not text.startswith("[{"):
        return text
    parsed: Any = loads(text)
    if not isinstance(parsed, list):
        return text
    parts = [
        p.get("text") for p in parsed if isinstance(p, Mapping) and p.get("type", "text") == "text"
    ]
    joined = "\n".join(p for p in parts if isinstance(p, str))
    return joined or text


def last_user_prompt(attributes: Attributes) -> str | None:
    """The last ``gen_ai.prompt.N`` with role ``user``."""
    for role, text in reversed(_indexed(attributes, PROMPTS)):
        if role == "user" and text:
            return _content_text(text)
    return None


def last_completion(attributes: Attributes) -> str | None:
    """The last ``gen_ai.completion.N`` content (assistant or role-less)."""
    for role, text in reversed(_indexed(attributes, COMPLETIONS)):
        if role in (None, "assistant") and text:
            return _content_text(text)
    return None


def has_documents(span: Span) -> bool:
    """True when the span has ``db.query.result`` events."""
    return any(event.name == QUERY_RESULT_EVENT for event in span.events)


def documents(span: Span) -> list[RawDocument]:
    """``db.query.result`` events in order, as documents (``document`` is the content)."""
    out: list[RawDocument] = []
    for event in span.events:
        if event.name != QUERY_RESULT_EVENT:
            continue
        a = event.attributes
        out.append(
            {
                "id": a.get("db.query.result.id"),
                "score": a.get("db.query.result.score"),
                "content": a.get("db.query.result.document"),
                "metadata": a.get("db.query.result.metadata"),
            }
        )
    return out
