"""Property tests for the retrieval metrics: per query, batch (numpy) and the compat wrappers.

The definitions under test are trec_eval's (see ``ragmon.metrics.retrieval``): relevant means
grade > 0, duplicates count once at their first rank, NDCG's ideal DCG comes from all labels,
precision@k divides by k, and a query with nothing relevant is ``None`` (batch: excluded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.metrics import batch, compat
from ragmon.metrics.batch import METRICS, encode, metric_keys, score_encoded, score_queries
from ragmon.metrics.retrieval import (
    as_grades,
    dedupe,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)
from strategies import (
    DOC_IDS,
    FEW,
    SETTINGS,
    binary_relevance,
    cutoffs,
    doc_ids,
    graded_relevance,
    labelled_relevance,
    rankings,
    relevant_count,
    unlabelled_relevance,
)

Metric = Callable[[Any, Any, int], "float | None"]


def rr_at_k(ranking: Any, relevance: Any, k: int) -> float | None:
    return reciprocal_rank(ranking, relevance, k)


def rr_full(ranking: Any, relevance: Any, k: int) -> float | None:
    """Reciprocal rank over the whole ranking (k is ignored): trec_eval's recip_rank."""
    return reciprocal_rank(ranking, relevance)


AT_K: dict[str, Metric] = {
    "hit": hit_at_k,
    "recall": recall_at_k,
    "precision": precision_at_k,
    "ndcg": ndcg_at_k,
    "rr@k": rr_at_k,
}
"""Every metric cut at k."""

ALL: dict[str, Metric] = {**AT_K, "rr": rr_full}
"""Every per-query metric, including full-ranking reciprocal rank."""

SET_BASED: dict[str, Metric] = {"hit": hit_at_k, "recall": recall_at_k, "precision": precision_at_k}
"""Metrics that only depend on which documents are in the top k, not on their order."""


def scores(metrics: dict[str, Metric], ranking: Any, relevance: Any, k: int) -> dict[str, Any]:
    return {name: fn(ranking, relevance, k) for name, fn in metrics.items()}


def positives(relevance: dict[str, int]) -> set[str]:
    return {d for d, g in relevance.items() if g > 0}


# --------------------------------------------------------------------------------------------
# Per-query metrics
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(rankings, graded_relevance, cutoffs)
def test_range_and_none_exactly_when_nothing_is_relevant(ranking, relevance, k):
    labelled = any(g > 0 for g in relevance.values())
    for name, value in scores(ALL, ranking, relevance, k).items():
        if not labelled:
            assert value is None, name
            continue
        assert value is not None, name
        assert isinstance(value, float), name
        assert 0.0 <= value <= 1.0 + 1e-12, (name, value)
    if labelled:
        assert hit_at_k(ranking, relevance, k) in (0.0, 1.0)


@SETTINGS
@given(rankings, unlabelled_relevance, cutoffs)
def test_unlabelled_query_is_none_never_zero(ranking, relevance, k):
    # All grades 0 (or no labels at all), even when the ranking retrieves labelled docs.
    for name, value in scores(ALL, ranking, relevance, k).items():
        assert value is None, name
    assert all(fn(ranking, frozenset(), k) is None for fn in ALL.values())
    assert all(fn(ranking, [], k) is None for fn in ALL.values())


@SETTINGS
@given(rankings, labelled_relevance, cutoffs)
def test_duplicates_count_once(ranking, relevance, k):
    unique = list(dict.fromkeys(ranking))
    assert dedupe(ranking) == unique
    assert scores(ALL, ranking, relevance, k) == scores(ALL, unique, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.data())
def test_repeating_documents_anywhere_changes_nothing(ranking, relevance, k, data):
    # Re-inserting already-ranked ids at later positions is the same as not having them.
    if not ranking:
        return
    noisy = list(ranking)
    for doc in data.draw(st.lists(st.sampled_from(ranking), max_size=10), label="repeats"):
        first = noisy.index(doc)
        pos = data.draw(st.integers(first + 1, len(noisy)), label="position")
        noisy.insert(pos, doc)
    assert dedupe(noisy) == dedupe(ranking)
    assert scores(ALL, noisy, relevance, k) == scores(ALL, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, st.data())
def test_anything_after_rank_k_does_not_change_at_k_values(ranking, relevance, data):
    unique = dedupe(ranking)
    if not unique:
        return
    k = data.draw(st.integers(1, len(unique)), label="k")
    tail = data.draw(rankings, label="tail")  # may be relevant, may repeat top-k ids
    extended = ranking + tail
    assert dedupe(extended)[:k] == unique[:k]
    assert scores(AT_K, extended, relevance, k) == scores(AT_K, ranking, relevance, k)
    # And the top k alone scores the same at k as the full list.
    assert scores(AT_K, unique[:k], relevance, k) == scores(AT_K, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.data())
def test_appending_non_relevant_documents_changes_nothing(ranking, relevance, k, data):
    non_relevant = [d for d in DOC_IDS if relevance.get(d, 0) == 0] + ["never-judged"]
    tail = data.draw(st.lists(st.sampled_from(non_relevant), max_size=10), label="tail")
    assert scores(ALL, ranking + tail, relevance, k) == scores(ALL, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, st.data())
def test_order_within_top_k_irrelevant_for_set_based_metrics(ranking, relevance, data):
    unique = dedupe(ranking)
    k = data.draw(st.integers(1, max(1, len(unique) + 3)), label="k")
    top = data.draw(st.permutations(unique[:k]), label="top")
    shuffled = list(top) + unique[k:]
    assert scores(SET_BASED, shuffled, relevance, k) == scores(SET_BASED, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.randoms(use_true_random=False))
def test_label_order_is_irrelevant(ranking, relevance, k, rnd):
    items = list(relevance.items())
    rnd.shuffle(items)
    reordered = dict(items)
    assert scores(ALL, ranking, reordered, k) == scores(ALL, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.randoms(use_true_random=False))
def test_which_unjudged_or_zero_graded_document_is_retrieved_is_irrelevant(
    ranking, relevance, k, rnd
):
    # Swap the identities of non-relevant documents (unjudged or grade 0) in the ranking with a
    # bijection among them: every metric only sees where the relevant documents are.
    non_relevant = [d for d in DOC_IDS if relevance.get(d, 0) == 0]
    image = list(non_relevant)
    rnd.shuffle(image)
    rename = dict(zip(non_relevant, image))
    renamed = [rename.get(d, d) for d in ranking]
    assert scores(ALL, renamed, relevance, k) == scores(ALL, ranking, relevance, k)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, doc_ids)
def test_grade_zero_is_not_relevant(ranking, relevance, k, extra):
    only_positive = {d: g for d, g in relevance.items() if g > 0}
    assert scores(ALL, ranking, relevance, k) == scores(ALL, ranking, only_positive, k)
    # Labelling an unlabelled or non-relevant document with 0 changes nothing either.
    if relevance.get(extra, 0) == 0:
        assert scores(ALL, ranking, {**relevance, extra: 0}, k) == scores(
            ALL, ranking, relevance, k
        )


@SETTINGS
@given(rankings, labelled_relevance, st.integers(1, 30))
def test_monotone_in_k(ranking, relevance, k_max):
    previous: dict[str, float] = {}
    for k in range(1, k_max + 1):
        current = {
            "hit": hit_at_k(ranking, relevance, k),
            "recall": recall_at_k(ranking, relevance, k),
            "rr@k": reciprocal_rank(ranking, relevance, k),
            "relevant_retrieved": round(precision_at_k(ranking, relevance, k) * k),
        }
        for name, value in current.items():
            assert value >= previous.get(name, 0), (name, k)
        # The count behind precision and recall is the same count.
        assert math.isclose(
            current["relevant_retrieved"],
            recall_at_k(ranking, relevance, k) * relevant_count(relevance),
            abs_tol=1e-9,
        )
        # And it grows by at most one per rank.
        assert current["relevant_retrieved"] - previous.get("relevant_retrieved", 0) <= 1
        previous = current
    assert reciprocal_rank(ranking, relevance, k_max) <= reciprocal_rank(ranking, relevance)


@SETTINGS
@given(rankings, labelled_relevance, st.integers(0, 40), st.integers(0, 40))
def test_k_beyond_the_list(ranking, relevance, extra1, extra2):
    unique = dedupe(ranking)
    floor = max(len(unique), relevant_count(relevance), 1)
    k1, k2 = floor + extra1, floor + extra2
    retrieved_relevant = sum(1 for d in unique if relevance.get(d, 0) > 0)
    for k in (k1, k2):
        assert hit_at_k(ranking, relevance, k) == (1.0 if retrieved_relevant else 0.0)
        assert recall_at_k(ranking, relevance, k) == retrieved_relevant / relevant_count(relevance)
        # Precision still divides by k, not by the length of the list.
        assert precision_at_k(ranking, relevance, k) == retrieved_relevant / k
        assert reciprocal_rank(ranking, relevance, k) == reciprocal_rank(ranking, relevance)
    assert ndcg_at_k(ranking, relevance, k1) == ndcg_at_k(ranking, relevance, k2)


@SETTINGS
@given(labelled_relevance, cutoffs)
def test_empty_ranking_scores_zero_when_labelled(relevance, k):
    for name, value in scores(ALL, [], relevance, k).items():
        assert value == 0.0, name
    assert reciprocal_rank((), relevance) == 0.0


@SETTINGS
@given(rankings, labelled_relevance, cutoffs)
def test_no_relevant_document_retrieved_scores_zero(ranking, relevance, k):
    misses = [d for d in ranking if relevance.get(d, 0) == 0]
    for name, value in scores(ALL, misses, relevance, k).items():
        assert value == 0.0, name


@SETTINGS
@given(labelled_relevance, cutoffs, st.randoms(use_true_random=False))
def test_perfect_ranking(relevance, k, rnd):
    items = list(relevance.items())
    rnd.shuffle(items)  # ties between equal grades may come in any order
    perfect = [d for d, _ in sorted(items, key=lambda item: -item[1])]
    num_rel = relevant_count(relevance)
    assert ndcg_at_k(perfect, relevance, k) == pytest.approx(1.0, abs=1e-12)
    assert reciprocal_rank(perfect, relevance) == 1.0
    assert reciprocal_rank(perfect, relevance, k) == 1.0
    assert hit_at_k(perfect, relevance, k) == 1.0
    assert recall_at_k(perfect, relevance, k) == min(k, num_rel) / num_rel
    assert precision_at_k(perfect, relevance, k) == min(k, num_rel) / k
    # Only the positive part matters: without the zero-graded labels it is still perfect.
    top = [d for d in perfect if relevance[d] > 0]
    assert ndcg_at_k(top, relevance, k) == pytest.approx(1.0, abs=1e-12)


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.data())
def test_demoting_a_better_document_lowers_ndcg(ranking, relevance, k, data):
    # Swapping two retrieved documents of different grades so that the worse one comes first
    # strictly lowers NDCG@k when both are in the top k.
    unique = dedupe(ranking)[:k]
    graded = [(i, relevance.get(d, 0)) for i, d in enumerate(unique)]
    pairs = [(i, j) for i, gi in graded for j, gj in graded if i < j and gi > gj]
    if not pairs:
        return
    i, j = data.draw(st.sampled_from(pairs), label="pair")
    worse = list(unique)
    worse[i], worse[j] = worse[j], worse[i]
    assert ndcg_at_k(worse, relevance, k) < ndcg_at_k(unique, relevance, k)
    assert ndcg_at_k(worse, relevance, k) < 1.0


@SETTINGS
@given(rankings, binary_relevance, cutoffs)
def test_binary_set_equals_grade_one(ranking, relevant, k):
    as_dict = dict.fromkeys(relevant, 1)
    expected = scores(ALL, ranking, as_dict, k)
    assert scores(ALL, ranking, relevant, k) == expected
    assert scores(ALL, ranking, set(relevant), k) == expected
    assert scores(ALL, ranking, sorted(relevant), k) == expected
    assert scores(ALL, ranking, tuple(relevant), k) == expected
    assert as_grades(relevant) == as_dict


@SETTINGS
@given(rankings, labelled_relevance, cutoffs)
def test_grades_do_not_matter_except_for_ndcg(ranking, relevance, k):
    binary = positives(relevance)
    graded = scores(ALL, ranking, relevance, k)
    flat = scores(ALL, ranking, binary, k)
    for name in ALL:
        if name != "ndcg":
            assert graded[name] == flat[name], name


@SETTINGS
@given(rankings, labelled_relevance, cutoffs, st.integers(2, 5))
def test_ndcg_is_scale_invariant(ranking, relevance, k, factor):
    scaled = {d: g * factor for d, g in relevance.items()}
    expected = ndcg_at_k(ranking, relevance, k)
    assert ndcg_at_k(ranking, scaled, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("k", [0, -1, True, False, 1.5, "1", None, 2.0])
@pytest.mark.parametrize("name", ["hit", "recall", "precision", "ndcg", "rr@k"])
def test_invalid_k_raises(name, k):
    if name == "rr@k" and k is None:
        assert reciprocal_rank(["a"], {"a": 1}, None) == 1.0  # no cut-off is allowed here
        return
    with pytest.raises(ValueError):
        AT_K[name](["a", "b"], {"a": 1}, k)
    # Also when the query is unlabelled: k is checked first.
    with pytest.raises(ValueError):
        AT_K[name](["a", "b"], {}, k)


BAD_GRADES = [-1, -0.5, float("nan"), float("inf"), -float("inf"), True, "1", None]


@pytest.mark.parametrize("bad", BAD_GRADES)
@pytest.mark.parametrize("name", sorted(ALL))
def test_invalid_grade_raises(name, bad):
    with pytest.raises(ValueError):
        ALL[name](["a", "b"], {"a": 1, "b": bad}, 3)
    with pytest.raises(ValueError):
        ALL[name](["a", "b"], {"b": bad, "a": 2}, 3)


@pytest.mark.parametrize("name", sorted(ALL))
def test_string_relevance_raises(name):
    with pytest.raises(ValueError):
        ALL[name](["a", "b"], "ab", 3)


def test_worked_example():
    ranking = ["c", "z", "a", "c", "b"]
    relevance = {"a": 2, "b": 0, "c": 1, "e": 3}
    assert hit_at_k(ranking, relevance, 1) == 1.0
    assert reciprocal_rank(ranking, relevance) == 1.0
    assert recall_at_k(ranking, relevance, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranking, relevance, 3) == pytest.approx(2 / 3)
    assert precision_at_k(ranking, relevance, 5) == pytest.approx(2 / 5)
    dcg = 1 / math.log2(2) + 2 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(ranking, relevance, 3) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(ranking, relevance, 1) == pytest.approx(1 / 3)
    assert reciprocal_rank(["z", "a"], relevance) == 0.5
    assert reciprocal_rank(["z", "a"], relevance, 1) == 0.0


# --------------------------------------------------------------------------------------------
# Batch API
# --------------------------------------------------------------------------------------------

KS = st.lists(st.integers(1, 25), min_size=1, max_size=5)
"""Cut-offs for a batch: unsorted, with repeats."""

relevances = st.one_of(
    graded_relevance, labelled_relevance, unlabelled_relevance, binary_relevance,
    binary_relevance.map(sorted),
)
"""Any relevance a query may come with: graded, binary set or list, labelled or not."""

batches = st.lists(st.tuples(rankings, relevances), max_size=12)


def per_query_expected(ranking: Any, relevance: Any, key: str) -> float | None:
    if key == "mrr":
        return reciprocal_rank(ranking, relevance)
    name, k = key.split("@")
    fn = {
        "hit_rate": hit_at_k,
        "recall": recall_at_k,
        "precision": precision_at_k,
        "ndcg": ndcg_at_k,
    }[name]
    return fn(ranking, relevance, int(k))


def assert_batch_matches_per_query(result: batch.BatchScores, qs: list, ks: list[int]) -> None:
    expected_labelled = [relevant_count(rel) > 0 for _, rel in qs]
    assert result.labelled.dtype == np.bool_
    assert result.labelled.tolist() == expected_labelled
    assert result.queries == sum(expected_labelled)
    assert result.unlabelled == len(qs) - sum(expected_labelled)
    assert result.ks == tuple(sorted(set(ks)))
    assert list(result.values) == metric_keys(ks)
    for key, values in result.values.items():
        assert values.dtype == np.float64
        assert values.shape == (result.queries,)
        expected = [per_query_expected(r, rel, key) for r, rel in qs]
        assert [e is None for e in expected] == [not lab for lab in expected_labelled]
        scored = [e for e in expected if e is not None]
        np.testing.assert_allclose(values, scored, rtol=0, atol=1e-12, err_msg=key)


@FEW
@given(batches, KS)
def test_batch_equals_per_query(qs, ks):
    result = score_queries([r for r, _ in qs], [rel for _, rel in qs], ks)
    assert_batch_matches_per_query(result, qs, ks)
    means = result.means()
    assert list(means) == metric_keys(ks)
    for key, mean in means.items():
        if result.queries == 0:
            assert mean is None
        else:
            assert mean == pytest.approx(float(np.mean(result.values[key])), abs=1e-12)
            assert 0.0 <= mean <= 1.0 + 1e-12


@FEW
@given(st.lists(st.tuples(rankings, relevances), max_size=30), KS)
def test_batch_chunking_does_not_change_results(qs, ks):
    rs, rels = [r for r, _ in qs], [rel for _, rel in qs]
    default = score_queries(rs, rels, ks)
    for chunk in (1, 2, 3, 7, len(qs) + 1):
        chunked = score_queries(rs, rels, ks, chunk=chunk)
        assert chunked.ks == default.ks
        np.testing.assert_array_equal(chunked.labelled, default.labelled)
        assert list(chunked.values) == list(default.values)
        for key in default.values:
            np.testing.assert_array_equal(chunked.values[key], default.values[key], err_msg=key)


@FEW
@given(batches, KS)
def test_encode_then_score_equals_score_queries(qs, ks):
    rs, rels = [r for r, _ in qs], [rel for _, rel in qs]
    depth = max(ks)
    encoded = encode(rs, rels, depth + 3)  # deeper than needed is fine
    direct = score_queries(rs, rels, ks)
    via = score_encoded(encoded, ks)
    assert via.ks == direct.ks == tuple(sorted(set(ks)))
    np.testing.assert_array_equal(via.labelled, direct.labelled)
    for key in direct.values:
        np.testing.assert_allclose(via.values[key], direct.values[key], rtol=0, atol=1e-12)
    assert encoded.depth == depth + 3
    assert encoded.gains.shape[0] == len(qs) and encoded.gains.shape[1] <= depth + 3
    assert encoded.num_relevant.tolist() == [relevant_count(rel) for rel in rels]
    with pytest.raises(ValueError):
        score_encoded(encoded, [depth + 4])


@FEW
@given(batches, KS, st.randoms(use_true_random=False))
def test_batch_is_per_query_independent(qs, ks, rnd):
    # Shuffling the queries shuffles the scores the same way (no cross-query leakage).
    order = list(range(len(qs)))
    rnd.shuffle(order)
    shuffled = [qs[i] for i in order]
    result = score_queries([r for r, _ in shuffled], [rel for _, rel in shuffled], ks)
    assert_batch_matches_per_query(result, shuffled, ks)


@FEW
@given(batches, KS)
def test_batch_duplicates_and_label_order(qs, ks):
    rs, rels = [r for r, _ in qs], [rel for _, rel in qs]
    base = score_queries(rs, rels, ks)
    doubled = score_queries([r + r[::-1] + r for r in rs], rels, ks)
    reversed_labels = score_queries(
        rs,
        [dict(reversed(list(rel.items()))) if isinstance(rel, dict) else rel for rel in rels],
        ks,
    )
    for other in (doubled, reversed_labels):
        np.testing.assert_array_equal(other.labelled, base.labelled)
        for key in base.values:
            np.testing.assert_array_equal(other.values[key], base.values[key], err_msg=key)


@SETTINGS
@given(st.lists(st.integers(1, 200), max_size=6))
def test_metric_keys_order(ks):
    keys = metric_keys(ks)
    ordered = sorted(set(ks))
    expected = []
    for name in METRICS:
        if name == "mrr":
            expected.append("mrr")
        else:
            expected.extend(f"{name}@{k}" for k in ordered)
    assert keys == expected
    assert len(keys) == len(set(keys))


def test_metric_keys_literal():
    assert METRICS == ("hit_rate", "mrr", "recall", "precision", "ndcg")
    assert metric_keys([10, 1, 5, 1]) == [
        "hit_rate@1", "hit_rate@5", "hit_rate@10",
        "mrr",
        "recall@1", "recall@5", "recall@10",
        "precision@1", "precision@5", "precision@10",
        "ndcg@1", "ndcg@5", "ndcg@10",
    ]
    assert metric_keys([]) == ["mrr"]
    assert list(score_queries([["a"]], [{"a": 1}], (3, 1)).values) == metric_keys([1, 3])


def test_batch_empty_inputs():
    result = score_queries([], [], (1, 5))
    assert result.queries == 0 and result.unlabelled == 0
    assert list(result.values) == metric_keys([1, 5])
    assert all(v.shape == (0,) for v in result.values.values())
    assert all(m is None for m in result.means().values())
    only_unlabelled = score_queries([["a"], []], [{"a": 0}, set()], (1,))
    assert only_unlabelled.queries == 0 and only_unlabelled.unlabelled == 2
    assert all(m is None for m in only_unlabelled.means().values())
    no_cutoffs = score_queries([["x", "a"]], [{"a": 3}], ())
    assert list(no_cutoffs.values) == ["mrr"]
    assert no_cutoffs.values["mrr"].tolist() == [0.5]


def test_batch_accepts_numpy_integer_cutoffs():
    result = score_queries([["x", "a"]], [{"a": 1}], (np.int64(1), np.int32(2)))
    assert list(result.values) == metric_keys([1, 2])
    assert result.values["hit_rate@2"].tolist() == [1.0]


@pytest.mark.parametrize("k", [0, -1, True, False, 1.5, "1", None])
def test_batch_invalid_k_raises(k):
    with pytest.raises(ValueError):
        score_queries([["a"]], [{"a": 1}], (k,))
    with pytest.raises(ValueError):
        score_queries([], [], (k,))
    with pytest.raises(ValueError):
        score_encoded(encode([["a"]], [{"a": 1}], 3), (k,))
    if not isinstance(k, str) and k is not None:
        with pytest.raises(ValueError):
            score_queries([["a"]], [{"a": 1}], (3, k))


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), -float("inf")])
def test_batch_invalid_grade_raises(bad):
    for rel in ({"a": 1, "b": bad}, {"b": bad, "a": 1}, {"b": bad}):
        with pytest.raises(ValueError):
            score_queries([["a", "b"]], [rel], (1, 2))
        with pytest.raises(ValueError):
            encode([["a", "b"]], [rel], 2)
        # Also when the bad label is not retrieved, and behind a valid query.
        with pytest.raises(ValueError):
            score_queries([["a"], ["c"]], [{"a": 1}, rel], (1, 2), chunk=1)


@pytest.mark.parametrize("grade", [True, np.bool_(True), np.int64(1), np.float32(1.0), "1", None],
                         ids=["bool", "np.bool_", "np.int64", "np.float32", "str", "None"])
def test_batch_and_per_query_refuse_the_same_grades(grade: Any) -> None:
    """A grade ``as_grades`` refuses is refused by the batch path too, not scored there."""
    with pytest.raises(ValueError, match="is not a number"):
        hit_at_k(["a"], {"a": grade, "b": 0}, 1)
    with pytest.raises(ValueError, match="is not a number"):
        score_queries([["a"]], [{"a": grade, "b": 0}], (1,))
    with pytest.raises(ValueError, match="is not a number"):
        encode([["a"]], [{"a": grade, "b": 0}], 1)


def test_batch_and_per_query_accept_the_same_grades() -> None:
    """Float subclasses (``np.float64``) are grades on both paths, with equal scores."""
    relevance = {"a": np.float64(2.0), "b": 1}
    assert score_queries([["b", "a"]], [relevance], (2,)).values["ndcg@2"][0] == pytest.approx(
        ndcg_at_k(["b", "a"], relevance, 2), abs=1e-12)


def test_batch_length_mismatch_raises():
    with pytest.raises(ValueError, match="^2 rankings but 1 relevance entries$"):
        score_queries([["a"], ["b"]], [{"a": 1}], (1,))
    with pytest.raises(ValueError, match="^1 rankings but 0 relevance entries$"):
        encode([["a"]], [], 1)


def test_batch_errors_name_the_bad_cut_off() -> None:
    """The public batch API says which k is wrong and why."""
    with pytest.raises(ValueError, match=r"^k must be an integer >= 1, got 0$"):
        score_queries([["a"]], [{"a": 1}], (3, 0))
    with pytest.raises(ValueError, match=r"^k=5 is deeper than the encoded depth 3$"):
        score_encoded(encode([["a"]], [{"a": 1}], 3), (1, 5))


def test_encoded_arrays_have_the_documented_types_and_shapes() -> None:
    """``Encoded``: float64 gains, int64 ranks and counts; an empty batch is empty arrays."""
    encoded = encode([["x", "a", "b"], ["c"]], [{"a": 2, "b": 1}, set()], 2)
    assert encoded.gains.dtype == encoded.ideal.dtype == np.float64
    assert encoded.first_relevant.dtype == encoded.num_relevant.dtype == np.int64
    assert encoded.gains.tolist() == [[0.0, 2.0], [0.0, 0.0]]
    assert encoded.ideal.tolist() == [[2.0, 1.0], [0.0, 0.0]]
    assert encoded.first_relevant.tolist() == [2, 0]
    assert encoded.num_relevant.tolist() == [2, 0]
    empty = encode([], [], 3)
    assert empty.gains.shape == empty.ideal.shape == (0, 0)
    assert empty.first_relevant.shape == empty.num_relevant.shape == (0,)


# --------------------------------------------------------------------------------------------
# Compat wrappers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    id: Any
    text: str = ""


def _as_mapping(doc: Any) -> dict[str, Any]:
    return {"id": doc, "text": f"text of {doc}", "score": 0.5}


WRAPPERS = {
    "ids": lambda ids: list(ids),
    "tuple": lambda ids: tuple(ids),
    "generator": lambda ids: (d for d in ids),
    "mappings": lambda ids: [_as_mapping(d) for d in ids],
    "dataclass": lambda ids: [Chunk(d) for d in ids],
    "namespace": lambda ids: [SimpleNamespace(id=d, page_content="") for d in ids],
    "mixed": lambda ids: [
        (d, _as_mapping(d), Chunk(d), SimpleNamespace(id=d))[i % 4] for i, d in enumerate(ids)
    ],
}


@SETTINGS
@given(rankings, st.one_of(graded_relevance, binary_relevance), cutoffs, st.booleans())
def test_compat_wrappers_agree_with_core(ranking, relevance, k, int_ids):
    if int_ids:  # integer ids are ids too, not objects
        ranking = [DOC_IDS.index(d) for d in ranking]
        relevance = (
            {DOC_IDS.index(d): g for d, g in relevance.items()}
            if isinstance(relevance, dict)
            else frozenset(DOC_IDS.index(d) for d in relevance)
        )
    expected = {
        "hit": hit_at_k(ranking, relevance, k),
        "mrr": reciprocal_rank(ranking, relevance),
        "recall": recall_at_k(ranking, relevance, k),
        "precision": precision_at_k(ranking, relevance, k),
        "ndcg": ndcg_at_k(ranking, relevance, k),
    }
    for label, wrap in WRAPPERS.items():
        got = {
            "hit": compat.hit_rate(wrap(ranking), relevance, k),
            "mrr": compat.mean_reciprocal_rank(wrap(ranking), relevance),
            "recall": compat.recall_at_k(wrap(ranking), relevance, k),
            "precision": compat.precision_at_k(wrap(ranking), relevance, k),
            "ndcg": compat.ndcg_at_k(wrap(ranking), relevance, k),
        }
        assert got == expected, label


def test_compat_is_reexported_and_has_tutorial_semantics():
    from ragmon import metrics

    assert metrics.hit_rate is compat.hit_rate
    assert metrics.mean_reciprocal_rank is compat.mean_reciprocal_rank
    results = [{"id": "a"}, {"id": "a"}, {"id": "b"}]
    # Duplicates count once: 1 relevant in the top 2 unique documents out of 2 relevant.
    assert compat.recall_at_k(results, {"a", "c"}, 2) == 0.5
    assert compat.precision_at_k(results, {"a", "c"}, 2) == 0.5
    # No relevant document: None, not 0.
    assert compat.hit_rate(results, set(), 3) is None
    assert compat.mean_reciprocal_rank(results, {"a": 0}) is None
    with pytest.raises(ValueError):
        compat.hit_rate(results, {"a"}, 0)
    with pytest.raises(ValueError):
        compat.ndcg_at_k(results, {"a": -1}, 1)
