"""TREC run files (``query-id Q0 doc-id rank score run-tag``, what trec_eval, pytrec_eval and
ranx read) as offline records: one per query, ranked as trec_eval ranks them (score descending,
ties by doc-id descending; the rank column is not used), labels from ``--qrels``."""

from __future__ import annotations

import math
from collections.abc import Iterator

from ragmon.errors import InputError
from ragmon.formats.jsonl import read_bytes_lines
from ragmon.offline.records import EvalRecord

__all__ = ["is_trec_run", "read_trec_run"]

_COLUMNS = "query-id Q0 doc-id rank score run-tag"


def is_trec_run(line: bytes) -> bool:
    """True when a file's first non-blank line is a run line: six columns, the second ``Q0``
    (or ``0``, as some tools write it)."""
    fields = line.split()
    return len(fields) == 6 and fields[1].upper() in (b"Q0", b"0")


def read_trec_run(path: str, *, progress: bool = False) -> Iterator[EvalRecord]:
    """One record per query id, in the order queries first appear; ``InputError`` naming the
    line of the first bad one (not six columns, a score that is not a finite number, a document
    listed twice for a query, which trec_eval refuses too)."""
    ranked: dict[str, list[tuple[float, str]]] = {}
    seen: dict[str, set[str]] = {}
    first_line: dict[str, int] = {}
    for line, raw in read_bytes_lines(path, progress=progress):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise InputError(path, f"expected 6 columns ({_COLUMNS}), got {len(fields)}", line)
        try:
            qid, doc, written = fields[0].decode(), fields[2].decode(), fields[4].decode()
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8", line) from None
        try:
            score = float(written)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(path, f"score must be a finite number, got {written!r:.40}", line)
        docs = seen.setdefault(qid, set())
        if doc in docs:
            raise InputError(path, f"document {doc!r:.100} is listed twice for query {qid!r:.100}", line)
        docs.add(doc)
        ranked.setdefault(qid, []).append((score, doc))
        first_line.setdefault(qid, line)
    del seen
    for qid, entries in ranked.items():
        entries.sort(reverse=True)  # score descending, then doc-id descending: trec_eval's order
        yield EvalRecord(path=path, line=first_line[qid], query_id=qid, query=None,
                         retrieved=[doc for _, doc in entries], grades=None)
