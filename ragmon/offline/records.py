"""The offline record format (SPEC §8a) and relevance files (``--qrels``).

A record is one query of a run: ``query_id``, ``query``, ``retrieved_document_ids`` (best
first), and optionally ``relevant_document_ids`` (binary) or ``relevance`` (id -> grade),
``answer``, ``contexts``, ``reference_answer``. Ids are compared as strings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragmon.errors import InputError
from ragmon.offline.jsonl import iter_jsonl, read_bytes_lines
from ragmon.text import normalize_query

__all__ = ["EvalRecord", "Qrels", "read_records", "read_qrels", "parse_labels"]


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


def _id(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f'{what} must be a string or an integer, got {type(value).__name__}')


def _id_list(value: Any, key: str) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f'"{key}" must be a list of ids, got {type(value).__name__}')
    return [_id(v, f'each id in "{key}"') for v in value]


def _optional_str(obj: Mapping[str, Any], key: str) -> str | None:
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
        return dict.fromkeys(_id_list(obj["relevant_document_ids"], "relevant_document_ids"), 1)
    if has_grades:
        relevance = obj["relevance"]
        if not isinstance(relevance, dict):
            raise ValueError(f'"relevance" must be an object id -> grade, got {type(relevance).__name__}')
        grades: dict[str, int] = {}
        for doc, grade in relevance.items():
            if isinstance(grade, float) and grade.is_integer():
                grade = int(grade)
            if isinstance(grade, bool) or not isinstance(grade, int) or grade < 0:
                raise ValueError(f'grade of "{doc}" in "relevance" must be an integer >= 0, got {grade!r}')
            grades[doc] = grade
        return grades
    return None


def _record(path: str, line: int, obj: Mapping[str, Any]) -> EvalRecord:
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
        query_id=None if query_id is None else _id(query_id, '"query_id"'),
        query=_optional_str(obj, "query"),
        retrieved=_id_list(obj["retrieved_document_ids"], "retrieved_document_ids"),
        grades=parse_labels(obj),
        answer=_optional_str(obj, "answer"),
        contexts=contexts,
        reference_answer=_optional_str(obj, "reference_answer"),
    )


def read_records(
    path: str, *, progress: bool = False, document_id: tuple[str, ...] = ("document.id",)
) -> Iterator[EvalRecord]:
    """Yield the records of one JSONL file, or of an OTLP/JSON trace dump (one request per line,
    or one pretty-printed request); ``InputError`` names the line of the first problem.

    ``document_id`` says where a trace dump's document ids come from (``[scoring] document_id``).
    """
    from ragmon.conventions import ConventionOptions
    from ragmon.offline import traces

    lines = iter_jsonl(path, progress=progress)
    try:
        first = next(lines, None)
    except InputError as exc:
        whole = traces.read_whole_dump(path) if exc.line == 1 else None
        if whole is None:
            raise
        yield from traces.records_from_requests(path, [(1, whole)], ConventionOptions(document_id=document_id))
        return
    if first is None:
        return
    if traces.is_trace_dump(first[1]):
        options = ConventionOptions(document_id=document_id)
        yield from traces.records_from_requests(path, itertools.chain([first], lines), options)
        return
    for line, obj in itertools.chain([first], lines):
        try:
            yield _record(path, line, obj)
        except ValueError as exc:
            raise InputError(path, str(exc), line) from None


def _read_trec_qrels(path: str, lines: Iterable[tuple[int, bytes]], qrels: Qrels) -> None:
    for line, raw in lines:
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise InputError(path, f"expected 4 columns (query-id iteration doc-id grade), got {len(fields)}", line)
        try:
            grade = int(fields[3])
        except ValueError:
            raise InputError(path, f"grade must be an integer, got {fields[3].decode(errors='replace')!r}", line) from None
        if grade < 0:
            raise InputError(path, f"grade must be >= 0, got {grade}", line)
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
            query = _optional_str(obj, "query")
            if grades is None:
                raise ValueError('missing "relevant_document_ids" or "relevance"')
            if query_id is None and query is None:
                raise ValueError('needs "query_id" or "query" to match records')
        except ValueError as exc:
            raise InputError(path, str(exc), line) from None
        if query_id is not None:
            try:
                qrels.by_id[_id(query_id, '"query_id"')] = grades
            except ValueError as exc:
                raise InputError(path, str(exc), line) from None
        if query is not None:
            qrels.by_text[normalize_query(query)] = grades
    return qrels
