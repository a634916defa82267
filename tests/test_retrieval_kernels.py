"""The per-query metrics' argument errors: a caller of the Python API is told what was wrong."""

from __future__ import annotations

import pytest

from ragmon.metrics import retrieval


def test_a_bad_grade_is_named_with_its_document() -> None:
    with pytest.raises(ValueError, match=r"^grade of 'd1' is not a number: 'x'$"):
        retrieval.hit_at_k(["d1"], {"d1": "x"}, 1)
    with pytest.raises(ValueError, match=r"^grade of 'd1' must be a number from 0 to 1,000,000,000,000, got -1$"):
        retrieval.ndcg_at_k(["d1"], {"d1": -1}, 1)
    with pytest.raises(ValueError, match=r"^grade of 'd1' must be a number from 0 to 1,000,000,000,000, got 1000000000000000000000000000000000000000$"):
        retrieval.ndcg_at_k(["d1"], {"d1": 10**400}, 1)  # math.isfinite raised OverflowError on it


def test_a_string_is_refused_as_relevance() -> None:
    """``"d1"`` would otherwise read as the ids ``d`` and ``1``."""
    with pytest.raises(ValueError, match=r"^relevance must be a collection of ids or a mapping id -> grade, not a string$"):
        retrieval.reciprocal_rank(["d1"], "d1")


def test_a_bad_cutoff_is_named() -> None:
    with pytest.raises(ValueError, match=r"^k must be an integer >= 1, got 0$"):
        retrieval.recall_at_k(["d1"], {"d1"}, 0)
