"""The offline record format (SPEC §8a); relevance files (``--qrels``) are ``ragmon.groundtruth.relevance``.

A record is one query of a run: ``query_id``, ``query``, ``retrieved_document_ids`` (best
first), and optionally ``relevant_document_ids`` (binary) or ``relevance`` (id -> grade),
``answer``, ``contexts``, ``reference_answer``. Ids are compared as strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragmon.groundtruth.relevance import (
    Qrels,
    as_id,
    id_list,
    optional_str,
    parse_labels,
    read_qrels,
)

__all__ = ["EvalRecord", "Qrels", "read_qrels", "parse_labels", "record_from_json"]


@dataclass(frozen=True, slots=True)
class EvalRecord:
    """One query of a run, as read from a file."""

    path: str
    line: int
    query_id: str | None
    query: str | None
    retrieved: list[str]
    grades: dict[str, int] | None
    """``id -> grade`` from the record itself; ``None`` when it carries no labels."""
    answer: str | None = None
    contexts: list[str] | None = None
    reference_answer: str | None = None


def record_from_json(path: str, line: int, obj: Mapping[str, Any]) -> EvalRecord:
    if "resourceSpans" in obj:
        raise ValueError("an OTLP/JSON trace request in a file of RAG records")
    if "retrieved_document_ids" not in obj:
        raise ValueError('missing "retrieved_document_ids"')
    query_id = obj.get("query_id")
    contexts = obj.get("contexts")
    if contexts is not None and (
        not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts)
    ):
        raise ValueError('"contexts" must be a list of strings')
    return EvalRecord(
        path=path,
        line=line,
        query_id=None if query_id is None else as_id(query_id, '"query_id"'),
        query=optional_str(obj, "query"),
        retrieved=id_list(obj["retrieved_document_ids"], "retrieved_document_ids"),
        grades=parse_labels(obj),
        answer=optional_str(obj, "answer"),
        contexts=contexts,
        reference_answer=optional_str(obj, "reference_answer"),
    )
