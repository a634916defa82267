"""Reading a run file: JSON Lines records, or an OTLP/JSON trace dump turned into records."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ragmon.conventions import ConventionOptions
from ragmon.errors import InputError
from ragmon.groundtruth.jsonl import iter_jsonl
from ragmon.offline import traces
from ragmon.offline.records import EvalRecord, record_from_json

__all__ = ["read_records"]


def read_records(
    path: str, *, progress: bool = False, document_id: tuple[str, ...] = ("document.id",)
) -> Iterator[EvalRecord]:
    """Yield the records of one JSONL file, or of an OTLP/JSON trace dump (one request per line,
    or one pretty-printed request); ``InputError`` names the line of the first problem.

    ``document_id`` says where a trace dump's document ids come from (``[scoring] document_id``).
    """
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
            yield record_from_json(path, line, obj)
        except ValueError as exc:
            raise InputError(path, str(exc), line) from None
