"""Reading a run file: records (JSON Lines, a JSON array, CSV or Parquet; ragmon's, Ragas's or
DeepEval's keys), a TREC run, or an OTLP/JSON trace dump turned into records."""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Literal

from ragmon.conventions import ConventionOptions
from ragmon.errors import InputError
from ragmon.formats.jsonl import iter_jsonl
from ragmon.offline import traces
from ragmon.offline.records import EvalRecord, record_from_json
from ragmon.offline.schemas import FieldWarnings, Schema, detect, schema_named
from ragmon.offline.tables import array_rows, csv_rows, decode_cells, parquet_rows
from ragmon.offline.trec import is_trec_run, read_trec_run

__all__ = ["Container", "container", "read_records", "records_from_objects"]

_SNIFF_BYTES: Final = 64 << 10

Container = Literal["jsonl", "array", "csv", "parquet", "trec"]


def container(path: str) -> Container:
    """How a run file is held: Parquet (``.parquet``, or its magic bytes), CSV (``.csv``), else
    by its first bytes: a JSON array (``[``), a TREC run (a first line of six columns, the
    second ``Q0``), else JSON Lines (or a trace dump; a file that cannot be read is left to
    the JSON Lines reader, which says why)."""
    lower = path.lower()
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith(".csv"):
        return "csv"
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return "jsonl"
    if head.startswith(b"PAR1"):
        return "parquet"
    text = head.removeprefix(codecs.BOM_UTF8).lstrip()
    if text.startswith(b"["):
        return "array"
    first, newline, _ = text.partition(b"\n")
    if (newline or len(head) < _SNIFF_BYTES) and is_trec_run(first):
        return "trec"
    return "jsonl"


def _records(
    path: str,
    rows: Iterable[tuple[int, dict[str, Any]]],
    schema: str,
    warn: Callable[[str], None] | None,
    *,
    table: Container,
) -> Iterator[EvalRecord]:
    """Records of ``rows`` in ``schema`` (``auto``: told from the first row's keys); ``InputError``
    naming the line (JSON Lines) or row of the first problem."""
    chosen: Schema | None = None
    fields = FieldWarnings(path, schema_named("ragmon"), None)
    for number, obj in rows:
        try:
            if chosen is None:
                chosen = detect(obj) if schema == "auto" else schema_named(schema)
                fields = FieldWarnings(path, chosen, warn)
            record = record_from_json(path, number, decode_cells(obj, chosen.structured) if table == "csv" else obj, chosen)
            fields.check(obj)  # after: a bad record's error is the one line printed
        except ValueError as exc:
            if table == "jsonl":
                raise InputError(path, str(exc), number) from None
            raise InputError(path, f"row {number}: {exc}") from None
        yield record


def records_from_objects(
    path: str,
    objects: Iterable[Mapping[str, Any]],
    *,
    schema: str = "auto",
    warn: Callable[[str], None] | None = None,
) -> Iterator[EvalRecord]:
    """Records from objects in memory (``ragmon.offline.api``), read as the rows of a JSON
    array: ``schema`` as in ``read_records``, rows numbered from 1, ``path`` naming them in
    errors and warnings."""

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        for row, obj in enumerate(objects, start=1):
            if not isinstance(obj, Mapping):
                raise InputError(path, f"row {row}: expected a mapping, got {type(obj).__name__}")
            yield row, dict(obj)

    yield from _records(path, rows(), schema, warn, table="array")


def read_records(
    path: str,
    *,
    progress: bool = False,
    document_id: tuple[str, ...] = ("document.id",),
    schema: str = "auto",
    warn: Callable[[str], None] | None = None,
) -> Iterator[EvalRecord]:
    """Yield the records of one file (see ``container``), of a TREC run, or of an OTLP/JSON
    trace dump (one request per line, or one pretty-printed request); ``InputError`` names the
    line or row of the first problem.

    ``schema`` is one of ``ragmon.offline.options.SCHEMA_CHOICES``; ``warn`` gets one line per key a file's records
    carry that ragmon ignores. ``document_id`` says where a trace dump's document ids come from
    (``[scoring] document_id``).
    """
    table = container(path)
    if table == "trec":
        yield from read_trec_run(path, progress=progress)
        return
    if table != "jsonl":
        rows = {"array": array_rows, "csv": csv_rows, "parquet": parquet_rows}[table](path)
        yield from _records(path, rows, schema, warn, table=table)
        return
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
    yield from _records(path, itertools.chain([first], lines), schema, warn, table="jsonl")
