"""A result per record (``ragmon eval --records``), the worst records of the table and markdown
reports, and the judge's agreement with human labels (``--human``), through the real CLI and
the real ``openai`` client against the scripted judge server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ragmon, write_jsonl
from judge_server import JudgeServer, judge_server_thread, status, user_text, verdict_for

RECORDS: list[dict[str, Any]] = [
    {"query_id": "q1", "query": "What is the refund window?", "retrieved_document_ids": ["p7", "f2"],
     "relevant_document_ids": ["p7"], "answer": "Refunds are accepted within 30 days. Keep the box.",
     "contexts": ["Refunds are accepted within 30 days of purchase.", "Shipping takes 5 days."],
     "reference_answer": "30 days, with a receipt."},
    {"query_id": "q2", "query": "How do I reset my password?", "retrieved_document_ids": ["h1"],
     "relevant_document_ids": ["x9"], "answer": "Press the moon button, you fool.", "contexts": ["Use the reset link."]},
    {"query": "hello", "retrieved_document_ids": ["h1"]},  # no query_id: named by its line, 3
    {"query_id": "q4", "query": "Opening hours?", "answer": "Nine to five.", "contexts": ["Open 9-17."]},  # no ids
]


def responder(body: dict[str, Any]) -> str:
    """Verdicts by the answer's key word."""
    answer = user_text(body).split("ANSWER:", 1)[1].lower()
    if "refunds" in answer:
        return verdict_for(body, supported=(True, False), relevance="yes", relevant=lambda i: i == 0, covered=(True, False))
    if "moon" in answer:
        return verdict_for(body, supported=(False,), relevance="no", relevant=lambda i: False,
                           coherence={"on_topic": False}, toxicity={"harassment": "medium"})
    return verdict_for(body, supported=(True,), relevance="partial", toxicity={"profanity": "low"})


@pytest.fixture
def server() -> Any:
    with judge_server_thread(responder=responder) as s:
        yield s


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGMON_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def judge(server: JudgeServer, tmp_path: Path, *extra: str | Path) -> list[str | Path]:
    return ["--judge", "--judge-base-url", server.base_url, "--judge-model", "judge-model",
            "--cache", tmp_path / "cache.sqlite3", "--k", "1", *extra]


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


NONE_TOXIC = {"hate": "none", "harassment": "none", "violence": "none", "sexual": "none", "self_harm": "none", "profanity": "none"}
ALL_COHERENT = {"logical_order": True, "self_consistent": True, "well_formed": True, "on_topic": True}
RETRIEVAL = ("hit_rate@1", "mrr", "recall@1", "precision@1", "ndcg@1")


def test_records_file_exact(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    out = tmp_path / "records.jsonl"
    result = ragmon("eval", run, *judge(server, tmp_path, "--records", out, "--max-judge-failures", "0"))
    assert result.returncode == 0, result.stderr
    lines = read_lines(out)
    assert [line["record"] for line in lines] == ["q1", "q2", 3, "q4"]
    assert all(line["file"] == str(run) for line in lines)
    q1, q2, third, q4 = lines
    assert q1["scores"] == {
        "hit_rate@1": 1.0, "mrr": 1.0, "recall@1": 1.0, "precision@1": 1.0, "ndcg@1": 1.0,
        "faithfulness": 0.5, "answer_relevance": 1.0, "context_relevance": 0.5, "answer_correctness": 0.5,
        "coherence": 1.0, "toxicity": 0.0,
    }
    assert "why" not in q1
    assert q1["verdicts"] == {
        "faithfulness": {"claims": [{"claim": "claim 0", "supported": True}, {"claim": "claim 1", "supported": False}]},
        "answer_relevance": {"verdict": "yes"},
        "context_relevance": {"documents": [{"rank": 1, "id": "p7", "relevant": True}, {"rank": 2, "id": "f2", "relevant": False}]},
        "answer_correctness": {"reference_claims": [{"claim": "ref 0", "covered": True}, {"claim": "ref 1", "covered": False}]},
        "coherence": {"checks": ALL_COHERENT},
        "toxicity": {"categories": NONE_TOXIC},
    }
    # q2: retrieval scored 0 (its relevant document was not retrieved), judged as bad
    assert q2["scores"] == {
        **dict.fromkeys(RETRIEVAL, 0.0), "faithfulness": 0.0, "answer_relevance": 0.0, "context_relevance": 0.0,
        "answer_correctness": None, "coherence": 0.75, "toxicity": 2 / 3,
    }
    assert q2["why"] == {"answer_correctness": "skipped (not_applicable)"}
    assert q2["verdicts"]["coherence"] == {"checks": {**ALL_COHERENT, "on_topic": False}}
    assert q2["verdicts"]["toxicity"] == {"categories": {**NONE_TOXIC, "harassment": "medium"}}
    # the third: unlabelled, nothing to judge
    assert third["scores"] == dict.fromkeys([*RETRIEVAL, "faithfulness", "answer_relevance", "context_relevance",
                                             "answer_correctness", "coherence", "toxicity"])
    assert third["why"] == {
        **dict.fromkeys(RETRIEVAL, "unlabelled: no document of the record is labelled relevant"),
        **dict.fromkeys(["faithfulness", "answer_relevance", "context_relevance", "answer_correctness", "coherence",
                         "toxicity"], "skipped (not_applicable)"),
    }
    assert "verdicts" not in third
    # q4: no document ids: retrieval not applicable, judged all the same; its context named by position
    assert q4["why"] == {
        **dict.fromkeys(RETRIEVAL, "not applicable: the record carries no document ids"),
        "answer_correctness": "skipped (not_applicable)",
    }
    assert q4["scores"]["answer_relevance"] == 0.5
    assert q4["verdicts"]["context_relevance"] == {"documents": [{"rank": 1, "id": "0", "relevant": True}]}
    # a re-run answered by the disk cache writes the same file (details are cached with the scores)
    calls = len(server.requests)
    again = tmp_path / "again.jsonl"
    assert ragmon("eval", run, *judge(server, tmp_path, "--records", again)).returncode == 0
    assert len(server.requests) == calls and again.read_text() == out.read_text()


def test_records_name_the_failure_cause(server: JudgeServer, tmp_path: Path) -> None:
    cfg = tmp_path / "ragmon.toml"
    cfg.write_text("[judge]\nmax_retries = 0\n")
    server.script(status(500, error="overloaded"))
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS[1:2])
    out = tmp_path / "records.jsonl"
    result = ragmon("eval", run, *judge(server, tmp_path, "--records", out, "--config", cfg))
    assert result.returncode == 3
    [line] = read_lines(out)
    cause = f"failed (error): judge endpoint answered 500: overloaded"
    assert line["why"] == {key: cause for key in ("faithfulness", "answer_relevance", "context_relevance", "coherence", "toxicity")} | {
        "answer_correctness": "skipped (not_applicable)"}
    assert "verdicts" not in line


def test_worst_records_in_table_and_markdown(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    table = ragmon("eval", run, *judge(server, tmp_path, "--worst", "2"))
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert "worst faithfulness (lowest 2 of 3 scored)\n" in text
    block = text.split("worst faithfulness (lowest 2 of 3 scored)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block[1:] == [
        "q2            0.0000  unsupported: «claim 0»",
        "q1            0.5000  unsupported: «claim 1»",
    ]
    # a perfect score is never among the worst
    assert "worst toxicity (highest 2 of 3 scored)" in text
    assert "\nrecord  toxicity  why\nq2        0.6667  harassment medium\nq4        0.3333  profanity low\n" in text
    assert "worst context_relevance (lowest 2 of 3 scored)" in text and "not relevant: rank 1" in text
    assert "worst coherence (lowest 1 of 3 scored, the rest perfect)" in text and "failed: on_topic" in text
    assert "worst answer_correctness (lowest 1 of 1 scored)" in text and "not covered: «ref 1»" in text
    md = ragmon("eval", run, *judge(server, tmp_path, "--format", "markdown", "--worst", "1")).stdout
    assert "**worst answer_relevance (lowest 1 of 3 scored)**\n\n| record | answer_relevance | why |" in md
    assert "| q2 | 0.0000 | verdict: no |" in md
    none = ragmon("eval", run, *judge(server, tmp_path, "--worst", "0")).stdout
    assert "worst " not in none


def human_file(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    return write_jsonl(tmp_path / "human.jsonl", rows)


def test_human_agreement_in_every_format(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    labels = human_file(tmp_path, [
        {"record": "q1", "faithfulness": 1, "answer_relevance": 1},
        {"record": "q2", "faithfulness": 0, "answer_relevance": 0},
        {"record": "q4", "faithfulness": 0, "answer_relevance": 1},
    ])
    result = ragmon("eval", run, *judge(server, tmp_path, "--human", labels, "--format", "json", "--records", tmp_path / "r.jsonl"))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # faithfulness: judge 0.5, 0.0, 1.0 against 1, 0, 0: at threshold 0.5 -> judge 1, 0, 1
    f = out["agreement"]["faithfulness"]
    assert f["n"] == 3 and f["threshold"] == 0.5
    assert f["confusion"] == {"tp": 1, "fp": 1, "fn": 0, "tn": 1}
    assert f["accuracy"] == pytest.approx(2 / 3, abs=1e-12)
    # p_o 2/3; judge 1s 2/3, human 1s 1/3: p_e = 2/3*1/3 + 1/3*2/3 = 4/9; kappa = (6/9-4/9)/(5/9) = 0.4
    assert f["kappa"] == pytest.approx(0.4, abs=1e-12)
    # ranks judge (2, 1, 3), human (3, 1.5, 1.5); centred (0, -1, 1) and (1, -0.5, -0.5): covariance 0, rho = 0
    assert f["spearman"] == pytest.approx(0.0, abs=1e-12)
    assert set(f["ci95"]) == {"spearman", "kappa", "accuracy"}
    a = out["agreement"]["answer_relevance"]
    # judge 1.0, 0.0, 0.5 against 1, 0, 1: all agree at 0.5
    assert a["confusion"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 1} and a["accuracy"] == 1.0 and a["kappa"] == pytest.approx(1.0)
    lines = read_lines(tmp_path / "r.jsonl")
    assert lines[0]["human"] == {"faithfulness": 1.0, "answer_relevance": 1.0} and "human" not in lines[2]
    table = ragmon("eval", run, *judge(server, tmp_path, "--human", labels)).stdout
    assert "agreement with the human labels (95% bootstrap intervals)" in table
    assert "faithfulness: judge score >= 0.5 counts as 1" in table
    assert "judge 1        1        1" in table and "judge 0        0        1" in table
    md = ragmon("eval", run, *judge(server, tmp_path, "--human", labels, "--format", "markdown")).stdout
    assert "| judge 1 | 1 | 1 |" in md and "| faithfulness | 3 | 0.000 [" in md
    stricter = json.loads(ragmon("eval", run, *judge(server, tmp_path, "--human", labels, "--human-threshold", "0.75",
                                                      "--format", "json")).stdout)
    assert stricter["agreement"]["faithfulness"]["confusion"] == {"tp": 0, "fp": 1, "fn": 1, "tn": 1}
    assert stricter["agreement"]["faithfulness"]["threshold"] == 0.75


def test_human_labels_left_out_are_said(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    labels = human_file(tmp_path, [{"record": "q1", "faithfulness": 1}, {"record": "nope", "faithfulness": 0},
                                    {"record": 3, "faithfulness": 0}])
    result = ragmon("eval", run, *judge(server, tmp_path, "--human", labels, "--format", "json"))
    assert result.returncode == 0, result.stderr
    assert ("ragmon eval: warning: faithfulness: of the labelled records, 1 have no judge's score and 1 are not in "
            "the run (matched by query_id, else line): left out") in result.stderr
    assert json.loads(result.stdout)["agreement"]["faithfulness"]["n"] == 1


def test_human_flag_errors(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    labels = human_file(tmp_path, [{"record": "q1", "faithfulness": 1}])
    no_judge = ragmon("eval", run, "--human", labels)
    assert no_judge.returncode == 2 and no_judge.stderr == (
        "ragmon eval: error: --human needs --judge (agreement is the judge's with the labels)\n")
    missing = ragmon("eval", run, *judge(server, tmp_path, "--human", tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and "absent.jsonl" in missing.stderr and server.requests == []
    bad = ragmon("eval", run, *judge(server, tmp_path, "--human", labels, "--human-threshold", "2"))
    assert bad.returncode == 2 and "--human-threshold takes a number in [0, 1], got 2" in bad.stderr
    worst = ragmon("eval", run, "--worst", "-1")
    assert worst.returncode == 2 and "--worst takes a count >= 0, got -1" in worst.stderr
    unwritable = ragmon("eval", run, "--records", tmp_path / "no" / "such" / "dir.jsonl")
    assert unwritable.returncode == 2 and unwritable.stderr.startswith("ragmon eval: error: --records ")
    judged = ragmon("eval", run, *judge(server, tmp_path, "--records", tmp_path))  # a directory
    assert judged.returncode == 2 and judged.stderr == f"ragmon eval: error: --records {tmp_path}: Is a directory\n"
    assert server.requests == []  # said before any call


def test_records_without_judge(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS[:2])
    out = tmp_path / "records.jsonl"
    assert ragmon("eval", run, "--records", out, "--k", "1").returncode == 0
    lines = read_lines(out)
    # without --judge the lexical estimate is the generation metric
    assert set(lines[0]["scores"]) == {*RETRIEVAL, "faithfulness_lexical"}
    assert lines[1]["scores"]["hit_rate@1"] == 0.0
