"""The offline record format (SPEC §8a); relevance files (``--qrels``) are ``ragmon.formats.relevance``.

A record is one query of a run: ``query_id``, ``query``, ``retrieved_document_ids`` (best
first; without them the record's retrieval metrics are not applicable), and optionally
``relevant_document_ids`` (binary) or ``relevance`` (id -> grade), ``answer``, ``contexts``,
``reference_answer``; or the same under another schema's keys (``ragmon.offline.schemas``).
Ids are compared as strings; a key whose value is null is absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragmon.formats.relevance import (
    Qrels,
    as_id,
    id_list,
    parse_labels,
    read_qrels,
)
from ragmon.offline.schemas import RAGMON, Schema

__all__ = ["EvalRecord", "Qrels", "read_qrels", "parse_labels", "record_from_json", "REFERENCE_JOINER"]

REFERENCE_JOINER = "\n\n"
"""Several reference answers (Ragas 0.1's ``ground_truths``) become one, joined by a blank line."""


@dataclass(frozen=True, slots=True)
class EvalRecord:
    """One query of a run, as read from a file."""

    path: str
    line: int
    query_id: str | None
    query: str | None
    retrieved: list[str] | None
    """Document ids, best first; ``None`` when the record carries none (its retrieval metrics
    are not applicable)."""
    grades: dict[str, int] | None
    """``id -> grade`` from the record itself; ``None`` when it carries no labels."""
    answer: str | None = None
    contexts: list[str] | None = None
    reference_answer: str | None = None


def _picked(obj: Mapping[str, Any], schema: Schema) -> dict[str, tuple[str, Any]]:
    """What the schema's keys give: target -> (key, value), null values left out; ``ValueError``
    when two keys give the same thing."""
    picked: dict[str, tuple[str, Any]] = {}
    for key, target in schema.fields.items():
        value = obj.get(key)
        if value is None:
            continue
        if target == "reference_answers":
            target = "reference_answer"
        if target in picked:
            raise ValueError(f'"{picked[target][0]}" and "{key}" both give the {target.replace("_", " ")}; keep one')
        picked[target] = (key, value)
    return picked


def _text(picked: Mapping[str, tuple[str, Any]], target: str) -> str | None:
    if target not in picked:
        return None
    key, value = picked[target]
    if not isinstance(value, str):
        raise ValueError(f'"{key}" must be a string, got {type(value).__name__}')
    return value


def _texts(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise ValueError(f'"{key}" must be a list of strings')
    return value


def _reference(picked: Mapping[str, tuple[str, Any]], schema: Schema) -> str | None:
    """The reference answer; several (``ground_truths``) joined by ``REFERENCE_JOINER``."""
    if "reference_answer" not in picked:
        return None
    key, value = picked["reference_answer"]
    if schema.fields[key] != "reference_answers" or isinstance(value, str):
        return _text(picked, "reference_answer")
    return REFERENCE_JOINER.join(_texts(key, value)) or None


def record_from_json(path: str, line: int, obj: Mapping[str, Any], schema: Schema = RAGMON) -> EvalRecord:
    """One record from its object in ``schema``'s keys (plus ragmon's id and label keys);
    ``ValueError`` naming the key of the first problem."""
    if "resourceSpans" in obj:
        raise ValueError("an OTLP/JSON trace request in a file of RAG records")
    picked = _picked(obj, schema)
    query_id = obj.get("query_id")
    ids = obj.get("retrieved_document_ids")
    contexts = None if "contexts" not in picked else _texts(*picked["contexts"])
    return EvalRecord(
        path=path,
        line=line,
        query_id=None if query_id is None else as_id(query_id, '"query_id"'),
        query=_text(picked, "query"),
        retrieved=None if ids is None else id_list(ids, "retrieved_document_ids"),
        grades=parse_labels(obj),
        answer=_text(picked, "answer"),
        contexts=contexts,
        reference_answer=_reference(picked, schema),
    )
