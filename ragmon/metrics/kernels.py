"""The retrieval metrics' kernels: each formula once, over a ranking's gains (the grade of
each distinct ranked document, 0 when unjudged). Pure and unchecked: ``ragmon.metrics.retrieval``
checks the arguments of the public functions first. Compiled with the pipeline
(``ragmon/compiled.py``): a typed argument is converted as it enters (an int gain to a float,
the same value).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "dcg_of",
    "dcg_prefix",
    "dedupe",
    "hit_of",
    "ideal_gains",
    "ndcg_of",
    "precision_of",
    "ranked_gains",
    "recall_of",
    "reciprocal_rank_of",
    "relevant_in_top",
    "relevant_prefix",
    "score_gains",
]


def dedupe(ranking: Iterable[Hashable]) -> list[Hashable]:
    """Return the ranking with repeated ids removed, each kept at its first rank."""
    return list(dict.fromkeys(ranking))


def ranked_gains(ranking: Iterable[Hashable], grades: Mapping[Any, float]) -> list[float]:
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


def score_gains(
    gains: Sequence[float], ideal: Sequence[float], num_relevant: int, ks: Sequence[int]
) -> tuple[float, dict[int, tuple[float, float, float, float]]]:
    """``(rr, {k: (hit, recall, precision, ndcg)})`` from the ranking's gains, the ideal gains
    and the number of relevant documents (at least 1), the DCG summed once for every k."""
    depth = max(ks, default=0)
    dcg, ideal_dcg = dcg_prefix(gains, depth), dcg_prefix(ideal, depth)
    found_at = relevant_prefix(gains, depth)
    out: dict[int, tuple[float, float, float, float]] = {}
    for k in ks:
        found = found_at[k]
        out[k] = (hit_of(found), recall_of(found, num_relevant), precision_of(found, k), dcg[k] / ideal_dcg[k])
    return reciprocal_rank_of(gains), out
