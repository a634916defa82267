"""Wrappers with the call shape of the formulas that circulate in RAG tutorials.

Code written against ``hit_rate(results, relevant, k)``, ``mean_reciprocal_rank(results,
relevant)``, ``recall_at_k``, ``precision_at_k`` and ``ndcg_at_k`` keeps working, but gets
trec_eval's definitions: duplicates count once, NDCG's ideal DCG comes from all relevant
documents, and a query with nothing relevant returns ``None`` instead of a made-up 0.
``results`` may hold ids, mappings with an ``"id"`` key, or objects with an ``id`` attribute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragmon.metrics import retrieval
from ragmon.metrics.retrieval import DocId, Relevance

__all__ = ["hit_rate", "mean_reciprocal_rank", "recall_at_k", "precision_at_k", "ndcg_at_k"]


def _ids(results: Iterable[Any]) -> list[DocId]:
    ids: list[DocId] = []
    for item in results:
        if isinstance(item, Mapping):
            ids.append(item["id"])
        elif isinstance(item, (str, bytes, int)) or not hasattr(item, "id"):
            ids.append(item)
        else:
            ids.append(item.id)
    return ids


def hit_rate(results: Iterable[Any], relevant: Relevance, k: int) -> float | None:
    """1.0 if a relevant document is in the top k, else 0.0; see ``retrieval.hit_at_k``."""
    return retrieval.hit_at_k(_ids(results), relevant, k)


def mean_reciprocal_rank(results: Iterable[Any], relevant: Relevance) -> float | None:
    """Reciprocal rank of one query (average it over queries for MRR); see ``retrieval.reciprocal_rank``."""
    return retrieval.reciprocal_rank(_ids(results), relevant)


def recall_at_k(results: Iterable[Any], relevant: Relevance, k: int) -> float | None:
    """See ``retrieval.recall_at_k``."""
    return retrieval.recall_at_k(_ids(results), relevant, k)


def precision_at_k(results: Iterable[Any], relevant: Relevance, k: int) -> float | None:
    """See ``retrieval.precision_at_k``."""
    return retrieval.precision_at_k(_ids(results), relevant, k)


def ndcg_at_k(results: Iterable[Any], relevant: Relevance, k: int) -> float | None:
    """See ``retrieval.ndcg_at_k``."""
    return retrieval.ndcg_at_k(_ids(results), relevant, k)
