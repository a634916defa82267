"""One pass over a run's records (``ragmon eval``): retrieval scores a chunk at a time, the
lexical estimate record by record, and a small reference per record; nothing else of a record
is kept, so a run of millions of records is read in memory proportional to its records' count,
not to their ids and texts.

The labels of a record are ``--qrels``' for its query when they know it, else its own.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Final

from ragmon.metrics.batch import BatchScores, joined, score_queries
from ragmon.offline.generation import (
    GenerationReport,
    MetricResults,
    RecordOutcome,
    lexical_outcome,
)
from ragmon.offline.records import EvalRecord, Qrels

__all__ = ["CHUNK", "RecordRef", "Scan", "labels_for", "scan_run", "score_records"]

CHUNK: Final = 8192
"""Records scored at once: the arrays of one chunk are all a pass holds besides its results."""


@dataclass(frozen=True, slots=True)
class RecordRef:
    """What is kept of a scored record: where it is and how it is named."""

    path: str
    line: int
    query_id: str | None
    has_ids: bool
    """Whether it carries document ids (without them its retrieval metrics are not applicable)."""


@dataclass(frozen=True, slots=True)
class Scan:
    """A run read once: a reference per record, the retrieval scores of those with document
    ids (``BatchScores``, in record order), and the lexical estimate when asked for."""

    refs: list[RecordRef]
    scores: BatchScores
    lexical: MetricResults | None = None

    def estimates(self) -> GenerationReport:
        """The lexical estimates as a generation report (``ValueError`` unless asked for)."""
        if self.lexical is None:
            raise ValueError("this run was scanned without the lexical estimate")
        return GenerationReport("lexical", (self.lexical,))

    @property
    def not_applicable(self) -> int:
        """Records without document ids."""
        return sum(1 for ref in self.refs if not ref.has_ids)


def labels_for(record: EvalRecord, qrels: Qrels | None) -> dict[str, int]:
    """The record's labels: from ``qrels`` when it knows the query, else the record's own."""
    if qrels is not None:
        found = qrels.lookup(record.query_id, record.query)
        if found is not None:
            return found
    return record.grades or {}


def score_records(records: Sequence[EvalRecord], qrels: Qrels | None, ks: Iterable[int]) -> BatchScores:
    """Score records with the batch metric core; records without document ids (retrieval not
    applicable) are left out."""
    return score_queries(
        [r.retrieved for r in records if r.retrieved is not None],
        [labels_for(r, qrels) for r in records if r.retrieved is not None],
        ks,
    )


def _chunks(records: Iterable[EvalRecord], size: int) -> Iterator[list[EvalRecord]]:
    it = iter(records)
    while chunk := list(islice(it, size)):
        yield chunk


@contextmanager
def _collect_less(threshold: int = 100_000) -> Iterator[None]:
    """The cycle collector's first generation at ``threshold`` allocations (instead of 700)
    while a run is read, then as it was: records hold no cycles, and collecting a million of
    them 700 at a time costs a fifth of the pass."""
    before = gc.get_threshold()
    gc.set_threshold(max(threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def scan_run(
    records: Iterable[EvalRecord], qrels: Qrels | None, ks: Iterable[int], *, lexical: bool = False, chunk: int = CHUNK
) -> Scan:
    """Read ``records`` once (an iterator is consumed as it is read): score their retrieval at
    ``ks`` ``chunk`` records at a time, estimate each one's faithfulness lexically when
    ``lexical``, and keep a ``RecordRef`` of each."""
    cutoffs = tuple(sorted(set(ks)))
    refs: list[RecordRef] = []
    outcomes: list[RecordOutcome] = []
    parts: list[BatchScores] = []
    with _collect_less():
        for part in _chunks(records, chunk):
            parts.append(score_records(part, qrels, cutoffs))
            refs.extend(RecordRef(r.path, r.line, r.query_id, r.retrieved is not None) for r in part)
            if lexical:
                outcomes.extend(map(lexical_outcome, part))
    estimate = MetricResults("faithfulness_lexical", tuple(outcomes)) if lexical else None
    return Scan(refs, joined(parts, cutoffs), estimate)
