"""TREC run files (``query-id Q0 doc-id rank score run-tag``, what trec_eval, pytrec_eval and
ranx read) as offline records: one per query, ranked as trec_eval ranks them (score descending,
ties by doc-id descending; the rank column is not used), labels from ``--qrels``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from ragmon.errors import InputError
from ragmon.formats.jsonl import BLOCK_BYTES, read_blocks, read_bytes_lines
from ragmon.offline.records import EvalRecord

__all__ = ["is_trec_run", "read_trec_run"]

_COLUMNS = "query-id Q0 doc-id rank score run-tag"


def is_trec_run(line: bytes) -> bool:
    """True when a file's first non-blank line is a run line: six columns, the second ``Q0``
    (or ``0``, as some tools write it)."""
    fields = line.split()
    return len(fields) == 6 and fields[1].upper() in (b"Q0", b"0")


def read_trec_run(path: str, *, progress: bool = False, block: int = BLOCK_BYTES) -> Iterator[EvalRecord]:
    """One record per query id, in the order queries first appear; ``InputError`` naming the
    line of the first bad one (not six columns, a score that is not a finite number, a document
    listed twice for a query, which trec_eval refuses too).

    Lines are read a block at a time, split and parsed with numpy over the whole block; a
    query's lines are kept in their order when its scores already fall strictly (the usual run
    file), else sorted. Anything amiss or unusual in the file (a bad line, a repeated document,
    non-ASCII text, a score numpy does not read as Python does) reads it again a line at a
    time (``_read_lines``), which names the first bad line."""
    table: Table = {}
    for first, lines in read_blocks(path, progress=progress, size=block):
        if not _add_block(table, first, lines):
            yield from _read_lines(path)
            return
    records: list[EvalRecord] = []
    for qid in list(table):
        doc_parts, score_parts, line, ordered = table.pop(qid)  # its scores freed as the records are made
        docs = doc_parts[0] if len(doc_parts) == 1 else [d for part in doc_parts for d in part]
        if len(set(docs)) != len(docs):
            yield from _read_lines(path)
            return
        if len(doc_parts) > 1 or not ordered[0]:  # trec_eval's order: score descending, then doc-id descending
            scores = np.concatenate(score_parts).tolist()
            docs = [doc for _, doc in sorted(zip(scores, docs), reverse=True)]
        records.append(EvalRecord(path=path, line=line, query_id=qid, query=None, retrieved=docs, grades=None))
    yield from records


_SPACE = np.zeros(256, dtype=np.bool_)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
"""What ``bytes.split`` splits on (the columns of a line)."""
_MAX_QID = 64
"""Query ids compared in bulk up to this length; a longer one reads the file a line at a time."""
Table: TypeAlias = dict[str, tuple[list[list[str]], list[npt.NDArray[np.float64]], int, list[bool]]]
"""qid -> its documents and scores, a list per stretch of consecutive lines, its first line,
and per stretch whether its scores fall strictly."""


def _add_block(table: Table, first: int, block: bytes) -> bool:
    """Add a block of whole lines (the first numbered ``first``) to ``table``, splitting columns
    and parsing scores with numpy over the whole block; False when a line is not six columns of
    ASCII with a decimal score (the caller then reads the file a line at a time, which says
    what)."""
    if not block.isascii():
        return False
    if not block.endswith(b"\n"):
        block += b"\n"
    a = np.frombuffer(block, dtype=np.uint8)
    space = _SPACE[a]
    begins = ~space & np.concatenate(([True], space[:-1]))  # a column's first byte
    column = np.cumsum(begins) - 1  # per byte: the number of the token it is in (or follows)
    newlines = np.flatnonzero(a == 10)
    per_line = np.diff(column[newlines] + 1, prepend=0)  # tokens on each line
    six = per_line == 6
    if not bool((six | (per_line == 0)).all()):
        return False
    if not six.any():
        return True  # blank lines alone
    column %= 6  # tokens come six a line: 0 query id, 2 document, 4 score
    token = ~space

    def only(c: int) -> bytes:
        """The block with every byte but those of column ``c`` made a space."""
        return np.where(token & (column == c), a, 32).astype(np.uint8).tobytes()

    try:  # numpy reads decimals as Python does (its own parser; anything else is an error)
        with warnings.catch_warnings():  # numpy before 2.3 warns of what it could not read (counted below)
            warnings.simplefilter("ignore", DeprecationWarning)
            scores = np.fromstring(only(4), dtype=np.float64, sep=" ")
    except ValueError:  # since: it says so
        return False
    docs = only(2).decode("ascii").split()
    if not scores.size == len(docs) == six.sum() or not bool(np.isfinite(scores).all()):
        return False
    # query ids: a new stretch wherever one differs from the line before (compared as bytes)
    first_byte = np.flatnonzero(begins & (column == 0))
    lengths = np.flatnonzero(token & np.concatenate((space[1:], [True])) & (column == 0)) + 1 - first_byte
    width = int(lengths.max())
    if width > _MAX_QID:
        return False
    offsets = np.arange(width)
    qid_bytes = np.where(offsets < lengths[:, None], a[np.minimum(first_byte[:, None] + offsets, a.size - 1)], 0)
    differs = (qid_bytes[1:] != qid_bytes[:-1]).any(axis=1) | (lengths[1:] != lengths[:-1])
    starts_at = np.concatenate(([0], np.flatnonzero(differs) + 1))
    stretch_starts = starts_at.tolist()
    text = block.decode("ascii")
    qid_at = (first_byte[starts_at] + lengths[starts_at]).tolist()
    qids = [text[b:e] for b, e in zip(first_byte[starts_at].tolist(), qid_at)]
    line_of = (first + np.flatnonzero(six)).tolist()
    ends_at = np.concatenate((starts_at[1:], [scores.size]))
    # a stretch is in trec_eval's order as written when no score fails to fall within it
    rises = np.flatnonzero(scores[1:] >= scores[:-1])
    if rises.size:
        first_rise = np.searchsorted(rises, starts_at)
        ordered = ((first_rise == rises.size) | (rises[np.minimum(first_rise, rises.size - 1)] >= ends_at - 1)).tolist()
    else:
        ordered = [True] * len(stretch_starts)
    for start, end, falls, qid in zip(stretch_starts, ends_at.tolist(), ordered, qids):
        entry = table.get(qid)
        if entry is None:
            table[qid] = ([docs[start:end]], [scores[start:end]], line_of[start], [falls])
        else:
            entry[0].append(docs[start:end])
            entry[1].append(scores[start:end])
            entry[3].append(falls)
    return True


def _read_lines(path: str) -> Iterator[EvalRecord]:
    """``read_trec_run`` a line at a time: the reference, and what names a bad line."""
    ranked: dict[str, list[tuple[float, str]]] = {}
    seen: dict[str, set[str]] = {}
    first_line: dict[str, int] = {}
    for line, raw in read_bytes_lines(path):
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
