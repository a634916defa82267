"""ragmon: a production monitor for retrieval-augmented generation services.

The retrieval metrics below load on first use (PEP 562), so ``import ragmon`` (and every
command that needs none of them, such as ``ragmon --version``) does not load numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragmon.compiled import prefer_source

prefer_source()  # RAGMON_PIPELINE=python: the compiled modules run from source (before any loads)

if TYPE_CHECKING:
    from ragmon.metrics import (
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


def __getattr__(name: str) -> Any:
    """The metric functions of ``__all__``, imported from ``ragmon.metrics`` when first asked for."""
    if name in __all__:
        import ragmon.metrics

        value = getattr(ragmon.metrics, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ragmon' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
