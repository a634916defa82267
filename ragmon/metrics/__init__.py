"""Retrieval metrics with trec_eval's definitions: per query (pure Python) and in batch (numpy)."""

from ragmon.metrics.batch import METRICS, BatchScores, metric_keys, score_queries
from ragmon.metrics.compat import hit_rate, mean_reciprocal_rank
from ragmon.metrics.retrieval import (
    as_grades,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)

__all__ = [
    "METRICS",
    "BatchScores",
    "as_grades",
    "hit_at_k",
    "hit_rate",
    "mean_reciprocal_rank",
    "metric_keys",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "reciprocal_rank",
    "score_queries",
]
