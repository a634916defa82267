"""End-to-end tests of ``ragmon eval`` (and ``compare``'s input errors) through the command line.

Most tests call ``ragmon.cli.main`` in process (``cli_helpers.ragmon``, output captured as a pipe
carries it) on files written to ``tmp_path``: exact metric values on a hand-computed dataset,
output formats, ``--k``, ``--fail-under``, ``--qrels``, every bad-input path (exit 2, exactly one
stderr line, never a traceback). A few run ``python -m ragmon`` in a real process: the entry
point on a sample of cases (which must answer byte for byte as in process) and the progress bar
on a terminal and its absence on a pipe.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import struct
import os
import subprocess
import sys
import termios
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TIMEOUT, ragmon, ragmon_process, run_json, write_jsonl

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)



# --------------------------------------------------------------------------------------------
# helpers


def eval_json(*args: str | Path) -> dict[str, Any]:
    return run_json("eval", *args)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr containing every needle, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stderr.endswith("\n")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


OK = {"query_id": "ok", "retrieved_document_ids": ["a"], "relevant_document_ids": ["a"]}
"""A valid, labelled record, used as line 1 before a bad line 2."""


def ln(x: float) -> float:
    return math.log2(x)


# --------------------------------------------------------------------------------------------
# the hand-computed dataset, split over two files

FILE_1 = [
    # q1: binary labels; the only relevant document d2 is at rank 2.
    {"query_id": "q1", "query": "first", "retrieved_document_ids": ["d1", "d2", "d3"],
     "relevant_document_ids": ["d2"]},
    # q2: graded labels and a duplicate: a, b, a, c dedupes to a (0), b (2), c (1);
    # z (grade 3) is relevant but never retrieved. 3 relevant documents: b, c, z.
    {"query_id": "q2", "query": "second", "retrieved_document_ids": ["a", "b", "a", "c"],
     "relevance": {"a": 0, "b": 2, "c": 1, "z": 3},
     "answer": "text", "contexts": ["c1", "c2"], "reference_answer": "ref"},
    # q3: only a grade-0 label, so nothing is relevant: unlabelled, excluded from the means.
    {"query_id": "q3", "query": "third", "retrieved_document_ids": ["d1"], "relevance": {"d1": 0}},
]
FILE_2 = [
    # q4: nothing relevant retrieved (and k=5 is deeper than the one-item list): all zeros.
    {"query_id": "q4", "query": "fourth", "retrieved_document_ids": ["x"], "relevant_document_ids": ["y"]},
    # q5: relevant p (rank 1) and s (rank 4).
    {"query_id": "q5", "query": "fifth", "retrieved_document_ids": ["p", "q", "r", "s"],
     "relevant_document_ids": ["p", "s"]},
    # q6: no labels at all: unlabelled.
    {"query_id": "q6", "query": "sixth", "retrieved_document_ids": ["p"]},
]


def expected_metrics() -> dict[str, float]:
    """Means over the 4 labelled queries q1, q2, q4, q5 at k = 1, 3, 5 (trec_eval definitions)."""
    # Reciprocal rank: q1 first relevant at rank 2, q2 at rank 2 (b, after dedup), q4 none, q5 rank 1.
    rr = [1 / 2, 1 / 2, 0.0, 1.0]
    # Hit: is a relevant doc in the top k?
    hit = {1: [0, 0, 0, 1], 3: [1, 1, 0, 1], 5: [1, 1, 0, 1]}
    # Recall: relevant in top k / all relevant. q2 has 3 relevant (b, c, z); top 3 after dedup
    # is a, b, c -> 2/3 (without dedup it would be a, b, a -> 1/3). q5 has 2 relevant.
    recall = {1: [0, 0, 0, 1 / 2], 3: [1, 2 / 3, 0, 1 / 2], 5: [1, 2 / 3, 0, 1]}
    # Precision: relevant in top k / k, even when the list is shorter than k.
    precision = {1: [0, 0, 0, 1], 3: [1 / 3, 2 / 3, 0, 1 / 3], 5: [1 / 5, 2 / 5, 0, 2 / 5]}
    # nDCG: gain = grade, discount log2(rank + 1); ideal from all judged docs.
    # q1: DCG@3 = 1/log2(3) (d2 at rank 2), IDCG = 1.
    q1 = {1: 0.0, 3: 1 / ln(3), 5: 1 / ln(3)}
    # q2: gains 0, 2, 1 -> DCG@3 = 2/log2(3) + 1/log2(4); ideal grades 3, 2, 1 ->
    # IDCG@1 = 3, IDCG@3 = 3 + 2/log2(3) + 1/log2(4); nothing more at 5.
    q2_dcg3 = 2 / ln(3) + 1 / ln(4)
    q2_idcg3 = 3 + 2 / ln(3) + 1 / ln(4)
    q2 = {1: 0.0, 3: q2_dcg3 / q2_idcg3, 5: q2_dcg3 / q2_idcg3}
    q4 = {1: 0.0, 3: 0.0, 5: 0.0}
    # q5: gains 1, 0, 0, 1 -> DCG@1 = 1, DCG@3 = 1, DCG@5 = 1 + 1/log2(5); ideal 1, 1 ->
    # IDCG@1 = 1, IDCG@3 = IDCG@5 = 1 + 1/log2(3).
    q5 = {1: 1.0, 3: 1 / (1 + 1 / ln(3)), 5: (1 + 1 / ln(5)) / (1 + 1 / ln(3))}

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    out: dict[str, float] = {}
    for k in (1, 3, 5):
        out[f"hit_rate@{k}"] = mean(hit[k])
    out["mrr"] = mean(rr)  # (0.5 + 0.5 + 0 + 1) / 4 = 0.5
    for k in (1, 3, 5):
        out[f"recall@{k}"] = mean(recall[k])
    for k in (1, 3, 5):
        out[f"precision@{k}"] = mean(precision[k])
    for k in (1, 3, 5):
        out[f"ndcg@{k}"] = mean([q1[k], q2[k], q4[k], q5[k]])
    return out


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, Path]:
    return write_jsonl(tmp_path / "part1.jsonl", FILE_1), write_jsonl(tmp_path / "part2.jsonl", FILE_2)


# --------------------------------------------------------------------------------------------
# exact values, multiple files, formats


def test_exact_json_metrics_over_two_files(dataset: tuple[Path, Path]) -> None:
    f1, f2 = dataset
    out = eval_json(f1, f2, "--k", "1,3,5")
    assert out["queries"] == 4
    assert out["unlabelled"] == 2
    assert out["records"] == 6
    assert out["files"] == [str(f1), str(f2)]
    expected = expected_metrics()
    assert list(out["metrics"]) == list(expected)  # also the report order
    for key, value in expected.items():
        assert out["metrics"][key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert out["thresholds"] == []
    assert out["passed"] is True


def test_spot_values_by_hand(dataset: tuple[Path, Path]) -> None:
    # A few of the means written out as plain numbers, in case the helper above had a slip.
    out = eval_json(*dataset, "--k", "1,3,5")["metrics"]
    assert out["mrr"] == pytest.approx(0.5)
    assert out["hit_rate@1"] == pytest.approx(0.25)
    assert out["hit_rate@5"] == pytest.approx(0.75)
    assert out["recall@3"] == pytest.approx((1 + 2 / 3 + 0 + 0.5) / 4)
    assert out["precision@5"] == pytest.approx((0.2 + 0.4 + 0 + 0.4) / 4)
    assert out["ndcg@1"] == pytest.approx(0.25)


def test_multiple_files_are_concatenated(dataset: tuple[Path, Path], tmp_path: Path) -> None:
    f1, f2 = dataset
    together = write_jsonl(tmp_path / "all.jsonl", FILE_1 + FILE_2)
    split = eval_json(f1, f2, "--k", "1,3,5")
    joined = eval_json(together, "--k", "1,3,5")
    assert split["metrics"] == joined["metrics"]
    assert (split["queries"], split["unlabelled"]) == (joined["queries"], joined["unlabelled"])
    # Each file alone gives different numbers: the union really is used.
    only_first = eval_json(f1, "--k", "1,3,5")
    assert only_first["queries"] == 2 and only_first["unlabelled"] == 1
    assert only_first["metrics"]["mrr"] == pytest.approx(0.5)  # q1 and q2: 1/2 each


def test_default_ks_and_k_deeper_than_every_list(dataset: tuple[Path, Path]) -> None:
    out = eval_json(*dataset)
    keys = list(out["metrics"])
    assert keys == [
        "hit_rate@1", "hit_rate@3", "hit_rate@5", "hit_rate@10", "mrr",
        "recall@1", "recall@3", "recall@5", "recall@10",
        "precision@1", "precision@3", "precision@5", "precision@10",
        "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10",
    ]
    m = out["metrics"]
    # No list is longer than 4, so @10 equals @5 except precision, which divides by 10.
    assert m["hit_rate@10"] == pytest.approx(m["hit_rate@5"])
    assert m["recall@10"] == pytest.approx(m["recall@5"])
    assert m["ndcg@10"] == pytest.approx(m["ndcg@5"])
    assert m["precision@10"] == pytest.approx((1 / 10 + 2 / 10 + 0 + 2 / 10) / 4)


def test_integer_ids_compare_as_strings(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "ints.jsonl", [
        {"query_id": 7, "retrieved_document_ids": [1, 2, 3], "relevant_document_ids": ["2"]},
        {"query_id": "8", "retrieved_document_ids": ["1", "2"], "relevance": {"1": 1}},
    ])
    out = eval_json(f, "--k", "1")
    # rank 2 -> 1/2 and rank 1 -> 1: MRR 0.75.
    assert out["metrics"]["mrr"] == pytest.approx(0.75)
    assert out["metrics"]["hit_rate@1"] == pytest.approx(0.5)


def test_blank_lines_and_integral_float_grades_are_accepted(tmp_path: Path) -> None:
    f = tmp_path / "blank.jsonl"
    f.write_text(
        "\n"
        + json.dumps({"query_id": "a", "retrieved_document_ids": ["x"], "relevance": {"x": 2.0}})
        + "\n   \n\n",
        encoding="utf-8",
    )
    out = eval_json(f, "--k", "1")
    assert out["queries"] == 1
    assert out["metrics"]["ndcg@1"] == pytest.approx(1.0)


def test_table_output_has_metric_rows(dataset: tuple[Path, Path]) -> None:
    result = ragmon("eval", *dataset, "--k", "1,3,5")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert "6 records" in lines[0] and "4 scored" in lines[0] and "2 unlabelled" in lines[0]
    header = next(line for line in lines if line.startswith("metric"))
    assert header.split() == ["metric", "@1", "@3", "@5"]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line and line.split()[0] in
            {"hit_rate", "mrr", "recall", "precision", "ndcg"}}
    assert set(rows) == {"hit_rate", "mrr", "recall", "precision", "ndcg"}
    assert rows["hit_rate"] == ["0.2500", "0.7500", "0.7500"]
    assert rows["mrr"] == ["0.5000"]
    expected = expected_metrics()
    assert rows["ndcg"] == [f"{expected[f'ndcg@{k}']:.4f}" for k in (1, 3, 5)]
    assert rows["precision"] == [f"{expected[f'precision@{k}']:.4f}" for k in (1, 3, 5)]


def test_markdown_output_has_metric_rows(dataset: tuple[Path, Path]) -> None:
    result = ragmon("eval", *dataset, "--k", "1,5", "--format", "markdown")
    assert result.returncode == 0 and result.stderr == ""
    out = result.stdout
    assert "| metric | @1 | @5 |" in out
    assert "| hit_rate | 0.2500 | 0.7500 |" in out
    assert "| mrr | 0.5000 |" in out
    for name in ("recall", "precision", "ndcg"):
        assert f"| {name} | " in out


def test_k_parsing_sorts_dedupes_and_strips(dataset: tuple[Path, Path]) -> None:
    out = eval_json(*dataset, "--k", " 5, 1 ,5")
    assert list(out["metrics"]) == [
        "hit_rate@1", "hit_rate@5", "mrr", "recall@1", "recall@5",
        "precision@1", "precision@5", "ndcg@1", "ndcg@5",
    ]
    single = eval_json(*dataset, "--k", "2")
    assert list(single["metrics"]) == ["hit_rate@2", "mrr", "recall@2", "precision@2", "ndcg@2"]
    # q5 has p at rank 1; q1 and q2 have their first relevant at rank 2.
    assert single["metrics"]["hit_rate@2"] == pytest.approx(3 / 4)


# --------------------------------------------------------------------------------------------
# --fail-under


def test_fail_under_pass(dataset: tuple[Path, Path]) -> None:
    result = ragmon("eval", *dataset, "--k", "1,3", "--fail-under", "hit_rate@3=0.75",
                    "--fail-under", "mrr=0.5", "--format", "json")
    assert result.returncode == 0
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert out["passed"] is True
    assert out["thresholds"] == [
        {"metric": "hit_rate@3", "min": 0.75, "value": pytest.approx(0.75), "passed": True},
        {"metric": "mrr", "min": 0.5, "value": pytest.approx(0.5), "passed": True},
    ]


def test_fail_under_fail(dataset: tuple[Path, Path]) -> None:
    result = ragmon("eval", *dataset, "--k", "1,3", "--fail-under", "hit_rate@3=0.5",
                    "--fail-under", "ndcg@1=0.9")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert "FAIL" in lines[0] and "ndcg@1" in lines[0] and "0.2500" in lines[0] and "0.9" in lines[0]
    # The table is still printed, with a verdict per threshold.
    assert "ok    hit_rate@3 = 0.7500 >= 0.5" in result.stdout
    assert "FAIL  ndcg@1 = 0.2500 < 0.9" in result.stdout


def test_fail_under_mrr(dataset: tuple[Path, Path]) -> None:
    failed = ragmon("eval", *dataset, "--fail-under", "MRR=0.6", "--format", "json")
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == ["ragmon eval: FAIL mrr = 0.5000 < 0.6"]
    assert json.loads(failed.stdout)["passed"] is False


def test_fail_under_k_not_in_k_is_computed(dataset: tuple[Path, Path]) -> None:
    result = ragmon("eval", *dataset, "--k", "1", "--fail-under", "recall@5=0.6", "--format", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    expected = expected_metrics()["recall@5"]  # (1 + 2/3 + 0 + 1) / 4 = 2/3
    assert out["metrics"]["recall@5"] == pytest.approx(expected)
    assert out["metrics"]["recall@1"] == pytest.approx(expected_metrics()["recall@1"])
    assert out["thresholds"][0]["value"] == pytest.approx(expected)
    failed = ragmon("eval", *dataset, "--k", "1", "--fail-under", "precision@4=0.5")
    assert failed.returncode == 1
    # precision@4: q1 1/4, q2 2/4 (b, c), q4 0, q5 2/4 (p, s) -> (5/4) / 4 = 0.3125
    assert "FAIL precision@4 = 0.3125 < 0.5" in failed.stderr


def test_fail_under_with_no_labelled_query_fails(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "nolabels.jsonl", [
        {"query_id": "a", "retrieved_document_ids": ["x"]},
        {"query_id": "b", "retrieved_document_ids": ["y"], "relevant_document_ids": []},
    ])
    out = eval_json(f)  # without a threshold this is fine (nothing to fail)
    assert out["queries"] == 0 and out["unlabelled"] == 2
    assert all(v is None for v in out["metrics"].values())
    result = ragmon("eval", f, "--fail-under", "hit_rate@5=0", "--format", "json")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "FAIL" in lines[0] and "no scored query" in lines[0]
    assert json.loads(result.stdout)["thresholds"][0]["value"] is None


# --------------------------------------------------------------------------------------------
# --qrels


UNLABELLED_RUN = [
    {"query_id": "q1", "query": "What is RAG?", "retrieved_document_ids": ["d1", "d2", "d3"]},
    {"query_id": "q2", "query": "How are you", "retrieved_document_ids": ["e1", "e2"]},
]


def test_qrels_jsonl_by_query_id(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", UNLABELLED_RUN)
    qrels = write_jsonl(tmp_path / "qrels.jsonl", [
        {"query_id": "q1", "relevant_document_ids": ["d3"]},
        {"query_id": "q2", "relevance": {"e1": 0, "e2": 2}},
        {"query_id": "other", "relevant_document_ids": ["zzz"]},
    ])
    assert eval_json(run)["queries"] == 0
    out = eval_json(run, "--qrels", qrels, "--k", "1")
    assert out["queries"] == 2 and out["unlabelled"] == 0
    assert out["metrics"]["mrr"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_qrels_jsonl_by_normalized_query_text(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", [
        {"query": "  What   is\tRAG? \n", "retrieved_document_ids": ["d1", "d2"]},
        {"query_id": "no-such-id", "query": "HOW ARE YOU", "retrieved_document_ids": ["e1", "e2"]},
    ])
    qrels = write_jsonl(tmp_path / "qrels.jsonl", [
        {"query": "what is rag?", "relevant_document_ids": ["d2"]},
        {"query": "how   are you", "relevance": {"e1": 1}},
    ])
    out = eval_json(run, "--qrels", qrels, "--k", "1")
    assert out["queries"] == 2
    assert out["metrics"]["mrr"] == pytest.approx((1 / 2 + 1) / 2)


def test_qrels_trec_format(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", UNLABELLED_RUN)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d2 1\nq1 0 d3 0\n\nq2\t0\te2\t3\nq9 0 d1 1\n", encoding="utf-8")
    out = eval_json(run, "--qrels", qrels, "--k", "2")
    assert out["queries"] == 2
    # q1: d2 at rank 2 -> RR 1/2; q2: e2 at rank 2 -> RR 1/2.
    assert out["metrics"]["mrr"] == pytest.approx(0.5)
    assert out["metrics"]["recall@2"] == pytest.approx(1.0)
    assert out["metrics"]["precision@2"] == pytest.approx(0.5)


def test_qrels_override_in_record_labels(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", [
        # own labels say d1 (RR 1); qrels say d3 (RR 1/3) and win.
        {"query_id": "q1", "retrieved_document_ids": ["d1", "d2", "d3"], "relevant_document_ids": ["d1"]},
        # not in the qrels: keeps its own labels (RR 1/2).
        {"query_id": "q2", "retrieved_document_ids": ["e1", "e2"], "relevance": {"e2": 1}},
    ])
    qrels = write_jsonl(tmp_path / "qrels.jsonl", [{"query_id": "q1", "relevant_document_ids": ["d3"]}])
    assert eval_json(run)["metrics"]["mrr"] == pytest.approx((1 + 1 / 2) / 2)
    assert eval_json(run, "--qrels", qrels)["metrics"]["mrr"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    trec = tmp_path / "qrels.trec"
    trec.write_text("q1 0 d2 1\n", encoding="utf-8")
    assert eval_json(run, "--qrels", trec)["metrics"]["mrr"] == pytest.approx((1 / 2 + 1 / 2) / 2)


def test_empty_qrels_file_changes_nothing(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", [OK])
    qrels = tmp_path / "empty.qrels"
    qrels.write_text("\n\n", encoding="utf-8")
    assert eval_json(run, "--qrels", qrels)["metrics"]["mrr"] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# bad input: exit 2, exactly one stderr line naming the file and line, never a traceback
#
# The cases are run once, in process, by a module fixture; each parametrized test then checks one
# result. test_real_process_answers_as_in_process runs a sample of them as real processes.

BAD_RECORDS: dict[str, tuple[bytes, str]] = {
    "invalid_json": (b'{"query_id": "x", ', "invalid JSON"),
    "trailing_garbage": (b'{"query_id": "x"} x', "invalid JSON"),
    "non_object_list": (b"[1, 2]", "expected a JSON object"),
    "non_object_string": (b'"just a string"', "expected a JSON object"),
    "not_utf8": (b'{"query_id": "caf\xe9", "retrieved_document_ids": []}', "not UTF-8"),
    "retrieved_not_list": (b'{"retrieved_document_ids": "a,b"}', "retrieved_document_ids"),
    "retrieved_float_id": (b'{"retrieved_document_ids": ["a", 1.5]}', "retrieved_document_ids"),
    "retrieved_object_id": (b'{"retrieved_document_ids": [{"id": "a"}]}', "retrieved_document_ids"),
    "retrieved_bool_id": (b'{"retrieved_document_ids": [true]}', "retrieved_document_ids"),
    "relevant_null_id": (b'{"retrieved_document_ids": ["a"], "relevant_document_ids": [null]}',
                         "relevant_document_ids"),
    "relevant_not_list": (b'{"retrieved_document_ids": ["a"], "relevant_document_ids": "a"}',
                          "relevant_document_ids"),
    "query_id_float": (b'{"query_id": 1.5, "retrieved_document_ids": ["a"]}', "query_id"),
    "query_not_string": (b'{"query": ["q"], "retrieved_document_ids": ["a"]}', '"query"'),
    "answer_not_string": (b'{"answer": 3, "retrieved_document_ids": ["a"]}', '"answer"'),
    "both_label_kinds": (
        b'{"retrieved_document_ids": ["a"], "relevant_document_ids": ["a"], "relevance": {"a": 1}}',
        "not both",
    ),
    "negative_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": -1}}', "grade"),
    "fractional_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": 1.5}}', "grade"),
    "string_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": "2"}}', "grade"),
    "bool_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": true}}', "grade"),
    "nan_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": NaN}}', "grade"),
    "null_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": null}}', "grade"),
    "huge_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": 1' + b"0" * 400 + b'}}', "whole number from 0 to"),
    "infinite_grade": (b'{"retrieved_document_ids": ["a"], "relevance": {"a": 1e400}}', "whole number from 0 to"),
    "relevance_list": (b'{"retrieved_document_ids": ["a"], "relevance": ["a"]}', '"relevance"'),
    "relevance_number": (b'{"retrieved_document_ids": ["a"], "relevance": 1}', '"relevance"'),
    "contexts_string": (b'{"retrieved_document_ids": ["a"], "contexts": "some text"}', '"contexts"'),
    "contexts_numbers": (b'{"retrieved_document_ids": ["a"], "contexts": ["ok", 1]}', '"contexts"'),
    "otlp_dump": (b'{"resourceSpans": [{"resource": {}, "scopeSpans": []}]}', "OTLP"),
    "deeply_nested": (b'{"retrieved_document_ids": ' + b"[" * 100_000 + b"}", "invalid JSON"),
    "huge_int_literal": (b'{"query_id": ' + b"1" * 5000 + b', "retrieved_document_ids": ["a"]}',
                         "invalid JSON"),
}

BAD_QRELS: dict[str, tuple[bytes, int, str]] = {
    "trec_three_columns": (b"q1 0 d1 1\nq1 0 d2\n", 2, "4 columns"),
    "trec_five_columns": (b"q1 0 d1 1 extra\n", 1, "4 columns"),
    "trec_float_grade": (b"q1 0 d1 1\n\nq1 0 d2 0.5\n", 3, "whole number from 0"),
    "trec_word_grade": (b"q1 0 d1 yes\n", 1, "whole number from 0"),
    "trec_negative_grade": (b"q1 0 d1 -1\n", 1, "whole number from 0"),
    "trec_huge_grade": (b"q1 0 d1 " + b"9" * 5000 + b"\n", 1, "whole number from 0 to 1,000,000,000,000"),
    "trec_not_utf8": (b"q1 0 d1 1\nq\xff 0 d2 1\n", 2, "UTF-8"),
    "jsonl_no_query_id_or_query": (
        b'{"query_id": "q1", "relevant_document_ids": ["a"]}\n{"relevant_document_ids": ["a"]}\n',
        2, '"query_id" or "query"',
    ),
    "jsonl_no_labels": (b'{"query_id": "q1"}\n', 1, "relevant_document_ids"),
    "jsonl_both_labels": (b'{"query_id": "q1", "relevant_document_ids": ["a"], "relevance": {"a": 1}}\n',
                          1, "not both"),
    "jsonl_bad_grade": (b'{"query_id": "q1", "relevance": {"a": -2}}\n', 1, "grade"),
    "jsonl_bad_query_id": (b'{"query_id": [1], "relevant_document_ids": ["a"]}\n', 1, "query_id"),
    "jsonl_invalid_json": (b'{"query_id": "q1", "relevant_document_ids": ["a"]}\n{"query_id": \n',
                           2, "invalid JSON"),
    "jsonl_non_object": (b'{"query_id": "q1", "relevant_document_ids": ["a"]}\n[1]\n', 2, "JSON object"),
}

BAD_KS = {"zero": "0", "negative": "-1", "word": "a", "empty": "", "double_comma": "1,,3",
          "trailing_comma": "1,", "fraction": "2.5", "semicolon": "1;3", "superscript": "²",
          "exponent": "1e3"}

BAD_THRESHOLDS: dict[str, tuple[str, list[str]]] = {
    "typo_recall": ("recal@5=0.5", ["unknown metric", "did you mean recall"]),
    "typo_ndcg": ("ndgc@5=0.5", ["unknown metric", "did you mean ndcg"]),
    "typo_hit_rate": ("hitrate@5=0.5", ["unknown metric", "did you mean hit_rate"]),
    "unknown_metric": ("accuracy@5=0.5", ["unknown metric", "hit_rate"]),
    "mrr_at_k": ("mrr@5=0.5", ["mrr takes no @K"]),
    "hit_rate_without_k": ("hit_rate=0.5", ["needs a cut-off"]),
    "empty_k": ("hit_rate@=0.5", ["needs a cut-off"]),
    "zero_k": ("hit_rate@0=0.5", ["needs a cut-off"]),
    "word_k": ("hit_rate@x=0.5", ["needs a cut-off"]),
    "superscript_k": ("hit_rate@²=0.5", ["needs a cut-off"]),
    "above_one": ("hit_rate@5=1.5", ["between 0 and 1"]),
    "below_zero": ("hit_rate@5=-0.1", ["between 0 and 1"]),
    "nan": ("mrr=nan", ["between 0 and 1"]),
    "word_value": ("mrr=high", ["not a number"]),
    "empty_value": ("mrr=", ["not a number"]),
    "no_equals": ("hit_rate@5", ["METRIC@K=VALUE"]),
}

ARGPARSE_ERRORS: dict[str, list[str]] = {
    "no_subcommand": [],
    "unknown_flag_eval": ["eval", "x.jsonl", "--bogus"],
    "unknown_flag_top": ["--bogus"],
    "unknown_command": ["frobnicate"],
    "eval_without_files": ["eval"],
    "unknown_format": ["eval", "x.jsonl", "--format", "html"],
    "compare_one_file": ["compare", "only_one.jsonl"],
    "compare_resamples_word": ["compare", "a.jsonl", "b.jsonl", "--resamples", "many"],
    "compare_seed_float": ["compare", "a.jsonl", "b.jsonl", "--seed", "1.5"],
    "compare_fail_under": ["compare", "a.jsonl", "b.jsonl", "--fail-under", "mrr=0.5"],
}

BadCase = tuple[list[str], list[str]]
"""Arguments of one ``ragmon`` run and the substrings its one stderr line must contain."""
BadResults = dict[str, tuple[subprocess.CompletedProcess[str], list[str]]]


def _line_two(d: Path, case: str) -> BadCase:
    line, problem = BAD_RECORDS[case]
    f = d / f"record_{case}.jsonl"
    f.write_bytes(json.dumps(OK).encode() + b"\n" + line + b"\n" + json.dumps(OK).encode() + b"\n")
    return ["eval", str(f)], [f"{f}:2", problem, "ragmon eval: error: "]


def _bad_qrels(d: Path, case: str, command: str) -> BadCase:
    content, line, problem = BAD_QRELS[case]
    run = write_jsonl(d / f"run_for_{case}.jsonl", [OK])
    qrels = d / f"qrels_{case}.{'jsonl' if case.startswith('jsonl') else 'txt'}"
    qrels.write_bytes(content)
    files = [str(run)] if command == "eval" else [str(run), str(run)]
    needles = [f"{qrels}:{line}", problem, f"ragmon {command}: error: "]
    return [command, *files, "--qrels", str(qrels)], needles


def _second_file(d: Path) -> BadCase:
    good = write_jsonl(d / "good.jsonl", [OK, OK])
    bad = d / "second.jsonl"
    bad.write_bytes(b"\n\n" + json.dumps(OK).encode() + b"\n{oops\n")
    return ["eval", str(good), str(bad), "--format", "json"], [f"{bad}:4", "invalid JSON"]


def _not_utf8_first_line(d: Path) -> BadCase:
    f = d / "latin1.jsonl"
    f.write_bytes('{"query": "café", "retrieved_document_ids": []}\n'.encode("latin-1"))
    return ["eval", str(f)], [f"{f}:1", "not UTF-8"]


def _utf16(d: Path) -> BadCase:
    f = d / "utf16.jsonl"
    f.write_text(json.dumps(OK) + "\n", encoding="utf-16")
    return ["eval", str(f)], [f"{f}:1"]


def _otlp_first_line(d: Path) -> BadCase:
    f = d / "traces.json"
    f.write_text(json.dumps({"resourceSpans": []}) + "\n" + json.dumps(OK) + "\n", encoding="utf-8")
    return ["eval", str(f)], [f"{f}:2", "OTLP/JSON request"]


def _missing(d: Path) -> BadCase:
    missing = d / "does_not_exist.jsonl"
    return ["eval", str(missing)], [str(missing), "cannot read"]


def _missing_second(d: Path) -> BadCase:
    good = write_jsonl(d / "good_first.jsonl", [OK])
    missing = d / "nope.jsonl"
    return ["eval", str(good), str(missing)], [str(missing), "cannot read"]


def _directory(d: Path) -> BadCase:
    sub = d / "a_directory"
    sub.mkdir()
    return ["eval", str(sub)], [str(sub), "cannot read"]


def _missing_qrels(d: Path) -> BadCase:
    run = write_jsonl(d / "run_for_missing_qrels.jsonl", [OK])
    missing = d / "missing.qrels"
    return ["eval", str(run), "--qrels", str(missing)], [str(missing), "cannot read"]


def _ok_run(d: Path) -> str:
    return str(write_jsonl(d / "ok.jsonl", [OK]))


def _compare_dup_ids(d: Path, a_first: bool) -> BadCase:
    dup = write_jsonl(d / f"dup_{a_first}.jsonl", [
        {"query_id": "q1", "retrieved_document_ids": ["x"], "relevant_document_ids": ["x"]},
        {"query_id": "q2", "retrieved_document_ids": ["x"], "relevant_document_ids": ["x"]},
        {"query_id": "q1", "retrieved_document_ids": ["y"], "relevant_document_ids": ["x"]},
    ])
    other = _ok_run(d)
    files = [str(dup), other] if a_first else [other, str(dup)]
    return ["compare", *files], [f"{dup}:3", "'q1'", "twice", "line 1", "ragmon compare: error: "]


def _compare_dup_text(d: Path) -> BadCase:
    b = write_jsonl(d / "dup_text.jsonl", [
        {"query": "Hello  World", "retrieved_document_ids": ["x"]},
        {"query": "hello world", "retrieved_document_ids": ["x"]},
    ])
    return ["compare", _ok_run(d), str(b)], [f"{b}:2", "twice"]


def _compare_no_key(d: Path) -> BadCase:
    keyless = {"retrieved_document_ids": ["x"], "relevant_document_ids": ["x"]}
    b = write_jsonl(d / "no_key.jsonl", [OK, keyless])
    return ["compare", _ok_run(d), str(b)], [f"{b}:2", '"query_id" or "query"']


def _compare_bad_record(d: Path) -> BadCase:
    b = d / "bad_b.jsonl"
    b.write_bytes(b'{"query_id": "ok", "retrieved_document_ids": 5}\n')
    return ["compare", _ok_run(d), str(b)], [f"{b}:1", "retrieved_document_ids"]


def _compare_missing(d: Path) -> BadCase:
    missing = d / "missing_a.jsonl"
    return ["compare", str(missing), _ok_run(d)], [str(missing), "cannot read"]


BAD_CASES: dict[str, Callable[[Path], BadCase]] = {
    **{f"record_{c}": (lambda d, c=c: _line_two(d, c)) for c in BAD_RECORDS},
    **{f"qrels_{c}_eval": (lambda d, c=c: _bad_qrels(d, c, "eval")) for c in BAD_QRELS},
    "qrels_trec_three_columns_compare": lambda d: _bad_qrels(d, "trec_three_columns", "compare"),
    "qrels_jsonl_no_labels_compare": lambda d: _bad_qrels(d, "jsonl_no_labels", "compare"),
    "qrels_missing": _missing_qrels,
    "record_in_second_file": _second_file,
    "not_utf8_first_line": _not_utf8_first_line,
    "utf16_file": _utf16,
    "otlp_first_line": _otlp_first_line,
    "missing_file": _missing,
    "missing_second_file": _missing_second,
    "directory": _directory,
    **{
        f"k_{name}_eval": (lambda d, k=k: (["eval", _ok_run(d), f"--k={k}"], ["--k", "ragmon eval: error: "]))
        for name, k in BAD_KS.items()
    },
    "k_zero_compare": lambda d: (["compare", _ok_run(d), _ok_run(d), "--k=0"], ["--k"]),
    "k_word_compare": lambda d: (["compare", _ok_run(d), _ok_run(d), "--k", "1,x"], ["--k"]),
    **{
        f"fail_under_{name}": (
            lambda d, t=t, n=n: (["eval", _ok_run(d), f"--fail-under={t}"], ["--fail-under", *n])
        )
        for name, (t, n) in BAD_THRESHOLDS.items()
    },
    **{f"argparse_{name}": (lambda d, a=a: (a, ["ragmon", "error:", "(see --help)"]))
       for name, a in ARGPARSE_ERRORS.items()},
    "resamples_zero": lambda d: (
        ["compare", _ok_run(d), _ok_run(d), "--resamples", "0"], ["--resamples", ">= 1"]
    ),
    "judge_base_url_not_a_url": lambda d: (
        ["eval", _ok_run(d), "--judge", "--judge-base-url", "not a url"],
        ["ragmon eval: error: --judge-base-url: must be empty or an http:// or https:// URL with a host"],
    ),
    "judge_concurrency_absurd": lambda d: (
        ["eval", _ok_run(d), "--judge", "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-concurrency", "100000"],
        ["--judge-concurrency: must be at most 256"],
    ),
    "judge_concurrency_zero": lambda d: (
        ["eval", _ok_run(d), "--judge", "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-concurrency", "0"],
        ["--judge-concurrency: must be at least 1"],
    ),
    "judge_model_empty": lambda d: (
        ["eval", _ok_run(d), "--judge", "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", " "],
        ["--judge-model: must name a model"],
    ),
    "resamples_negative": lambda d: (
        ["compare", _ok_run(d), _ok_run(d), "--resamples=-5"], ["--resamples"]
    ),
    "compare_duplicate_ids_in_a": lambda d: _compare_dup_ids(d, a_first=True),
    "compare_duplicate_ids_in_b": lambda d: _compare_dup_ids(d, a_first=False),
    "compare_duplicate_query_text": _compare_dup_text,
    "compare_no_query_id_or_query": _compare_no_key,
    "compare_bad_record": _compare_bad_record,
    "compare_missing_file": _compare_missing,
}


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory: pytest.TempPathFactory) -> BadResults:
    """Run every bad-input case; ``{case: (result, needles)}``."""
    cwd = tmp_path_factory.getbasetemp()
    results: BadResults = {}
    for name, build in BAD_CASES.items():
        args, needles = build(tmp_path_factory.mktemp(name[:40]))
        results[name] = ragmon(*args, cwd=cwd), needles
    return results


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_exits_2_with_one_line(case: str, bad_results: BadResults) -> None:
    result, needles = bad_results[case]
    assert_one_line_error(result, *needles)


def test_bad_input_cases_cover_the_brief() -> None:
    # A guard so that the table above is not trimmed by accident.
    must = [
        "missing_file", "record_invalid_json", "record_non_object_list", "record_not_utf8",
        "record_retrieved_not_list", "record_retrieved_float_id", "record_both_label_kinds",
        "record_negative_grade", "record_fractional_grade", "record_bool_grade", "record_relevance_list",
        "record_contexts_string", "record_contexts_numbers", "record_otlp_dump",
        "qrels_trec_three_columns_eval", "qrels_trec_float_grade_eval",
        "qrels_jsonl_no_query_id_or_query_eval",
        "qrels_jsonl_no_labels_eval", "fail_under_typo_recall", "fail_under_mrr_at_k",
        "fail_under_hit_rate_without_k", "fail_under_above_one", "argparse_no_subcommand",
        "argparse_unknown_flag_eval", "compare_duplicate_ids_in_a", "compare_no_query_id_or_query",
        "resamples_zero",
    ]
    assert not [m for m in must if m not in BAD_CASES]


def test_bad_input_names_the_right_file_only(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "first_good.jsonl", [OK])
    bad = tmp_path / "second_bad.jsonl"
    bad.write_bytes(b"[1]\n")  # a JSON array, of something other than objects
    result = ragmon("eval", str(good), str(bad))
    assert_one_line_error(result, f"{bad}: row 1: expected a JSON object")
    assert "first_good" not in result.stderr


# --------------------------------------------------------------------------------------------
# the real entry point: ``python -m ragmon`` answers as ``main()`` in process


RealCase = tuple[list[str], int, list[str]]
"""Arguments, the exit code, and for exit 2 the substrings of the one stderr line."""


def _dataset(d: Path) -> list[str]:
    return [str(write_jsonl(d / "part1.jsonl", FILE_1)), str(write_jsonl(d / "part2.jsonl", FILE_2))]


def _two_runs(d: Path) -> list[str]:
    """Run A is the dataset; run B ranks every list backwards and has a lone surrogate query id."""
    a = write_jsonl(d / "a.jsonl", FILE_1 + FILE_2)
    rows = [{**row, "retrieved_document_ids": row["retrieved_document_ids"][::-1]} for row in FILE_1 + FILE_2]
    rows.append({"query_id": "\ud800x", "retrieved_document_ids": ["a"], "relevant_document_ids": ["a"]})
    return [str(a), str(write_jsonl(d / "b.jsonl", rows))]  # json.dumps escapes it as \\ud800


def _check_config_ok(d: Path) -> RealCase:
    (d / "ok.toml").write_text('[scoring]\nk = [1, 5]\ngolden = "golden.jsonl"\n', encoding="utf-8")
    (d / "golden.jsonl").write_text('{"query": "q", "relevant_document_ids": ["a"]}\n', encoding="utf-8")
    return ["check-config", "ok.toml"], 0, []  # both files relative to the working directory


def _check_config_bad(d: Path) -> RealCase:
    (d / "bad.toml").write_text("[tracs]\n[scoring]\nk = [0]\n", encoding="utf-8")
    return ["check-config", "bad.toml"], 2, []


def _exit_2(case: str) -> Callable[[Path], RealCase]:
    def build(d: Path) -> RealCase:
        args, needles = BAD_CASES[case](d)
        return args, 2, needles
    return build


REAL_CASES: dict[str, Callable[[Path], RealCase]] = {
    "eval_json": lambda d: (["eval", *_dataset(d), "--k", "1,3,5", "--format", "json"], 0, []),
    "eval_fail_under": lambda d: (["eval", *_dataset(d), "--format", "markdown", "--fail-under", "ndcg@1=0.9"], 1, []),
    "compare_table": lambda d: (["compare", *_two_runs(d), "--resamples", "200"], 0, []),
    "check_config_ok": _check_config_ok,
    "check_config_bad": _check_config_bad,
    "version": lambda d: (["--version"], 0, []),
    **{case: _exit_2(case) for case in ("record_not_utf8", "argparse_unknown_flag_eval")},
}
"""A sample of the commands, exit codes and output formats, run both ways."""

Run = subprocess.CompletedProcess[str]
RealResults = dict[str, tuple[Run, Run, RealCase]]


@pytest.fixture(scope="module")
def real_results(tmp_path_factory: pytest.TempPathFactory) -> RealResults:
    """``{case: (real process, in process, case)}``; the processes run 4 at a time in a thread pool."""
    cases: dict[str, tuple[Path, RealCase]] = {}
    for name, build in REAL_CASES.items():
        d = tmp_path_factory.mktemp(f"real_{name}")
        cases[name] = d, build(d)
    with ThreadPoolExecutor(max_workers=4) as pool:
        processes = {name: pool.submit(ragmon_process, *case[0], cwd=d) for name, (d, case) in cases.items()}
        in_process = {name: ragmon(*case[0], cwd=d) for name, (d, case) in cases.items()}
        return {name: (future.result(), in_process[name], cases[name][1]) for name, future in processes.items()}


@pytest.mark.parametrize("case", list(REAL_CASES))
def test_real_process_answers_as_in_process(case: str, real_results: RealResults) -> None:
    real, in_process, (_, code, needles) = real_results[case]
    assert real.args[:3] == [sys.executable, "-m", "ragmon"]
    assert (real.returncode, real.stdout, real.stderr) == (in_process.returncode, in_process.stdout, in_process.stderr)
    assert real.returncode == code, real.stderr
    assert "Traceback" not in real.stderr
    if needles:
        assert_one_line_error(real, *needles)
    if code == 0:
        assert real.stdout and real.stderr == ""


# --------------------------------------------------------------------------------------------
# progress bar


def _big_file(tmp_path: Path) -> Path:
    row = {"query_id": "", "query": "a fairly ordinary question about the product " * 2,
           "retrieved_document_ids": [f"doc-{i}" for i in range(10)], "relevant_document_ids": ["doc-3"]}
    lines = []
    size = 0
    i = 0
    while size < (1 << 20) + 4096:
        row["query_id"] = f"q{i}"
        line = json.dumps(row) + "\n"
        lines.append(line)
        size += len(line)
        i += 1
    path = tmp_path / "big_run.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    assert path.stat().st_size >= 1 << 20
    return path


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    big = _big_file(tmp_path)
    master, slave = os.openpty()
    # Give the terminal a size, as a real one has (a fresh pty is 0x0, on which tqdm draws nothing).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragmon", "eval", str(big), "--format", "json"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
        )
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed its end of the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
    terminal = b"".join(chunks).decode("utf-8", errors="replace")
    assert proc.returncode == 0, terminal
    assert "Traceback" not in terminal
    assert "big_run.jsonl" in terminal  # the bar's description
    assert "%|" in terminal or "B/s" in terminal
    out = json.loads(stdout)
    assert out["queries"] == out["records"] > 1000
    assert out["metrics"]["mrr"] == pytest.approx(1 / 4)


def test_no_progress_bar_when_stderr_is_a_pipe(tmp_path: Path) -> None:
    big = _big_file(tmp_path)
    result = ragmon_process("eval", big, "--format", "json")
    assert result.returncode == 0
    assert result.stderr == ""
    assert json.loads(result.stdout)["metrics"]["mrr"] == pytest.approx(1 / 4)


def test_utf8_bom_at_the_start_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    row = {"query_id": "q", "retrieved_document_ids": ["a", "b"], "relevant_document_ids": ["b"]}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    assert eval_json(path)["metrics"]["mrr"] == 0.5


def test_compare_prints_a_lone_surrogate_query_id_escaped(tmp_path: Path) -> None:
    row = {"query_id": "\ud800x", "retrieved_document_ids": ["a"], "relevant_document_ids": ["a"]}
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps(row) + "\n", encoding="utf-8")  # json.dumps escapes it as \\ud800
    b = write_jsonl(tmp_path / "b.jsonl", [{**row, "query_id": "other"}])
    result = ragmon("compare", a, b)
    assert result.returncode == 0, result.stderr
    assert "\\ud800x" in result.stdout


def test_client_libraries_log_at_warning_even_at_debug() -> None:
    import logging

    from ragmon.sidecar.logs import QUIET_LOGGERS, configure_logging

    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        root.handlers.clear()
        configure_logging("debug")
        assert logging.getLogger("ragmon").isEnabledFor(logging.DEBUG)
        for name in (*QUIET_LOGGERS, "httpcore.http11", "openai._base_client"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert {"openai", "httpx", "httpcore", "h11"} <= set(QUIET_LOGGERS)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


# --------------------------------------------------------------------------------------------
# what each command imports


def _loaded(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after running ``code``."""
    script = f"import sys\n{code}\nprint(' '.join(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    return done.stdout.split()


HEAVY = ("numpy", "openai", "grpc", "aiohttp", "prometheus_client", "google.protobuf", "sqlite3", "genai_prices",
         "ragmon.config", "ragmon.metrics", "ragmon.offline.files", "ragmon.offline.command", "ragmon.sidecar.wiring")


def test_the_command_line_loads_only_what_a_command_needs() -> None:
    """``ragmon --version`` and ``--help`` build the whole parser from light modules (the
    offline readers, the metrics, numpy, the receivers and the configuration load with the
    command that needs them), and ``import ragmon`` loads no metric until one is asked for."""
    assert _loaded("import ragmon.cli\nragmon.cli._build_parser().format_help()", HEAVY) == []
    assert _loaded("import ragmon", HEAVY) == []
    assert _loaded("import ragmon\nragmon.hit_rate", HEAVY) == ["numpy", "ragmon.metrics"]
    assert "ragmon.offline.command" in _loaded("import ragmon.cli\nragmon.cli.main(['eval', '/nonexistent.jsonl'])", HEAVY)


def test_the_package_names_its_metrics_lazily() -> None:
    import ragmon
    import ragmon.metrics

    assert {"hit_rate", "ndcg_at_k", "BatchScores", "__version__"} <= set(dir(ragmon))
    assert ragmon.ndcg_at_k is ragmon.metrics.ndcg_at_k
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ragmon.nope  # noqa: B018
