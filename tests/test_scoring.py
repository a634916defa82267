"""Record scoring: each retrieval score equals the metric core's per-query function of its name."""

from __future__ import annotations

from hypothesis import given
from strategies import SETTINGS, graded_relevance, rankings

from ragmon.metrics import retrieval
from ragmon.scoring import score_retrieval

KS = (1, 2, 3, 5, 10)


@SETTINGS
@given(rankings, graded_relevance)
def test_each_score_is_its_own_metric(ranking: list[str], grades: dict[str, int]) -> None:
    score = score_retrieval(ranking, grades, "label", KS)
    if retrieval.reciprocal_rank(ranking, grades) is None:
        assert score is None
        return
    assert score is not None and score.source == "label"
    assert score.reciprocal_rank == retrieval.reciprocal_rank(ranking, grades)
    for k in KS:
        assert score.hit[k] == retrieval.hit_at_k(ranking, grades, k)
        assert score.recall[k] == retrieval.recall_at_k(ranking, grades, k)
        assert score.precision[k] == retrieval.precision_at_k(ranking, grades, k)
        assert score.ndcg[k] == retrieval.ndcg_at_k(ranking, grades, k)


def test_two_relevant_documents_tell_every_metric_apart() -> None:
    score = score_retrieval(["a", "x", "b", "y"], {"a": 2, "b": 1, "c": 1}, "golden", (1, 3))
    assert score is not None
    assert score.hit == {1: 1.0, 3: 1.0}
    assert score.recall == {1: 1 / 3, 3: 2 / 3}
    assert score.precision == {1: 1.0, 3: 2 / 3}
    assert score.ndcg[1] == 1.0 and 0 < score.ndcg[3] < 1
