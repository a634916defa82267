"""The judge's agreement with human labels (``ragmon.offline.agreement``): the labels file, the
pairing, and each figure against hand-computed values and against scipy / scikit-learn."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, cohen_kappa_score

from ragmon.errors import InputError
from ragmon.offline import agreement as agreement_module
from ragmon.offline.agreement import (
    LABELLED_METRICS,
    Agreement,
    Confusion,
    HumanLabels,
    Pairs,
    agreement,
    agreement_json,
    pair_scores,
    read_human_labels,
)
from strategies import SETTINGS

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "judge_agreement"


# --- figures, by hand ---------------------------------------------------------------------------


def test_spearman_without_ties_by_hand() -> None:
    # judge ranks 1 2 3 4, human ranks 2 1 4 3: d = -1 1 -1 1, sum d^2 = 4
    # rho = 1 - 6 * 4 / (4 * (16 - 1)) = 1 - 24 / 60 = 0.6
    a = agreement([0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.4, 0.3], binary=False)
    assert a.spearman == pytest.approx(0.6, abs=1e-15)
    assert (a.n, a.kappa, a.accuracy, a.confusion) == (4, None, None, None)


def test_spearman_with_ties_takes_average_ranks() -> None:
    # judge 0.9 0.9 0.2 0.5 -> ranks 3.5 3.5 1 2; human 1 1 0 0 -> ranks 3.5 3.5 1.5 1.5
    # centred on (n + 1) / 2 = 2.5: judge 1 1 -1.5 -0.5, human 1 1 -1 -1
    # sxy = 1 + 1 + 1.5 + 0.5 = 4, sxx = 1 + 1 + 2.25 + 0.25 = 4.5, syy = 4
    # rho = 4 / sqrt(18) = 2 sqrt(2) / 3
    a = agreement([0.9, 0.9, 0.2, 0.5], [1.0, 1.0, 0.0, 0.0], binary=False)
    assert a.spearman == pytest.approx(2 * math.sqrt(2) / 3, abs=1e-15)


def test_binary_figures_by_hand() -> None:
    judge = [0.9, 0.7, 0.4, 0.2, 0.6, 0.1]
    human = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # verdicts at 0.5: 1 1 0 0 1 0 -> tp = 2 (#0, #1), fn = 1 (#2), tn = 2 (#3, #5), fp = 1 (#4)
    # accuracy = 4 / 6; p_e = 3/6 * 3/6 + 3/6 * 3/6 = 1/2; kappa = (2/3 - 1/2) / (1 - 1/2) = 1/3
    # spearman: judge ranks 6 5 3 2 4 1, human ranks 5 5 5 2 2 2; centred on 3.5:
    # judge 2.5 1.5 -0.5 -1.5 0.5 -2.5, human 1.5 1.5 1.5 -1.5 -1.5 -1.5
    # sxy = 1.5 * 3.5 + 1.5 * 3.5 = 10.5, sxx = 17.5, syy = 13.5
    a = agreement(judge, human, binary=True)
    assert a.confusion == Confusion(tp=2, fp=1, fn=1, tn=2)
    assert a.accuracy == pytest.approx(4 / 6, abs=1e-15)
    assert a.kappa == pytest.approx(1 / 3, abs=1e-15)
    assert a.spearman == pytest.approx(10.5 / math.sqrt(17.5 * 13.5), abs=1e-15)
    assert (a.n, a.threshold) == (6, 0.5)


def test_a_score_at_the_threshold_counts_as_one() -> None:
    a = agreement([0.5, 0.49], [1.0, 0.0], binary=True)
    assert a.confusion == Confusion(tp=1, fp=0, fn=0, tn=1)
    b = agreement([0.7, 0.69], [1.0, 0.0], binary=True, threshold=0.7)
    assert b.confusion == Confusion(tp=1, fp=0, fn=0, tn=1)
    assert agreement([0.7, 0.69], [1.0, 0.0], binary=True).confusion == Confusion(tp=1, fp=1, fn=0, tn=0)


def test_kappa_one_zero_and_negative() -> None:
    perfect = agreement([0.9, 0.8, 0.1, 0.3], [1.0, 1.0, 0.0, 0.0], binary=True)
    assert (perfect.kappa, perfect.accuracy) == (1.0, 1.0)
    # judge says 1 throughout, people half and half: p_o = 1/2, p_e = 4/4 * 2/4 + 0 = 1/2 -> 0
    chance = agreement([0.9, 0.8, 0.7, 0.6], [1.0, 0.0, 1.0, 0.0], binary=True)
    assert (chance.kappa, chance.accuracy) == (0.0, 0.5)
    # judge ranks 4 3 2 1, human 3.5 1.5 3.5 1.5; centred 1.5 0.5 -0.5 -1.5 and 1 -1 1 -1:
    # sxy = 2, sxx = 5, syy = 4 -> rho = 2 / sqrt(20) = 1 / sqrt(5)
    assert chance.spearman == pytest.approx(1 / math.sqrt(5), abs=1e-15)
    opposite = agreement([0.9, 0.1, 0.8, 0.2], [0.0, 1.0, 0.0, 1.0], binary=True)
    assert (opposite.kappa, opposite.accuracy) == (-1.0, 0.0)
    # verdicts 1 1 0 0 1 against 0 1 1 1 0: tp 1, fp 2, fn 2, tn 0; p_o = 1/5
    # p_e = 3/5 * 3/5 + 2/5 * 2/5 = 13/25; kappa = (5/25 - 13/25) / (12/25) = -2/3
    worse = agreement([0.9, 0.9, 0.1, 0.1, 0.9], [0.0, 1.0, 1.0, 1.0, 0.0], binary=True)
    assert worse.confusion == Confusion(tp=1, fp=2, fn=2, tn=0)
    assert worse.kappa == pytest.approx(-2 / 3, abs=1e-15)


def test_kappa_is_undefined_when_both_sides_give_one_class() -> None:
    # p_e = 1: no disagreement was possible, kappa = 0 / 0 (never computed: no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = agreement([0.9, 0.8, 0.6], [1.0, 1.0, 1.0], binary=True)
    assert (a.kappa, a.accuracy, a.spearman) == (None, 1.0, None)
    assert a.ci95 == {"spearman": None, "kappa": None, "accuracy": (1.0, 1.0)}
    # one class each, but not the same one: p_e = 0, kappa = (0 - 0) / 1
    b = agreement([0.9, 0.8, 0.6], [0.0, 0.0, 0.0], binary=True)
    assert (b.kappa, b.accuracy) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("judge", "human"),
    [([0.4, 0.4, 0.4], [0.0, 0.5, 1.0]), ([0.1, 0.5, 0.9], [0.7, 0.7, 0.7]), ([0.3], [1.0])],
    ids=["judge-constant", "human-constant", "one-pair"],
)
def test_spearman_is_undefined_on_a_constant_side_or_one_pair(judge: list[float], human: list[float]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0 / 0 is never computed
        a = agreement(judge, human, binary=False)
    assert a.spearman is None
    assert a.ci95["spearman"] is None


def test_no_pairs() -> None:
    assert agreement([], [], binary=True) == Agreement(
        0, None, None, None, 0.5, {"spearman": None, "kappa": None, "accuracy": None}, Confusion(0, 0, 0, 0)
    )
    assert agreement([], [], binary=False).confusion is None


def test_orientation_is_never_flipped() -> None:
    """Toxicity, where higher is worse: a toxic label (1) against a high score agrees."""
    a = agreement([0.95, 0.05, 0.8], [1.0, 0.0, 1.0], binary=True)
    assert (a.confusion, a.kappa) == (Confusion(tp=2, fp=0, fn=0, tn=1), 1.0)
    assert a.spearman == pytest.approx(math.sqrt(3) / 2, abs=1e-15)  # ranks 3 1 2 vs 2.5 1 2.5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"judge": [0.1, 0.2], "human": [1.0]}, "2 judge scores against 1 human labels"),
        ({"judge": [0.1, math.nan], "human": [1.0, 0.0]}, "scores and labels must be finite"),
        ({"judge": [0.1], "human": [0.5], "binary": True}, "binary labels must be 0 or 1"),
        ({"judge": [0.1], "human": [1.0], "threshold": 1.5}, "threshold must be in [0, 1], got 1.5"),
        ({"judge": [0.1], "human": [1.0], "resamples": 0}, "resamples must be at least 1, got 0"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    kwargs.setdefault("binary", False)
    with pytest.raises(ValueError) as info:
        agreement(**kwargs)
    assert str(info.value) == message


# --- figures, against scipy and scikit-learn ----------------------------------------------------

_scores = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.7, 0.9, 1.0])  # ties and the threshold itself


@SETTINGS
@given(st.lists(st.tuples(_scores, st.sampled_from([0.0, 1.0])), min_size=1, max_size=40))
def test_binary_figures_agree_with_scipy_and_sklearn(pairs: list[tuple[float, float]]) -> None:
    judge = [p[0] for p in pairs]
    human = [p[1] for p in pairs]
    a = agreement(judge, human, binary=True, resamples=1)
    verdicts = [1.0 if s >= 0.5 else 0.0 for s in judge]
    assert a.accuracy == pytest.approx(accuracy_score(human, verdicts), abs=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both undefined: scipy and sklearn warn and give NaN
        kappa = cohen_kappa_score(human, verdicts, labels=[0.0, 1.0])
        rho = scipy.stats.spearmanr(judge, human).statistic if len(pairs) > 1 else math.nan
    assert (a.kappa is None) == bool(np.isnan(kappa))
    assert a.kappa is None or a.kappa == pytest.approx(kappa, abs=1e-9)
    assert (a.spearman is None) == bool(np.isnan(rho))
    assert a.spearman is None or a.spearman == pytest.approx(rho, abs=1e-9)
    assert a.confusion is not None
    assert sum((a.confusion.tp, a.confusion.fp, a.confusion.fn, a.confusion.tn)) == len(pairs)
    assert a.confusion.tp + a.confusion.fn == human.count(1.0)
    assert a.confusion.tp + a.confusion.fp == verdicts.count(1.0)


@SETTINGS
@given(st.lists(st.tuples(_scores, _scores), min_size=2, max_size=40))
def test_spearman_agrees_with_scipy_on_graded_labels(pairs: list[tuple[float, float]]) -> None:
    judge = [p[0] for p in pairs]
    human = [p[1] for p in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = scipy.stats.spearmanr(judge, human).statistic
    a = agreement(judge, human, binary=False, resamples=1)
    assert (a.spearman is None) == bool(np.isnan(rho))
    assert a.spearman is None or a.spearman == pytest.approx(rho, abs=1e-9)


# --- the bootstrap ------------------------------------------------------------------------------


def _correlated(n: int, seed: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    human = (rng.random(n) < 0.5).astype(float)
    judge = np.clip(0.25 + 0.5 * human + rng.normal(0.0, 0.25, n), 0.0, 1.0).round(2)
    return judge.tolist(), human.tolist()


def test_the_bootstrap_is_the_percentile_interval_of_resampled_pairs() -> None:
    """The same draws, figured one resample at a time by scipy and scikit-learn."""
    judge, human = _correlated(30, 1)
    a = agreement(judge, human, binary=True, resamples=500, seed=7)
    picks = np.random.default_rng(7).integers(0, 30, size=(500, 30))
    j, h = np.array(judge), np.array(human)
    figures: dict[str, list[float]] = {"spearman": [], "kappa": [], "accuracy": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in picks:
            verdicts = (j[row] >= 0.5).astype(float)
            figures["spearman"].append(scipy.stats.spearmanr(j[row], h[row]).statistic)
            figures["kappa"].append(cohen_kappa_score(h[row], verdicts, labels=[0.0, 1.0]))
            figures["accuracy"].append(accuracy_score(h[row], verdicts))
    for name, values in figures.items():
        defined = np.array(values)[~np.isnan(values)]
        expected = np.quantile(defined, [0.025, 0.975])
        assert a.ci95[name] == pytest.approx(tuple(expected), abs=1e-9), name


def test_undefined_resamples_are_left_out() -> None:
    # two pairs: a resample of one pair twice has a constant side (spearman and kappa undefined);
    # the others hold both pairs and agree perfectly
    a = agreement([0.2, 0.8], [0.0, 1.0], binary=True, resamples=200)
    assert a.ci95 == {"spearman": (1.0, 1.0), "kappa": (1.0, 1.0), "accuracy": (1.0, 1.0)}


def test_the_bootstrap_is_deterministic_per_seed() -> None:
    judge, human = _correlated(60, 2)
    first = agreement(judge, human, binary=True, seed=3)
    assert agreement(judge, human, binary=True, seed=3) == first
    other = agreement(judge, human, binary=True, seed=4)
    assert other.ci95 != first.ci95
    assert (other.spearman, other.kappa, other.accuracy) == (first.spearman, first.kappa, first.accuracy)


@pytest.mark.parametrize(("n", "cells"), [(13, 13 * 7 + 3), (13, 13), (10, 75), (7, 1000)])
def test_chunking_does_not_change_the_intervals(n: int, cells: int, monkeypatch: pytest.MonkeyPatch) -> None:
    judge, human = _correlated(n, n)
    whole = agreement(judge, human, binary=True, resamples=301)
    monkeypatch.setattr(agreement_module, "_CHUNK_CELLS", cells)
    assert agreement(judge, human, binary=True, resamples=301) == whole


def test_the_interval_holds_the_estimate_and_narrows_with_more_pairs() -> None:
    small = agreement(*_correlated(40, 5), binary=True)
    large = agreement(*_correlated(1000, 5), binary=True)
    for a in (small, large):
        for name in ("spearman", "kappa", "accuracy"):
            low, high = a.ci95[name] or (math.nan, math.nan)
            assert low <= getattr(a, name) <= high, (a.n, name)
    for name in ("spearman", "kappa", "accuracy"):
        (low_s, high_s), (low_l, high_l) = small.ci95[name] or (0, 0), large.ci95[name] or (0, 0)
        # the width falls about as 1 / sqrt(n): 25 times the pairs, a fifth of the width
        assert 0.1 < (high_l - low_l) / (high_s - low_s) < 0.35, name




# --- the JSON object ----------------------------------------------------------------------------


def test_agreement_json_binary() -> None:
    a = agreement([0.9, 0.7, 0.4, 0.2, 0.6, 0.1], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0], binary=True, resamples=50)
    body = agreement_json(a)
    assert body == {
        "n": 6,
        "spearman": a.spearman,
        "kappa": a.kappa,
        "accuracy": a.accuracy,
        "threshold": 0.5,
        "ci95": {name: list(a.ci95[name] or ()) for name in ("spearman", "kappa", "accuracy")},
        "confusion": {"tp": 2, "fp": 1, "fn": 1, "tn": 2},
    }
    assert all(isinstance(v, list) and len(v) == 2 for v in body["ci95"].values())
    assert json.loads(json.dumps(body)) == body


def test_agreement_json_graded() -> None:
    a = agreement([0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.4, 0.3], binary=False, threshold=0.7, resamples=50)
    body = agreement_json(a)
    low, high = a.ci95["spearman"] or (math.nan, math.nan)
    assert body == {
        "n": 4, "spearman": a.spearman, "kappa": None, "accuracy": None, "threshold": 0.7,
        "ci95": {"spearman": [low, high], "kappa": None, "accuracy": None}, "confusion": None,
    }


# --- the labels file ----------------------------------------------------------------------------


def _labels_file(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "human.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_labels_are_read_by_record(tmp_path: Path) -> None:
    path = _labels_file(
        tmp_path,
        '{"record": "q1", "faithfulness": 1, "answer_relevance": 0, "answer_correctness": 0.5}',
        "",
        '{"record": 7, "faithfulness": true, "answer_relevance": false, "toxicity": null}',
        '{"record": "q3", "answer_correctness": 1.0, "coherence": 0}',
    )
    labels = read_human_labels(path)
    assert labels.records == {
        "q1": {"faithfulness": 1.0, "answer_relevance": 0.0, "answer_correctness": 0.5},
        "7": {"faithfulness": 1.0, "answer_relevance": 0.0},
        "q3": {"answer_correctness": 1.0, "coherence": 0.0},
    }
    assert labels.lines == {"q1": 1, "7": 3, "q3": 4}
    assert labels.metrics == ("faithfulness", "answer_relevance", "answer_correctness", "coherence")
    assert [labels.binary(m) for m in LABELLED_METRICS] == [True, True, False, False, True, False]
    assert labels.labels("answer_correctness") == {"q1": 0.5, "q3": 1.0}


def test_the_labelled_metrics_are_the_judged_ones() -> None:
    assert LABELLED_METRICS == (
        "faithfulness", "answer_relevance", "context_relevance", "answer_correctness", "coherence", "toxicity"
    )


def _error(tmp_path: Path, *lines: str) -> str:
    path = _labels_file(tmp_path, *lines)
    with pytest.raises(InputError) as info:
        read_human_labels(path)
    return str(info.value).replace(path, "LABELS")


def test_an_unknown_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": "q1", "faithfulness": 1}', '{"record": "q2", "faithfullness": 1}')
    assert message == "LABELS:2: unknown key 'faithfullness' (did you mean faithfulness?)"


def test_the_lexical_estimate_is_no_label(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": "q1", "faithfulness_lexical": 1}')
    assert message == "LABELS:1: unknown key 'faithfulness_lexical' (did you mean faithfulness?)"


def test_an_unknown_key_without_a_close_match_lists_the_keys(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": "q1", "zzz": 1}')
    assert message == (
        "LABELS:1: unknown key 'zzz' (expected record, faithfulness, answer_relevance, context_relevance, "
        "answer_correctness, coherence, toxicity)"
    )


def test_a_record_labelled_twice(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": 7, "faithfulness": 1}', '{"record": "q2", "faithfulness": 1}',
                     '{"record": "7", "coherence": 1}')
    assert message == "LABELS:3: record '7' labelled twice (first on line 1)"


def test_a_missing_record(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"faithfulness": 1}')
    assert message == 'LABELS:1: missing "record" (the query_id, else the 1-based line or row)'


def test_a_record_that_is_no_id(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": 1.5, "faithfulness": 1}')
    assert message == 'LABELS:1: "record" must be a string or an integer, got float'


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1.5", "1.5"), ("-0.25", "-0.25"), ('"1"', "'1'"), ("NaN", "nan"), ("[1]", "[1]")],
    ids=["above-one", "negative", "string", "nan", "list"],
)
def test_a_label_that_is_no_score(tmp_path: Path, value: str, shown: str) -> None:
    message = _error(tmp_path, f'{{"record": "q1", "answer_correctness": {value}}}')
    assert message == f"LABELS:1: answer_correctness: expected 0, 1 or a number in [0, 1], got {shown}"


def test_a_file_without_labels(tmp_path: Path) -> None:
    message = _error(tmp_path, '{"record": "q1", "faithfulness": null}', '{"record": "q2"}')
    assert message == (
        "LABELS: no labels (expected JSON lines with record and at least one of faithfulness, "
        "answer_relevance, context_relevance, answer_correctness, coherence, toxicity)"
    )


def test_a_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    assert _error(tmp_path, '{"record": "q1" "faithfulness": 1}') == (
        "LABELS:1: invalid JSON: Expecting ',' delimiter (column 17)"
    )


# --- pairing ------------------------------------------------------------------------------------


def test_pairs_follow_the_labels_and_count_what_is_left_out() -> None:
    labels = HumanLabels(
        "human.jsonl",
        {"q3": {"faithfulness": 1.0}, "q1": {"faithfulness": 0.0}, "q2": {"coherence": 1.0},
         "q4": {"faithfulness": 1.0}, "q9": {"faithfulness": 0.0}},
        {"q3": 1, "q1": 2, "q2": 3, "q4": 4, "q9": 5},
    )
    judged = {"q1": 0.25, "q2": 0.5, "q3": 0.75, "q4": None}
    assert pair_scores(judged, labels, "faithfulness") == Pairs([0.75, 0.25], [1.0, 0.0], unscored=1, unknown=1)
    assert pair_scores(judged, labels, "coherence") == Pairs([0.5], [1.0], unscored=0, unknown=0)
    assert pair_scores(judged, labels, "toxicity") == Pairs([], [], unscored=0, unknown=0)


# --- the example set ----------------------------------------------------------------------------


def test_the_example_set_reads_clean() -> None:
    labels = read_human_labels(str(EXAMPLE / "human.jsonl"))
    records = [json.loads(line) for line in (EXAMPLE / "records.jsonl").read_text().splitlines()]
    assert [r["query_id"] for r in records] == list(labels.records)
    assert len(records) == 24
    assert labels.metrics == ("faithfulness", "answer_relevance", "answer_correctness")
    assert (labels.binary("faithfulness"), labels.binary("answer_relevance")) == (True, True)
    assert labels.binary("answer_correctness") is False
    assert len(labels.labels("answer_correctness")) == 16
    assert sum(labels.labels("faithfulness").values()) == 17
    assert sum(labels.labels("answer_relevance").values()) == 20
    for r in records:
        assert len(r["contexts"]) == len(r["retrieved_document_ids"]) and r["answer"] and r["reference_answer"]
