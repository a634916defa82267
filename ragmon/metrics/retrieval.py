"""Per-query retrieval metrics with trec_eval's definitions.

Every metric takes a ranking (document ids, best first) and the query's relevance: either a
collection of relevant ids (binary, grade 1) or a mapping ``id -> grade`` with integer grades
``>= 0``. A document is relevant when its grade is above 0. Duplicates in a ranking count once,
at their first rank. When no document has a grade above 0 the metric is undefined and the
function returns ``None``: such a query is excluded from means, never scored 0 or 1.

Each formula is written once, as a *kernel* (``*_of``) over the ranking's gains (the grade of
each distinct ranked document, 0 when unjudged). The per-query functions, ``score_all`` and the
live scorer (``ragmon.scoring.records``) all call these kernels; ``ragmon.metrics.batch`` is
the vectorised second implementation, held equal to them by the tests.
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
    "ranked_gains",
    "ideal_gains",
    "relevant_prefix",
    "relevant_in_top",
    "hit_of",
    "reciprocal_rank_of",
    "recall_of",
    "precision_of",
    "dcg_prefix",
    "dcg_of",
    "ndcg_of",
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


# Kernels: each formula once, over gains (pure, no validation).


def ranked_gains(ranking: Iterable[DocId], grades: Mapping[Any, float]) -> list[float]:
    """Grade of each distinct ranked document, best first (0 when unjudged)."""
    return [grades.get(doc, 0) for doc in dedupe(ranking)]


def ideal_gains(grades: Mapping[Any, float]) -> list[float]:
    """Grades above 0 of all judged documents, highest first: the ideal ranking's gains."""
    return sorted((g for g in grades.values() if g > 0), reverse=True)


def relevant_prefix(gains: Sequence[float], depth: int) -> list[int]:
    """Relevant documents (gain above 0) in the top 0, 1, …, ``depth``: item k is the top k's."""
    out = [0] * (depth + 1)
    found = 0
    for rank in range(1, depth + 1):
        if rank <= len(gains) and gains[rank - 1] > 0:
            found += 1
        out[rank] = found
    return out


def relevant_in_top(gains: Sequence[float], k: int) -> int:
    """Number of relevant documents (gain above 0) in the top k (``relevant_prefix``'s item k)."""
    return relevant_prefix(gains, k)[k]


def hit_of(found: int) -> float:
    """Hit from the number of relevant documents in the top k."""
    return 1.0 if found else 0.0


def reciprocal_rank_of(gains: Sequence[float], k: int | None = None) -> float:
    """1 / rank of the first relevant document within the top k (all when ``k`` is None), else 0."""
    for rank, gain in enumerate(gains[:k], start=1):
        if gain > 0:
            return 1.0 / rank
    return 0.0


def recall_of(found: int, num_relevant: int) -> float:
    """Recall from the relevant documents found in the top k and all relevant documents."""
    return found / num_relevant


def precision_of(found: int, k: int) -> float:
    """Precision from the relevant documents found in the top k (a short list still divides by k)."""
    return found / k


def dcg_prefix(gains: Sequence[float], depth: int) -> list[float]:
    """DCG of the top 0, 1, …, ``depth`` (gain = grade, discount log2(rank + 1)), summed rank by
    rank: item k is DCG@k (a short list's last value repeats)."""
    out = [0.0] * (depth + 1)
    total = 0.0
    for rank, gain in enumerate(gains[:depth], start=1):
        if gain > 0:
            total += gain / math.log2(rank + 1)
        out[rank] = total
    for rank in range(len(gains) + 1, depth + 1):
        out[rank] = total
    return out


def dcg_of(gains: Sequence[float], k: int) -> float:
    """DCG of the top k (``dcg_prefix``'s item k)."""
    return dcg_prefix(gains, k)[k]


def ndcg_of(gains: Sequence[float], ideal: Sequence[float], k: int) -> float:
    """DCG@k of the ranking over DCG@k of the ideal gains (``ideal_gains``)."""
    return dcg_of(gains, k) / dcg_of(ideal, k)


# Per-query metrics: validate, then call the kernels.


def _judge(ranking: Sequence[DocId], relevance: Relevance) -> tuple[list[float], dict[Any, float], int] | None:
    """Gains of the ranking, the grades, and the number of relevant documents; ``None`` if none."""
    grades = as_grades(relevance)
    num_rel = sum(1 for g in grades.values() if g > 0)
    if num_rel == 0:
        return None
    return ranked_gains(ranking, grades), grades, num_rel


def hit_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """1.0 if a relevant document is in the top k, else 0.0 (trec_eval ``success.k``).

    Range {0, 1}; ``None`` when nothing is relevant. The mean over queries is the hit rate@k.
    """
    _check_k(k)
    judged = _judge(ranking, relevance)
    return None if judged is None else hit_of(relevant_in_top(judged[0], k))


def reciprocal_rank(ranking: Sequence[DocId], relevance: Relevance, k: int | None = None) -> float | None:
    """1 / rank of the first relevant document, 0.0 if none (trec_eval ``recip_rank``).

    With ``k`` only the top k count (RR@k). Range [0, 1]; ``None`` when nothing is relevant.
    The mean over queries is MRR.
    """
    if k is not None:
        _check_k(k)
    judged = _judge(ranking, relevance)
    return None if judged is None else reciprocal_rank_of(judged[0], k)


def recall_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """Relevant documents in the top k / all relevant documents (trec_eval ``recall.k``).

    Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    judged = _judge(ranking, relevance)
    return None if judged is None else recall_of(relevant_in_top(judged[0], k), judged[2])


def precision_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """Relevant documents in the top k / k (trec_eval ``P.k``: a short list still divides by k).

    Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    judged = _judge(ranking, relevance)
    return None if judged is None else precision_of(relevant_in_top(judged[0], k), k)


def ndcg_at_k(ranking: Sequence[DocId], relevance: Relevance, k: int) -> float | None:
    """DCG@k / ideal DCG@k with gain = grade and discount log2(rank + 1) (trec_eval ``ndcg_cut.k``).

    The ideal DCG comes from the top min(|relevant|, k) grades of *all* judged documents, not
    from the retrieved list. Range [0, 1]; ``None`` when nothing is relevant.
    """
    _check_k(k)
    judged = _judge(ranking, relevance)
    return None if judged is None else ndcg_of(judged[0], ideal_gains(judged[1]), k)


def score_all(
    ranking: Sequence[DocId], relevance: Relevance, ks: Sequence[int]
) -> tuple[float, dict[int, tuple[float, float, float, float]]] | None:
    """Every metric of one query: ``(rr, {k: (hit, recall, precision, ndcg)})``.

    The same kernels as the single-metric functions, with the grades read, the ranking
    deduplicated, the ideal gains sorted and the DCG summed once for every k; ``None`` when nothing is relevant. For the
    sidecar, which scores each finished request at every k.
    """
    for k in ks:
        _check_k(k)
    judged = _judge(ranking, relevance)
    if judged is None:
        return None
    gains, grades, num_rel = judged
    depth = max(ks, default=0)
    dcg, ideal_dcg = dcg_prefix(gains, depth), dcg_prefix(ideal_gains(grades), depth)
    found_at = relevant_prefix(gains, depth)
    out: dict[int, tuple[float, float, float, float]] = {}
    for k in ks:
        found = found_at[k]
        out[k] = (hit_of(found), recall_of(found, num_rel), precision_of(found, k), dcg[k] / ideal_dcg[k])
    return reciprocal_rank_of(gains), out
