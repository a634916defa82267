"""``ragmon compare`` through the console script, and the paired statistics of ``ragmon.offline.stats``."""

from __future__ import annotations

import inspect
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
from cli_helpers import ragmon, run_json, write_jsonl

from ragmon.offline import stats
from ragmon.offline.stats import bootstrap_ci, randomization_p_values

# scipy < 1.15 takes random_state= instead of rng=
_SCIPY_RNG = "rng" if "rng" in inspect.signature(scipy.stats.bootstrap).parameters else "random_state"


def compare_json(*args: str | Path) -> dict[str, Any]:
    return run_json("compare", *args)


def exact_sign_flip_p(diffs: np.ndarray) -> np.ndarray:
    """Two-sided p of the paired sign-flip test by enumerating all 2^n sign vectors."""
    n = diffs.shape[0]
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0
    observed = np.abs(diffs.sum(axis=0))
    flipped = np.abs(signs @ diffs)
    return np.mean(flipped >= observed - 1e-9 * np.maximum(1.0, observed), axis=0)


# --------------------------------------------------------------------------------------------
# compare through the CLI

RUN_A = [
    # q1: relevant d2 at rank 2 -> RR 1/2, nothing at rank 1.
    {"query_id": "q1", "retrieved_document_ids": ["d1", "d2"], "relevant_document_ids": ["d2"]},
    # q2: RR 1.
    {"query_id": "q2", "retrieved_document_ids": ["e1"], "relevant_document_ids": ["e1"]},
    # q3: relevant at rank 3 -> RR 1/3.
    {"query_id": "q3", "retrieved_document_ids": ["f1", "f2", "f3"], "relevant_document_ids": ["f3"]},
    # No query_id: paired with B by normalized text. RR 1.
    {"query": "How  Are You?", "retrieved_document_ids": ["g1"], "relevant_document_ids": ["g1"]},
    # Only in A.
    {"query_id": "qa_only", "retrieved_document_ids": ["h1"], "relevant_document_ids": ["h1"]},
    # Unlabelled in A (labelled in B): left out.
    {"query_id": "q_unl", "retrieved_document_ids": ["u1"]},
    # Labelled in A, unlabelled (only grade 0) in B: left out.
    {"query_id": "q_unl2", "retrieved_document_ids": ["u1"], "relevant_document_ids": ["u1"]},
]
RUN_B = [  # a different order on purpose: pairing is by key, not by position
    {"query_id": "q_unl2", "retrieved_document_ids": ["u1"], "relevance": {"u1": 0}},
    {"query_id": "qb_only", "retrieved_document_ids": ["h1"], "relevant_document_ids": ["h1"]},
    # q3: RR 1.
    {"query_id": "q3", "retrieved_document_ids": ["f3"], "relevant_document_ids": ["f3"]},
    # q2: RR 1/2.
    {"query_id": "q2", "retrieved_document_ids": ["x", "e1"], "relevant_document_ids": ["e1"]},
    {"query_id": "q_unl", "retrieved_document_ids": ["u1"], "relevant_document_ids": ["u1"]},
    # same text as A's, other case/whitespace: RR 1/2.
    {"query": "how are you?", "retrieved_document_ids": ["g2", "g1"], "relevant_document_ids": ["g1"]},
    # q1: RR 1.
    {"query_id": "q1", "retrieved_document_ids": ["d2", "d1"], "relevant_document_ids": ["d2"]},
]


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return write_jsonl(tmp_path / "run_a.jsonl", RUN_A), write_jsonl(tmp_path / "run_b.jsonl", RUN_B)


def test_means_and_differences_on_common_queries(runs: tuple[Path, Path]) -> None:
    a, b = runs
    out = compare_json(a, b, "--k", "1,3", "--resamples", "20000", "--seed", "7")
    assert out["a"] == str(a) and out["b"] == str(b)
    assert out["common_queries"] == 4  # q1, q2, q3 and "how are you?"
    assert out["only_in_a"] == ["qa_only"]
    assert out["only_in_b"] == ["qb_only"]
    assert out["unlabelled"] == ["q_unl", "q_unl2"]
    assert out["resamples"] == 20000 and out["seed"] == 7
    metrics = out["metrics"]
    assert list(metrics) == ["hit_rate@1", "hit_rate@3", "mrr", "recall@1", "recall@3",
                             "precision@1", "precision@3", "ndcg@1", "ndcg@3"]
    # Reciprocal ranks on the common queries (q1, q2, q3, how-are-you):
    rr_a = [1 / 2, 1, 1 / 3, 1]
    rr_b = [1, 1 / 2, 1, 1 / 2]
    mrr = metrics["mrr"]
    assert mrr["a"] == pytest.approx(17 / 24)  # (1/2 + 1 + 1/3 + 1) / 4
    assert mrr["b"] == pytest.approx(18 / 24)  # (1 + 1/2 + 1 + 1/2) / 4
    assert mrr["diff"] == pytest.approx(1 / 24)
    # The p-value is a Monte Carlo estimate of the exact sign-flip p over 2^4 patterns.
    diffs = np.array([[y - x] for x, y in zip(rr_a, rr_b)])
    exact = float(exact_sign_flip_p(diffs)[0])
    assert abs(mrr["p_value"] - exact) <= 3 * math.sqrt(exact * (1 - exact) / 20000) + 1e-4
    low, high = mrr["ci95"]
    assert min(d[0] for d in diffs) <= low <= mrr["diff"] <= high <= max(d[0] for d in diffs)
    # @1 every metric is 1 when the relevant document is first, else 0 (one relevant document each):
    # A = 0, 1, 0, 1 and B = 1, 0, 1, 0 -> both 1/2, difference 0 (but not identical per query).
    for key in ("hit_rate@1", "recall@1", "precision@1", "ndcg@1"):
        assert metrics[key]["a"] == pytest.approx(0.5)
        assert metrics[key]["b"] == pytest.approx(0.5)
        assert metrics[key]["diff"] == pytest.approx(0.0)
        assert metrics[key]["p_value"] == 1.0  # |mean| of any resample >= 0
        low, high = metrics[key]["ci95"]
        assert -1 <= low < 0 < high <= 1
    # @3 every query finds its relevant document in both runs: no difference at all.
    for key in ("hit_rate@3", "recall@3"):
        assert metrics[key] == {"a": 1.0, "b": 1.0, "diff": 0.0, "p_value": 1.0, "ci95": [0.0, 0.0]}
    assert metrics["precision@3"]["a"] == pytest.approx(1 / 3)
    # ndcg@3: A = 1/log2(3), 1, 1/log2(4), 1; B = 1, 1/log2(3), 1, 1/log2(3).
    ndcg_a = [1 / math.log2(3), 1, 1 / 2, 1]
    ndcg_b = [1, 1 / math.log2(3), 1, 1 / math.log2(3)]
    assert metrics["ndcg@3"]["a"] == pytest.approx(sum(ndcg_a) / 4)
    assert metrics["ndcg@3"]["b"] == pytest.approx(sum(ndcg_b) / 4)
    assert metrics["ndcg@3"]["diff"] == pytest.approx((sum(ndcg_b) - sum(ndcg_a)) / 4)


def test_swapping_a_and_b_negates_the_difference(runs: tuple[Path, Path]) -> None:
    a, b = runs
    ab = compare_json(a, b, "--k", "1", "--resamples", "2000")
    ba = compare_json(b, a, "--k", "1", "--resamples", "2000")
    assert ba["only_in_a"] == ["qb_only"] and ba["only_in_b"] == ["qa_only"]
    assert ba["common_queries"] == 4
    for key, m in ab["metrics"].items():
        assert ba["metrics"][key]["a"] == pytest.approx(m["b"])
        assert ba["metrics"][key]["diff"] == pytest.approx(-m["diff"])


def test_qrels_label_the_queries_of_both_runs(runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = runs
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q_unl 0 u1 1\nq_unl2 0 u1 1\n", encoding="utf-8")
    out = compare_json(a, b, "--k", "1", "--qrels", qrels, "--resamples", "1000")
    assert out["common_queries"] == 6
    assert out["unlabelled"] == []
    # both new queries have RR 1 in both runs: (17/24 * 4 + 2) / 6 and (18/24 * 4 + 2) / 6
    assert out["metrics"]["mrr"]["a"] == pytest.approx((17 / 6 + 2) / 6)
    assert out["metrics"]["mrr"]["b"] == pytest.approx((3 + 2) / 6)


def test_no_common_labelled_query(tmp_path: Path) -> None:
    row = {"retrieved_document_ids": ["1"], "relevant_document_ids": ["1"]}
    a = write_jsonl(tmp_path / "a.jsonl", [{"query_id": "x", **row}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"query_id": "y", **row}])
    out = compare_json(a, b, "--k", "1")
    assert out["common_queries"] == 0
    assert out["only_in_a"] == ["x"] and out["only_in_b"] == ["y"]
    for m in out["metrics"].values():
        assert m == {"a": None, "b": None, "diff": None, "p_value": None, "ci95": None}


def _random_runs(tmp_path: Path, n: int = 40) -> tuple[Path, Path]:
    """Two runs of n queries; B is better than A (on about half the queries it ranks perfectly)."""
    rnd = random.Random(1234)
    rows_a, rows_b = [], []
    for i in range(n):
        docs = [f"d{j}" for j in range(8)]
        relevant = rnd.sample(docs, rnd.randint(1, 3))
        ranking_a = rnd.sample(docs, 6)
        perfect = relevant + [d for d in ranking_a if d not in relevant]
        ranking_b = perfect[:6] if rnd.random() < 0.5 else ranking_a
        labels = {"relevant_document_ids": relevant}
        rows_a.append({"query_id": f"q{i}", "retrieved_document_ids": ranking_a, **labels})
        rows_b.append({"query_id": f"q{i}", "retrieved_document_ids": ranking_b, **labels})
    return write_jsonl(tmp_path / "ra.jsonl", rows_a), write_jsonl(tmp_path / "rb.jsonl", rows_b)


def test_same_seed_same_output_other_seed_close(tmp_path: Path) -> None:
    a, b = _random_runs(tmp_path)
    args = (a, b, "--k", "1,3,5", "--resamples", "5000")
    first = ragmon("compare", *args, "--seed", "11", "--format", "json")
    second = ragmon("compare", *args, "--seed", "11", "--format", "json")
    other = ragmon("compare", *args, "--seed", "12", "--format", "json")
    assert first.returncode == second.returncode == other.returncode == 0
    assert first.stdout == second.stdout  # byte for byte
    x, y = json.loads(first.stdout), json.loads(other.stdout)
    assert x["common_queries"] == y["common_queries"] == 40
    differs = False
    for key, m in x["metrics"].items():
        n = y["metrics"][key]
        assert (m["a"], m["b"], m["diff"]) == (n["a"], n["b"], n["diff"])  # no randomness there
        # With 5000 resamples a p-value's standard error is at most 0.5/sqrt(5000) ~ 0.007.
        assert abs(m["p_value"] - n["p_value"]) < 0.05, key
        spread = m["ci95"][1] - m["ci95"][0]
        assert abs(m["ci95"][0] - n["ci95"][0]) <= 0.1 * spread + 1e-12, key
        assert abs(m["ci95"][1] - n["ci95"][1]) <= 0.1 * spread + 1e-12, key
        differs |= m["p_value"] != n["p_value"] or m["ci95"] != n["ci95"]
    assert differs  # the seed is actually used
    # B is better on average (built so); at least one metric is clearly significant.
    assert x["metrics"]["mrr"]["diff"] > 0
    assert min(m["p_value"] for m in x["metrics"].values()) < 0.05


def test_identical_runs(tmp_path: Path) -> None:
    a, _ = _random_runs(tmp_path)
    out = compare_json(a, a, "--resamples", "500")
    assert out["common_queries"] == 40 and out["only_in_a"] == [] == out["only_in_b"]
    for key, m in out["metrics"].items():
        assert m["a"] == m["b"], key
        assert m["diff"] == 0.0
        assert m["p_value"] == 1.0
        assert m["ci95"] == [0.0, 0.0]


def test_table_and_markdown_output(runs: tuple[Path, Path]) -> None:
    a, b = runs
    table = ragmon("compare", a, b, "--k", "1", "--resamples", "500")
    assert table.returncode == 0 and table.stderr == ""
    assert "only in A (1): qa_only" in table.stdout
    assert "only in B (1): qb_only" in table.stdout
    assert "left out (2): q_unl, q_unl2" in table.stdout
    assert "4 common labelled queries" in table.stdout
    mrr_row = next(line for line in table.stdout.splitlines() if line.startswith("mrr"))
    assert "0.7083" in mrr_row and "0.7500" in mrr_row and "+0.0417" in mrr_row
    markdown = ragmon("compare", a, b, "--k", "1", "--resamples", "500", "--format", "markdown")
    assert markdown.returncode == 0
    assert "| mrr | 0.7083 | 0.7500 | +0.0417 |" in markdown.stdout
    assert "- only in A (1): qa_only" in markdown.stdout


# --------------------------------------------------------------------------------------------
# ragmon.offline.stats


@pytest.mark.parametrize("n", [10, 11, 12])
def test_randomization_matches_exact_enumeration(n: int) -> None:
    data_rng = np.random.default_rng(100 + n)
    # Integer-valued differences (exact sums, ties possible) with a shift per column so the
    # exact p-values range from small to large.
    diffs = data_rng.integers(-3, 4, size=(n, 4)).astype(np.float64) + np.array([0.0, 0.5, 1.0, 2.0])
    diffs[:, 0] = np.array([3, -3, 2, -2, 1, -1, 3, -3, 2, -2, 1, -1][:n], dtype=np.float64)  # mean 0 or near
    exact = exact_sign_flip_p(diffs)
    resamples = 40_000
    p = randomization_p_values(diffs, resamples, np.random.default_rng(n))
    assert p.shape == (4,)
    for j in range(4):
        se = math.sqrt(exact[j] * (1 - exact[j]) / resamples)
        assert abs(p[j] - exact[j]) <= 3 * se + 1 / (resamples + 1), (j, p[j], exact[j])
    assert 0.0 < exact.min() < 0.5  # the test is not trivial
    assert exact.max() > 0.3


def test_randomization_agrees_with_scipy_permutation_test() -> None:
    data_rng = np.random.default_rng(5)
    for n, effect in [(12, 0.3), (12, 0.0), (40, 0.15)]:
        a = data_rng.uniform(0, 1, size=n)
        b = np.clip(a + effect + data_rng.normal(0, 0.4, size=n), 0, 1)
        ours = randomization_p_values((b - a)[:, None], 20_000, np.random.default_rng(n))[0]
        theirs = scipy.stats.permutation_test(
            (b, a),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=20_000,
            alternative="two-sided",
            **{_SCIPY_RNG: np.random.default_rng(n)},
        ).pvalue
        assert abs(ours - theirs) < 0.025, (n, effect, ours, theirs)


def test_bootstrap_agrees_with_scipy_percentile_bootstrap() -> None:
    data_rng = np.random.default_rng(8)
    diffs = np.column_stack([
        data_rng.normal(0.05, 0.3, size=300),
        data_rng.binomial(1, 0.3, size=300) - data_rng.binomial(1, 0.25, size=300),
        data_rng.exponential(0.2, size=300) - 0.15,
    ]).astype(np.float64)
    low, high = bootstrap_ci(diffs, 20_000, np.random.default_rng(9))
    assert low.shape == high.shape == (3,)
    for j in range(3):
        ref = scipy.stats.bootstrap(
            (diffs[:, j],), np.mean, method="percentile", n_resamples=20_000, confidence_level=0.95,
            **{_SCIPY_RNG: np.random.default_rng(10)},
        ).confidence_interval
        spread = ref.high - ref.low
        assert abs(low[j] - ref.low) < 0.05 * spread, (j, low[j], ref.low)
        assert abs(high[j] - ref.high) < 0.05 * spread, (j, high[j], ref.high)
        # and the normal approximation agrees on the width, roughly
        se = diffs[:, j].std(ddof=1) / math.sqrt(300)
        assert high[j] - low[j] == pytest.approx(2 * 1.96 * se, rel=0.1)


@pytest.mark.parametrize(("n", "cells"), [(13, 13 * 7 + 3), (13, 13 * 2), (13, 13), (10, 75), (7, 1000)])
def test_chunking_does_not_change_results(n: int, cells: int, monkeypatch: pytest.MonkeyPatch) -> None:
    diffs = np.random.default_rng(n).normal(0.1, 1.0, size=(n, 3))
    resamples = 2001

    def both() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(42)  # one generator for both, as compare_runs does
        p = randomization_p_values(diffs, resamples, rng)
        low, high = bootstrap_ci(diffs, resamples, rng)
        return p, low, high

    whole = both()
    assert len(stats._chunks(resamples, n)) == 1
    monkeypatch.setattr(stats, "_CHUNK_CELLS", cells)
    assert len(stats._chunks(resamples, n)) > 10  # really chunked
    assert sum(stats._chunks(resamples, n)) == resamples
    chunked = both()
    # The same draws: identical p-values (counts); the bootstrap means may differ in the last
    # bit because BLAS sums a (1, n) and a (k, n) product in different orders.
    np.testing.assert_array_equal(whole[0], chunked[0])
    np.testing.assert_allclose(whole[1], chunked[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(whole[2], chunked[2], rtol=1e-12, atol=1e-15)


def test_columns_share_draws() -> None:
    diffs = np.random.default_rng(3).normal(0.0, 1.0, size=(25, 4))
    p_all = randomization_p_values(diffs, 3000, np.random.default_rng(1))
    low_all, high_all = bootstrap_ci(diffs, 3000, np.random.default_rng(1))
    for j in range(4):
        column = diffs[:, [j]]
        assert randomization_p_values(column, 3000, np.random.default_rng(1))[0] == p_all[j]
        low, high = bootstrap_ci(column, 3000, np.random.default_rng(1))
        assert low[0] == pytest.approx(low_all[j], abs=1e-12)
        assert high[0] == pytest.approx(high_all[j], abs=1e-12)


def test_same_seed_same_values() -> None:
    diffs = np.random.default_rng(4).normal(0.2, 1.0, size=(30, 2))
    for fn in (randomization_p_values, bootstrap_ci):
        first = fn(diffs, 1000, np.random.default_rng(99))
        second = fn(diffs, 1000, np.random.default_rng(99))
        np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


def test_p_values_never_zero_and_at_most_one() -> None:
    # A huge effect: the exact p is 2 / 2^40, but a finite Monte Carlo test reports 1 / (R + 1).
    strong = np.abs(np.random.default_rng(6).normal(1.0, 0.1, size=(40, 2)))
    p = randomization_p_values(strong, 999, np.random.default_rng(0))
    assert np.all(p > 0)
    np.testing.assert_allclose(p, 1 / 1000)
    # Many random columns: always in (0, 1].
    diffs = np.random.default_rng(7).normal(0.0, 1.0, size=(15, 50))
    for resamples in (1, 2, 10, 500):
        p = randomization_p_values(diffs, resamples, np.random.default_rng(resamples))
        assert np.all((p > 0) & (p <= 1)), resamples
        # p is (1 + count) / (1 + R) for an integer count in [0, R]
        counts = p * (resamples + 1) - 1
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
    # All differences zero: every resample ties the observed mean, p = 1, CI = [0, 0].
    zeros = np.zeros((9, 3))
    np.testing.assert_array_equal(randomization_p_values(zeros, 100, np.random.default_rng(0)), 1.0)
    low, high = bootstrap_ci(zeros, 100, np.random.default_rng(0))
    np.testing.assert_array_equal(low, 0.0)
    np.testing.assert_array_equal(high, 0.0)


def test_single_query() -> None:
    # n = 1: a flip gives exactly -d, whose |mean| ties the observed one: p = 1; the bootstrap
    # can only draw that query: CI = [d, d].
    d = np.array([[0.25, -0.5]])
    np.testing.assert_array_equal(randomization_p_values(d, 50, np.random.default_rng(0)), 1.0)
    low, high = bootstrap_ci(d, 50, np.random.default_rng(0))
    np.testing.assert_allclose(low, [0.25, -0.5])
    np.testing.assert_allclose(high, [0.25, -0.5])


def test_no_queries_gives_nan() -> None:
    empty = np.zeros((0, 3))
    p = randomization_p_values(empty, 100, np.random.default_rng(0))
    assert p.shape == (3,) and np.all(np.isnan(p))
    low, high = bootstrap_ci(empty, 100, np.random.default_rng(0))
    assert low.shape == high.shape == (3,)
    assert np.all(np.isnan(low)) and np.all(np.isnan(high))


def test_confidence_level_argument() -> None:
    diffs = np.random.default_rng(12).normal(0.0, 1.0, size=(50, 1))
    low90, high90 = bootstrap_ci(diffs, 4000, np.random.default_rng(1), level=0.90)
    low95, high95 = bootstrap_ci(diffs, 4000, np.random.default_rng(1), level=0.95)
    assert low95[0] < low90[0] < diffs.mean() < high90[0] < high95[0]
