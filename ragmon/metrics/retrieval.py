"""Per-query retrieval metrics with trec_eval's definitions.

Every function takes a ranking (document ids, best first) and the query's relevance: either a
collection of relevant ids (binary, grade 1) or a mapping ``id -> grade`` with integer grades
``>= 0``. A document is relevant when its grade is above 0. Duplicates in a ranking count once,
at their first rank. When no document has a grade above 0 the metric is undefined and the
function returns ``None``: such a query is excluded from means, never scored 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

DocId: TypeAlias = Hashable
Relevance: TypeAlias = Mapping[Any, float] | Collection[Any]
"""Relevant ids (binary) or ``id -> grade`` (graded, grades >= 0)."""

__all__ = [
    "DocId",
    "Relevance",
    "as_grades",
    "dedupe",
    "hit_at_k",
    "reciprocal_rank",
    "recall_at_k",
    "precision_at_k",
    "ndcg_at_k",
    "score_all",
]


def as_grades(relevance: Relevance) -> dict[Any, float]:
    """Return relevance as ``id -> grade``; a plain collection gives grade 1 to each id.

    Raises ``ValueError`` on a negative or non-finite grade.
    """
    if isinstance(relevance, Mapping):
        grades = dict(relevance)
        for doc, grade in grades.items():
            if isinstance(grade, bool) or not isinstance(grade, (int, float)):
                raise ValueError(f"grade of {doc!r} is not a number: {grade!r}")
            if not math.isfinite(grade) or grade < 0:
                raise ValueError(f"grade of {doc!r} must be a finite number >= 0, got {grade!r}")
        return grades
    if isinstance(relevance, (str, bytes)):
        raise ValueError("relevance must be a collection of ids or a mapping id -> grade, not a string")
    return dict.fromkeys(relevance, 1)


def dedupe(ranking: Iterable[DocId]) -> list[DocId]:
    """Return the ranking with repeated ids removed, each kept at its first rank."""
    return list(dict.fromkeys(ranking))


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def _prepare(ranking: Sequence[DocId], relevance: Relevance) -> tuple[list[float], dict[Any, float], int] | None:
    """Gains of the deduplicated ranking, the grades, and the number of relevant documents."""
    grades = as_grades(relevance)
    num_rel = sum(1 for g in grades.values() if g > 0)
    if num_rel == 0:
        return None
    gains = [grades.get(doc, 0) for doc in dedupe(ranking)]
    return gains, grades, num_rel


def hit_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """1.0 if a relevant document is in the top k, else 0.0 (trec_eval ``success.k``).

    Range {0, 1}; ``None`` when nothing is relevant. The mean over queries is the hit rate@k.
    """
    _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains = prepared[0]
    return 1.0 if any(g > 0 for g in gains[:k]) else 0.0


def reciprocal_rank(ranking: Sequence[DocId], relevance: Relevance, k: int | None = None) -> float | None:
    """1 / rank of the first relevant document, 0.0 if none (trec_eval ``recip_rank``).

    With ``k`` only the top k count (RR@k). Range [0, 1]; ``None`` when nothing is relevant.
    The mean over queries is MRR.
    """
    if k is not None:
        _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains = prepared[0] if k is None else prepared[0][:k]
    for rank, gain in enumerate(gains, start=1):
        if gain > 0:
            return 1.0 / rank
    return 0.0


def recall_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """Relevant documents in the top k / all relevant documents (trec_eval ``recall.k``).

    Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains, _, num_rel = prepared
    return sum(1 for g in gains[:k] if g > 0) / num_rel


def precision_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """Relevant documents in the top k / k (trec_eval ``P.k``: a short list still divides by k).

    Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains = prepared[0]
    return sum(1 for g in gains[:k] if g > 0) / k


def ndcg_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """DCG@k / ideal DCG@k with gain = grade and discount log2(rank + 1) (trec_eval ``ndcg_cut.k``).

    The ideal DCG comes from the top min(|relevant|, k) grades of *all* judged documents, not
    from the retrieved list. Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains, grades, _ = prepared
    dcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(gains[:k], start=1) if g > 0)
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg


def score_all(
    ranking: Sequence[DocId], relevance: Relevance, ks: Sequence[int]
) -> tuple[float, dict[int, tuple[float, float, float, float]]] | None:
    """Every metric of one query in one pass: ``(rr, {k: (hit, recall, precision, ndcg)})``.

    The same values as the single-metric functions (the tests hold them equal); ``None`` when
    nothing is relevant. For the sidecar, which scores each finished request at every k.
    """
    for k in ks:
        _check_k(k)
    prepared = _prepare(ranking, relevance)
    if prepared is None:
        return None
    gains, grades, num_rel = prepared
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)
    rr = next((1.0 / rank for rank, g in enumerate(gains, start=1) if g > 0), 0.0)
    out: dict[int, tuple[float, float, float, float]] = {}
    for k in ks:
        top = gains[:k]
        hits = sum(1 for g in top if g > 0)
        dcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(top, start=1) if g > 0)
        idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal[:k], start=1))
        out[k] = (1.0 if hits else 0.0, hits / num_rel, hits / k, dcg / idcg)
    return rr, out
