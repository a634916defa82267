"""Batch retrieval metrics: many queries scored at once with numpy.

Two stages. ``encode`` turns rankings and relevance into dense arrays (the only Python loop);
``score_encoded`` is a pure numpy kernel over them. ``score_queries`` does both in chunks so
memory stays bounded on large runs. Definitions are those of ``ragmon.metrics.retrieval``
(trec_eval's), which the tests check both against.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count, islice, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from ragmon.metrics.retrieval import DocId, Relevance, as_grades

__all__ = [
    "METRICS",
    "BatchScores",
    "Encoded",
    "encode",
    "joined",
    "metric_keys",
    "score_encoded",
    "score_queries",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

METRICS = ("hit_rate", "mrr", "recall", "precision", "ndcg")
"""Metric names, in report order; every one but ``mrr`` is reported per k as ``name@k``."""


def metric_keys(ks: Iterable[int]) -> list[str]:
    """Report keys for the given cut-offs: ``hit_rate@1 … mrr … ndcg@10``."""
    ks = sorted(set(ks))
    keys: list[str] = []
    for name in METRICS:
        keys.extend(["mrr"] if name == "mrr" else [f"{name}@{k}" for k in ks])
    return keys


@dataclass(frozen=True, slots=True)
class Encoded:
    """Dense arrays for ``n`` queries, good for cut-offs up to ``depth``.

    ``gains[i, r]``: grade of the document at rank r+1 of query i's deduplicated ranking (0 past
    its end). ``ideal[i, r]``: the r+1-th highest positive grade of query i's labels. Both are
    at most ``depth`` wide, narrower when no ranking or label set is that long.
    ``first_relevant[i]``: 1-based rank of the first relevant document in the whole
    deduplicated ranking, 0 if none. ``num_relevant[i]``: labels with a grade above 0; rows with
    none are unlabelled and hold zeros.
    """

    depth: int
    gains: FloatArray
    ideal: FloatArray
    first_relevant: IntArray
    num_relevant: IntArray


def _pad(rows: list[list[float]]) -> FloatArray:
    """Rows of different lengths as a zero-padded ``(n, longest)`` matrix."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max()) if rows else 0
    flat = array("d")
    for row in rows:
        flat.extend(row)
    out = np.zeros((len(rows), width), dtype=np.float64)
    if flat:
        ranks = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[np.repeat(np.arange(len(rows)), lengths), ranks] = np.frombuffer(flat, dtype=np.float64)
    return out


def _grades(relevance: Relevance) -> Mapping[Any, float]:
    """Validated ``id -> grade``, as :func:`~ragmon.metrics.retrieval.as_grades` validates it;
    a plain dict of finite ``int`` / ``float`` grades >= 0 is used as it is."""
    if type(relevance) is dict:
        values = relevance.values()
        if not values or (set(map(type, values)) <= _PLAIN_NUMBERS and min(values) >= 0 and sum(values) < math.inf):
            return relevance
    return as_grades(relevance)


_PLAIN_NUMBERS = frozenset({int, float})


def _first_relevant(ranking: Sequence[DocId], grades: Mapping[Any, float]) -> int:
    """1-based rank of the first relevant document in the deduplicated ranking, 0 if none
    (grades are validated: >= 0, so relevant is truthy)."""
    at = next(compress(count(1), map(grades.get, ranking, repeat(0))), 0)
    return len(dict.fromkeys(ranking[:at])) if at else 0


def encode(
    rankings: Sequence[Sequence[DocId]], relevances: Sequence[Relevance], depth: int
) -> Encoded:
    """Encode rankings (ids, best first) and their relevance for ``score_encoded``.

    Only the top ``depth`` distinct ids of each ranking are looked up, plus the rank of its
    first relevant document. Duplicate ids count once, at their first rank. Raises
    ``ValueError`` on a negative or non-finite grade, or when the sequences differ in length.
    """
    n = len(rankings)
    if len(relevances) != n:
        raise ValueError(f"{n} rankings but {len(relevances)} relevance entries")
    gain_rows: list[list[float]] = []
    ideal_rows: list[list[float]] = []
    first = np.zeros(n, dtype=np.int64)
    num_relevant = np.zeros(n, dtype=np.int64)
    for i, (ranking, relevance) in enumerate(zip(rankings, relevances)):
        grades = _grades(relevance)
        best = list(filter(None, grades.values()))  # grades are >= 0: the relevant ones are truthy
        if not best:
            gain_rows.append([])
            ideal_rows.append([])
            continue
        num_relevant[i] = len(best)
        best.sort(reverse=True)
        ideal_rows.append(best[:depth])
        head = dict.fromkeys(ranking[:depth])
        if len(head) < depth < len(ranking):
            head = dict.fromkeys(islice(dict.fromkeys(ranking), depth))
        row = list(map(grades.get, head, repeat(0)))
        gain_rows.append(row)
        rank = next(compress(count(1), row), 0)
        if rank == 0 and len(ranking) > len(row):
            rank = _first_relevant(ranking, grades)
        first[i] = rank
    return Encoded(depth, _pad(gain_rows), _pad(ideal_rows), first, num_relevant)


@dataclass(frozen=True, slots=True)
class BatchScores:
    """Per-query scores of a batch.

    ``labelled[i]`` says whether query i had any document with a grade above 0; only those
    are scored. ``values[key]`` holds one score per labelled query, in input order.
    """

    ks: tuple[int, ...]
    labelled: npt.NDArray[np.bool_]
    values: dict[str, FloatArray]

    @property
    def queries(self) -> int:
        """Number of scored (labelled) queries."""
        return int(self.labelled.sum())

    @property
    def unlabelled(self) -> int:
        """Number of queries excluded for lack of relevance information."""
        return int(self.labelled.size - self.labelled.sum())

    def means(self) -> dict[str, float | None]:
        """Mean of each metric over the scored queries; ``None`` when none were scored."""
        return {
            key: (float(np.mean(v)) if v.size else None) for key, v in self.values.items()
        }


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    out = tuple(sorted(set(ks)))
    for k in out:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return out


def _cumulative(matrix: FloatArray) -> FloatArray:
    """Row-wise running sums with a leading 0 column: ``out[:, j]`` sums the first j columns."""
    out = np.zeros((matrix.shape[0], matrix.shape[1] + 1), dtype=np.float64)
    np.cumsum(matrix, axis=1, out=out[:, 1:])
    return out


def score_encoded(encoded: Encoded, ks: Iterable[int]) -> BatchScores:
    """Score encoded queries at every cut-off in ``ks`` (each at most ``encoded.depth``)."""
    cutoffs = _check_ks(ks)
    if cutoffs and cutoffs[-1] > encoded.depth:
        raise ValueError(f"k={cutoffs[-1]} is deeper than the encoded depth {encoded.depth}")
    labelled = encoded.num_relevant > 0
    gains = encoded.gains[labelled]
    ideal = encoded.ideal[labelled]
    num_rel = encoded.num_relevant[labelled].astype(np.float64)
    first = encoded.first_relevant[labelled]
    gain_depth, ideal_depth = gains.shape[1], ideal.shape[1]
    relevant_cum = _cumulative((gains > 0).astype(np.float64))
    dcg_cum = _cumulative(gains / np.log2(np.arange(2, gain_depth + 2, dtype=np.float64)))
    idcg_cum = _cumulative(ideal / np.log2(np.arange(2, ideal_depth + 2, dtype=np.float64)))
    rr = np.zeros(first.size, dtype=np.float64)
    found = first > 0
    rr[found] = 1.0 / first[found]
    values: dict[str, FloatArray] = {}
    for key in metric_keys(cutoffs):
        if key == "mrr":
            values[key] = rr
            continue
        name, _, cut = key.partition("@")
        k = int(cut)
        hits = relevant_cum[:, min(k, gain_depth)]
        if name == "hit_rate":
            values[key] = (hits > 0).astype(np.float64)
        elif name == "recall":
            values[key] = hits / num_rel
        elif name == "precision":
            values[key] = hits / k
        else:
            values[key] = dcg_cum[:, min(k, gain_depth)] / idcg_cum[:, min(k, ideal_depth)]
    return BatchScores(cutoffs, labelled, values)


def score_queries(
    rankings: Sequence[Sequence[DocId]],
    relevances: Sequence[Relevance],
    ks: Iterable[int] = (1, 3, 5, 10),
    *,
    chunk: int = 8192,
) -> BatchScores:
    """Score many queries at once: the batch API.

    ``rankings[i]`` lists query i's retrieved ids, best first; ``relevances[i]`` is its relevant
    ids or ``id -> grade``. Queries with nothing relevant are excluded and counted in
    ``BatchScores.unlabelled``. Work is done ``chunk`` queries at a time to bound memory.
    """
    cutoffs = _check_ks(ks)
    if len(relevances) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(relevances)} relevance entries")
    depth = cutoffs[-1] if cutoffs else 0
    parts = [
        score_encoded(encode(rankings[s : s + chunk], relevances[s : s + chunk], depth), cutoffs)
        for s in range(0, len(rankings), chunk)
    ]
    return joined(parts, cutoffs)


def joined(parts: Sequence[BatchScores], ks: Iterable[int]) -> BatchScores:
    """The scores of consecutive batches scored at ``ks``, as one batch (none: an empty one)."""
    cutoffs = _check_ks(ks)
    if not parts:
        empty = np.zeros(0, dtype=np.float64)
        return BatchScores(cutoffs, np.zeros(0, dtype=np.bool_), {k: empty for k in metric_keys(cutoffs)})
    return BatchScores(
        cutoffs,
        np.concatenate([p.labelled for p in parts]),
        {key: np.concatenate([p.values[key] for p in parts]) for key in parts[0].values},
    )
