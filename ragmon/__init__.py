"""ragmon: a production monitor for retrieval-augmented generation services."""

from ragmon.compiled import prefer_source

prefer_source()  # RAGMON_PIPELINE=python: the compiled modules run from source (before any loads)

from ragmon.metrics import (  # noqa: E402
    BatchScores,
    hit_at_k,
    hit_rate,
    mean_reciprocal_rank,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    score_queries,
)

__version__ = "0.1.0"

__all__ = [
    "BatchScores",
    "__version__",
    "hit_at_k",
    "hit_rate",
    "mean_reciprocal_rank",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "reciprocal_rank",
    "score_queries",
]
