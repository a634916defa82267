"""Relevance labels shared by the live scorer (golden sets) and the offline tools (``--qrels``).

Labels are ``id -> grade`` (integer grade >= 0; ``relevant_document_ids`` give grade 1), found
by query id or by normalized query text. Files are JSON Lines (``query_id`` and/or ``query``
plus ``relevant_document_ids`` or ``relevance``) or TREC qrels (``query-id 0 doc-id grade``).
``read_golden_queries`` reads a JSONL golden set as the list of queries the prober replays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragmon.errors import InputError
from ragmon.formats.jsonl import iter_jsonl, read_bytes_lines
from ragmon.formats.text import normalize_query
from ragmon.numbers import MAX_COUNT, as_grade

__all__ = ["GoldenQuery", "Qrels", "parse_labels", "read_golden_queries", "read_qrels", "as_id", "id_list", "optional_str"]


@dataclass(slots=True)
class Qrels:
    """Relevance labels by query id and by normalized query text."""

    by_id: dict[str, dict[str, int]] = field(default_factory=dict)
    by_text: dict[str, dict[str, int]] = field(default_factory=dict)

    def lookup(self, query_id: str | None, query: str | None) -> dict[str, int] | None:
        """Labels for a query: by id first, then by normalized text; ``None`` if unknown."""
        if query_id is not None and query_id in self.by_id:
            return self.by_id[query_id]
        if query is not None:
            return self.by_text.get(normalize_query(query))
        return None


@dataclass(frozen=True, slots=True)
class GoldenQuery:
    """One line of a golden set: the query, its labels (``None`` when the line gives none) and
    its reference answer."""

    query: str
    grades: dict[str, int] | None
    reference_answer: str | None = None


def as_id(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f'{what} must be a string or an integer, got {type(value).__name__}')


def id_list(value: Any, key: str) -> list[str]:
    """A JSON list of ids as strings (integers written as decimals); a list of strings alone is
    returned as it is, not copied."""
    if not isinstance(value, list):
        raise ValueError(f'"{key}" must be a list of ids, got {type(value).__name__}')
    if set(map(type, value)) <= _STR:
        return value
    return [as_id(v, f'each id in "{key}"') for v in value]


_STR = frozenset({str})
_INT = frozenset({int})


def optional_str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f'"{key}" must be a string, got {type(value).__name__}')


def parse_labels(obj: Mapping[str, Any]) -> dict[str, int] | None:
    """``id -> grade`` from ``relevant_document_ids`` or ``relevance``; ``None`` when neither is set."""
    has_ids = obj.get("relevant_document_ids") is not None
    has_grades = obj.get("relevance") is not None
    if has_ids and has_grades:
        raise ValueError('give either "relevant_document_ids" or "relevance", not both')
    if has_ids:
        return dict.fromkeys(id_list(obj["relevant_document_ids"], "relevant_document_ids"), 1)
    if has_grades:
        relevance = obj["relevance"]
        if not isinstance(relevance, dict):
            raise ValueError(f'"relevance" must be an object id -> grade, got {type(relevance).__name__}')
        values = relevance.values()
        if set(map(type, values)) <= _INT and (not values or (min(values) >= 0 and max(values) <= MAX_COUNT)):
            return relevance  # every grade a plain whole number in range: as it is (keys are JSON's: strings)
        grades: dict[str, int] = {}
        for doc, raw in relevance.items():
            grade = None if isinstance(raw, str) else as_grade(raw)
            if grade is None:
                raise ValueError(f'grade of "{doc}" in "relevance" must be a whole number from 0 to {MAX_COUNT:,}, got {raw!r:.40}')
            grades[doc] = grade
        return grades
    return None


def _read_trec_qrels(path: str, lines: Iterable[tuple[int, bytes]], qrels: Qrels) -> None:
    for line, raw in lines:
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise InputError(path, f"expected 4 columns (query-id iteration doc-id grade), got {len(fields)}", line)
        written = fields[3].decode(errors="replace")
        grade = as_grade(written)
        if grade is None:
            raise InputError(path, f"grade must be a whole number from 0 to {MAX_COUNT:,}, got {written!r:.40}", line)
        try:
            qid, doc = fields[0].decode(), fields[2].decode()
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8", line) from None
        qrels.by_id.setdefault(qid, {})[doc] = grade


def read_qrels(path: str, *, progress: bool = False) -> Qrels:
    """Read labels from JSONL (``query_id`` and/or ``query`` plus labels) or TREC qrels format.

    The format is told by the first non-blank character: ``{`` for JSONL.
    """
    qrels = Qrels()
    lines = read_bytes_lines(path, progress=progress)
    first: list[tuple[int, bytes]] = []
    for item in lines:
        if item[1].strip():
            first.append(item)
            break
    if not first:
        return qrels
    if not first[0][1].lstrip().startswith(b"{"):
        _read_trec_qrels(path, [*first, *lines], qrels)
        return qrels
    lines.close()
    for line, obj in iter_jsonl(path, progress=progress):
        try:
            grades = parse_labels(obj)
            query_id = obj.get("query_id")
            query = optional_str(obj, "query")
            if grades is None:
                raise ValueError('missing "relevant_document_ids" or "relevance"')
            if query_id is None and query is None:
                raise ValueError('needs "query_id" or "query" to match records')
        except ValueError as exc:
            raise InputError(path, str(exc), line) from None
        if query_id is not None:
            try:
                qrels.by_id[as_id(query_id, '"query_id"')] = grades
            except ValueError as exc:
                raise InputError(path, str(exc), line) from None
        if query is not None:
            qrels.by_text[normalize_query(query)] = grades
    return qrels


def read_golden_queries(path: str) -> list[GoldenQuery]:
    """The queries of a JSONL golden set in file order (``query`` required; labels and
    ``reference_answer`` optional); ``InputError`` naming the line otherwise."""
    queries = []
    for line, obj in iter_jsonl(path):
        try:
            query = optional_str(obj, "query")
            if not query:
                raise ValueError('needs "query" (the text sent to the service)')
            queries.append(GoldenQuery(query, parse_labels(obj), optional_str(obj, "reference_answer")))
        except ValueError as exc:
            raise InputError(path, str(exc), line) from None
    return queries
