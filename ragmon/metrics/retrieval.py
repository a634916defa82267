"""Per-query retrieval metrics with trec_eval's definitions.

Every metric takes a ranking (document ids, best first) and the query's relevance: either a
collection of relevant ids (binary, grade 1) or a mapping ``id -> grade`` with integer grades
``>= 0``. A document is relevant when its grade is above 0. Duplicates in a ranking count once,
at their first rank. When no document has a grade above 0 the metric is undefined and the
function returns ``None``: such a query is excluded from means, never scored 0 or 1.

Each formula is written once, as a *kernel* (``*_of``, in ``ragmon.metrics.kernels``) over the
ranking's gains (the grade of each distinct ranked document, 0 when unjudged). The per-query
functions here check their arguments, then call the kernels, as ``score_all`` and the live
scorer (``ragmon.scoring.records``) do; ``ragmon.metrics.batch`` is the vectorised second
implementation, held equal to them by the tests.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any, TypeAlias

from ragmon.numbers import MAX_COUNT
from ragmon.metrics.kernels import (
    dcg_of,
    dcg_prefix,
    dedupe,
    hit_of,
    ideal_gains,
    ndcg_of,
    precision_of,
    ranked_gains,
    recall_of,
    reciprocal_rank_of,
    relevant_in_top,
    relevant_prefix,
    score_gains,
)

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

    Raises ``ValueError`` on a grade that is not a number from 0 to ``MAX_COUNT`` (10^12: a
    ranking's DCG over such grades stays finite and exact).
    """
    if isinstance(relevance, Mapping):
        grades = dict(relevance)
        for doc, grade in grades.items():
            if isinstance(grade, bool) or not isinstance(grade, (int, float)):
                raise ValueError(f"grade of {doc!r} is not a number: {grade!r:.40}")
            if not 0 <= grade <= MAX_COUNT:  # False for NaN; an int of any size compares
                raise ValueError(f"grade of {doc!r} must be a number from 0 to {MAX_COUNT:,}, got {grade!r:.40}")
        return grades
    if isinstance(relevance, (str, bytes)):
        raise ValueError("relevance must be a collection of ids or a mapping id -> grade, not a string")
    return dict.fromkeys(relevance, 1)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


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
    return score_gains(gains, ideal_gains(grades), num_rel, ks)
