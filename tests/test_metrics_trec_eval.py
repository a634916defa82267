"""Agreement with trec_eval (through pytrec_eval) on thousands of random graded queries.

trec_eval is the reference for every definition in ``ragmon.metrics``:

=================  =========================  ==================
ragmon per query   ragmon batch key           trec_eval measure
=================  =========================  ==================
hit_at_k           hit_rate@k                 success.k
reciprocal_rank    mrr                        recip_rank
recall_at_k        recall@k                   recall.k
precision_at_k     precision@k                P.k
ndcg_at_k          ndcg@k                     ndcg_cut.k
=================  =========================  ==================

trec_eval orders a run by score (ties broken by docno) and knows nothing of duplicates, so it is
fed the deduplicated ranking with strictly decreasing, distinct scores: its order is then ours.
It scores a query with no relevant document as 0; ragmon returns ``None`` / excludes it, which is
checked separately.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import pytrec_eval
from hypothesis import given
from hypothesis import strategies as st

from ragmon.metrics.batch import metric_keys, score_queries
from ragmon.metrics.retrieval import (
    dedupe,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)
from strategies import FEW, labelled_relevance, rankings, unlabelled_relevance

KS = (1, 2, 3, 5, 10, 20, 50, 100)
TOL = 1e-9
SEED = 20240611
N_QUERIES = 3000

PER_QUERY = {
    "hit_rate": (hit_at_k, "success"),
    "recall": (recall_at_k, "recall"),
    "precision": (precision_at_k, "P"),
    "ndcg": (ndcg_at_k, "ndcg_cut"),
}
"""Our metric name -> (per-query function, trec_eval measure family)."""

MEASURES = {f"{family}.{','.join(map(str, KS))}" for _, family in PER_QUERY.values()} | {
    "recip_rank"
}

Query = tuple[list[str], dict[str, int]]


def trec_key(key: str) -> str:
    """trec_eval's result key for one of our batch keys: ``ndcg@10`` -> ``ndcg_cut_10``."""
    if key == "mrr":
        return "recip_rank"
    name, k = key.split("@")
    return f"{PER_QUERY[name][1]}_{k}"


def per_query_value(key: str, ranking: list[str], labels: dict[str, int]) -> float | None:
    if key == "mrr":
        return reciprocal_rank(ranking, labels)
    name, k = key.split("@")
    return PER_QUERY[name][0](ranking, labels, int(k))


def run_trec_eval(queries: list[Query]) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query results, keyed by query index as a string."""
    qrels = {
        str(i): {str(d): int(g) for d, g in labels.items()}
        for i, (_, labels) in enumerate(queries)
    }
    run = {}
    for i, (ranking, _) in enumerate(queries):
        unique = dedupe(ranking)
        # Strictly decreasing, distinct scores: trec_eval's order equals the list order.
        run[str(i)] = {str(d): float(len(unique) - r) for r, d in enumerate(unique)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, MEASURES)
    return evaluator.evaluate(run)


def random_query(rng: random.Random, labelled: bool) -> Query:
    """A ranking (length 0..60, rarely up to 150, with repeats) and labels over a shared pool.

    Ids come from a per-query pool, so some relevant documents are retrieved, some are not, and
    some retrieved documents are unjudged. Labelled queries have at least one grade > 0; the
    others have only grade 0 or no labels.
    """
    pool_size = rng.choice((3, 8, 20, 60, 150, 250))
    pool = [f"doc{j}" for j in range(pool_size)]
    n_labels = rng.randint(0, min(pool_size, 200))
    labelled_docs = rng.sample(pool, n_labels)
    if labelled:
        grade_weights = rng.choice(((1, 1, 1, 1), (6, 1, 1, 1), (1, 3, 0, 0), (2, 1, 1, 2)))
        labels = {d: rng.choices(range(4), weights=grade_weights)[0] for d in labelled_docs}
        if not any(g > 0 for g in labels.values()):
            labels[rng.choice(pool)] = rng.randint(1, 3)
    else:
        labels = {d: 0 for d in labelled_docs}
    length = rng.randint(0, 60) if rng.random() < 0.9 else rng.randint(61, 150)
    if rng.random() < 0.5:
        ranking = [rng.choice(pool) for _ in range(length)]  # with replacement: repeats
    else:
        ranking = rng.sample(pool, min(length, pool_size))
    if labelled and labels and rng.random() < 0.3:
        # Make sure relevant documents often appear near the top too.
        relevant = [d for d, g in labels.items() if g > 0]
        for d in rng.sample(relevant, min(len(relevant), rng.randint(1, 5))):
            ranking.insert(rng.randint(0, min(len(ranking), 10)), d)
    return ranking, labels


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Query], list[Query]]:
    """(labelled, unlabelled) random queries from a fixed seed."""
    rng = random.Random(SEED)
    labelled = [random_query(rng, labelled=True) for _ in range(N_QUERIES)]
    unlabelled = [random_query(rng, labelled=False) for _ in range(N_QUERIES // 20)]
    return labelled, unlabelled


@pytest.fixture(scope="module")
def reference(corpus) -> dict[str, dict[str, float]]:
    return run_trec_eval(corpus[0])


def test_corpus_covers_the_interesting_cases(corpus):
    labelled, _ = corpus
    with_repeats = sum(len(set(r)) < len(r) for r, _ in labelled)
    empty = sum(not r for r, _ in labelled)
    missed = sum(
        any(g > 0 and d not in set(r) for d, g in labels.items()) for r, labels in labelled
    )
    found = sum(any(labels.get(d, 0) > 0 for d in r) for r, labels in labelled)
    none_found = sum(not any(labels.get(d, 0) > 0 for d in r) for r, labels in labelled)
    many_relevant = sum(sum(g > 0 for g in labels.values()) > 100 for _, labels in labelled)
    long_lists = sum(len(dedupe(r)) > 100 for r, _ in labelled)
    multi_grade = sum(len({g for g in labels.values() if g > 0}) > 1 for _, labels in labelled)
    counts = (with_repeats, empty, missed, found, none_found, many_relevant, long_lists)
    counts += (multi_grade,)
    assert min(counts) >= 10, counts


def test_per_query_functions_agree_with_trec_eval(corpus, reference):
    labelled, _ = corpus
    assert len(reference) == len(labelled)
    keys = metric_keys(KS)
    for i, (ranking, labels) in enumerate(labelled):
        expected = reference[str(i)]
        for key in keys:
            ours = per_query_value(key, ranking, labels)
            assert ours is not None
            assert ours == pytest.approx(expected[trec_key(key)], rel=0, abs=TOL), (i, key)


def test_batch_agrees_with_trec_eval(corpus, reference):
    labelled, unlabelled = corpus
    # Interleave the unlabelled queries: they must be excluded without shifting the others.
    mixed: list[Query] = []
    labelled_positions = []
    for i, query in enumerate(labelled):
        if i % 20 == 7 and i // 20 < len(unlabelled):
            mixed.append(unlabelled[i // 20])
        labelled_positions.append(len(mixed))
        mixed.append(query)
    result = score_queries([r for r, _ in mixed], [labels for _, labels in mixed], KS, chunk=977)
    assert result.unlabelled == len(mixed) - len(labelled)
    assert result.queries == len(labelled)
    assert np.flatnonzero(result.labelled).tolist() == labelled_positions
    assert list(result.values) == metric_keys(KS)
    for key, values in result.values.items():
        expected = np.array([reference[str(i)][trec_key(key)] for i in range(len(labelled))])
        np.testing.assert_allclose(values, expected, rtol=0, atol=TOL, err_msg=key)
    means = result.means()
    for key in result.values:
        trec_mean = float(np.mean([reference[str(i)][trec_key(key)] for i in range(len(labelled))]))
        assert means[key] == pytest.approx(trec_mean, rel=0, abs=TOL), key


def test_batch_default_chunk_agrees_with_trec_eval(corpus, reference):
    labelled, _ = corpus
    result = score_queries([r for r, _ in labelled], [labels for _, labels in labelled], KS)
    for key, values in result.values.items():
        expected = np.array([reference[str(i)][trec_key(key)] for i in range(len(labelled))])
        np.testing.assert_allclose(values, expected, rtol=0, atol=TOL, err_msg=key)


def test_unlabelled_queries_are_excluded_not_zero(corpus):
    _, unlabelled = corpus
    assert unlabelled
    for ranking, labels in unlabelled:
        for key in metric_keys(KS):
            assert per_query_value(key, ranking, labels) is None, key
    result = score_queries([r for r, _ in unlabelled], [labels for _, labels in unlabelled], KS)
    assert result.queries == 0
    assert result.unlabelled == len(unlabelled)
    assert all(v.size == 0 for v in result.values.values())
    assert all(m is None for m in result.means().values())
    # trec_eval itself would score such a query 0 on every measure: the number we refuse to make up.
    trec = run_trec_eval([(r, labels) for r, labels in unlabelled if labels][:20])
    assert trec and all(v == 0.0 for q in trec.values() for v in q.values())


def test_binary_relevance_agrees_with_trec_eval(corpus):
    # The same queries with relevance given as a plain set of relevant ids (grade 1 each).
    labelled, _ = corpus
    sample = labelled[:400]
    as_sets = [(r, {d for d, g in labels.items() if g > 0}) for r, labels in sample]
    reference = run_trec_eval([(r, dict.fromkeys(s, 1)) for r, s in as_sets])
    result = score_queries([r for r, _ in as_sets], [s for _, s in as_sets], KS)
    for key, values in result.values.items():
        expected = np.array([reference[str(i)][trec_key(key)] for i in range(len(as_sets))])
        np.testing.assert_allclose(values, expected, rtol=0, atol=TOL, err_msg=key)
        for i, (ranking, relevant) in enumerate(as_sets[:100]):
            ours = per_query_value(key, ranking, relevant)
            assert ours == pytest.approx(expected[i], rel=0, abs=TOL), (i, key)


@FEW
@given(
    st.lists(st.tuples(rankings, labelled_relevance), min_size=1, max_size=8),
    st.lists(st.tuples(rankings, unlabelled_relevance), max_size=2),
)
def test_hypothesis_agreement_with_trec_eval(labelled, unlabelled):
    reference = run_trec_eval(labelled)
    keys = metric_keys(KS)
    for i, (ranking, labels) in enumerate(labelled):
        for key in keys:
            ours = per_query_value(key, ranking, labels)
            assert ours == pytest.approx(reference[str(i)][trec_key(key)], rel=0, abs=TOL), (i, key)
    queries: list[Any] = labelled + unlabelled
    result = score_queries([r for r, _ in queries], [labels for _, labels in queries], KS)
    assert result.queries == len(labelled)
    assert result.unlabelled == len(unlabelled)
    for key, values in result.values.items():
        expected = [reference[str(i)][trec_key(key)] for i in range(len(labelled))]
        np.testing.assert_allclose(values, expected, rtol=0, atol=TOL, err_msg=key)


def test_score_all_equals_the_single_metric_functions() -> None:
    from ragmon.metrics.retrieval import score_all

    rng = random.Random(7)
    ks = (1, 2, 3, 5, 10, 20)
    for _ in range(2000):
        pool = [f"d{i}" for i in range(rng.randint(1, 30))]
        ranking = [rng.choice(pool) for _ in range(rng.randint(0, 25))]
        grades = {rng.choice(pool): rng.randint(0, 3) for _ in range(rng.randint(0, 8))}
        result = score_all(ranking, grades, ks)
        if reciprocal_rank(ranking, grades) is None:
            assert result is None
            continue
        assert result is not None
        rr, per_k = result
        assert rr == reciprocal_rank(ranking, grades)
        for k in ks:
            assert per_k[k] == (
                hit_at_k(ranking, grades, k),
                recall_at_k(ranking, grades, k),
                precision_at_k(ranking, grades, k),
                ndcg_at_k(ranking, grades, k),
            )
