"""The metric kernels (``ragmon.metrics.kernels``), one hand-computed case each, and the
per-query metrics' argument errors: a caller of the Python API is told what was wrong.
(Agreement with trec_eval over many rankings: ``tests/test_metrics_trec_eval.py``.)"""

from __future__ import annotations

import math

import pytest

from ragmon.metrics import kernels as kn
from ragmon.metrics import retrieval

GRADES = {"a": 2, "b": 1, "c": 3, "z": 1, "n": 0}
"""Four relevant documents (``z`` never retrieved), one judged not relevant."""
RANKING = ["x", "a", "a", "y", "b", "c"]
"""``a`` twice: the second is dropped, so the gains are ``[0, 2, 0, 1, 3]``."""
GAINS = [0, 2, 0, 1, 3]
IDEAL = [3, 2, 1, 1]


def test_each_kernel_on_a_hand_computed_case() -> None:
    assert kn.dedupe(RANKING) == ["x", "a", "y", "b", "c"]
    assert kn.ranked_gains(RANKING, GRADES) == GAINS
    assert kn.ideal_gains(GRADES) == IDEAL
    assert kn.relevant_prefix(GAINS, 7) == [0, 0, 1, 1, 2, 3, 3, 3]  # past the list: the last count repeats
    assert kn.relevant_in_top(GAINS, 4) == 2
    assert (kn.hit_of(0), kn.hit_of(1), kn.hit_of(3)) == (0.0, 1.0, 1.0)
    assert (kn.reciprocal_rank_of(GAINS), kn.reciprocal_rank_of(GAINS, 1), kn.reciprocal_rank_of([0, 0])) == (0.5, 0.0, 0.0)
    assert kn.recall_of(3, 4) == 0.75
    assert kn.precision_of(1, 3) == 1 / 3 and kn.precision_of(3, 10) == 0.3  # a short list still divides by k
    dcg = [0.0, 0.0, 2 / math.log2(3), 2 / math.log2(3), 2 / math.log2(3) + 1 / math.log2(5)]
    dcg.append(dcg[-1] + 3 / math.log2(6))
    assert kn.dcg_prefix(GAINS, 6) == pytest.approx([*dcg, dcg[-1]], abs=1e-15)
    assert kn.dcg_of(GAINS, 4) == pytest.approx(dcg[4], abs=1e-15)
    ideal_at_2 = 3 + 2 / math.log2(3)
    assert kn.ndcg_of(GAINS, IDEAL, 2) == pytest.approx(dcg[2] / ideal_at_2, abs=1e-15)
    ideal_at_5 = ideal_at_2 + 1 / math.log2(4) + 1 / math.log2(5)
    rr, at = kn.score_gains(GAINS, IDEAL, 4, (1, 2, 5))
    assert rr == 0.5
    assert at[1] == (0.0, 0.0, 0.0, 0.0)
    assert at[2] == pytest.approx((1.0, 0.25, 0.5, dcg[2] / ideal_at_2), abs=1e-15)
    assert at[5] == pytest.approx((1.0, 0.75, 0.6, dcg[5] / ideal_at_5), abs=1e-15)


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
