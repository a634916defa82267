"""``ragmon eval --judge`` and ``ragmon compare --judge``: generation metrics judged offline
through the real ``openai`` client against the scripted judge server (SPEC §8a)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ragmon, run_json, write_jsonl
from judge_server import JudgeServer, delay, judge_server_thread, reply, requested, status, user_text, verdict_for
from opentelemetry.trace import Tracer
from otel_helpers import record_spans, to_otlp_json

from ragmon.judge.prompts import EVALUATORS

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

# Per record, by a word of its answer: (faithfulness claims, answer relevance, relevant docs, covered reference claims)
VERDICTS: dict[str, tuple[tuple[bool, ...], str, tuple[bool, ...], tuple[bool, ...]]] = {
    "refunds": ((True, True, False), "yes", (True, False), (True, False)),
    "moon": ((False,), "no", (True,), ()),
    "greeting": ((), "partial", (False,), ()),
}

RECORDS: list[dict[str, Any]] = [
    {"query_id": "q1", "query": "What is the refund window?", "retrieved_document_ids": ["p7", "f2"],
     "relevant_document_ids": ["p7"], "answer": "Refunds are accepted within 30 days.",
     "contexts": ["Refunds are accepted within 30 days of purchase.", "Shipping takes 5 days."],
     "reference_answer": "30 days, with a receipt."},
    {"query_id": "q2", "query": "How do I reset my password?", "retrieved_document_ids": ["h1"],
     "relevant_document_ids": ["h1"], "answer": "Press the moon button.", "contexts": ["Use the reset link."]},
    {"query_id": "q3", "query": "hello", "retrieved_document_ids": ["h1"], "relevant_document_ids": ["h1"]},
]
# faithfulness 2/3 and 0; answer relevance 1 and 0; context relevance 1/2 and 1; correctness 1/2 (q1 only)
MEANS = {"faithfulness": 1 / 3, "answer_relevance": 0.5, "context_relevance": 0.75, "answer_correctness": 0.5}


def asked(body: dict[str, Any]) -> tuple[list[str], int]:
    """The evaluators of ``MEANS`` a request asks for (other evaluators may be configured too)."""
    names, n_docs = requested(body)
    return [n for n in names if n in MEANS], n_docs


def scripted(body: dict[str, Any]) -> str:
    """A valid verdict for the evaluators ``body`` asks for, chosen by the answer's key word (the
    server's default verdict for any other evaluator)."""
    names, n_docs = requested(body)
    answer = user_text(body).split("ANSWER:", 1)[1].lower()
    key = next(k for k in VERDICTS if k in answer)
    claims, relevance, docs, covered = VERDICTS[key]
    assert len(docs) == n_docs or "context_relevance" not in names
    out: dict[str, Any] = json.loads(verdict_for(body))
    for name in names:
        if name == "faithfulness":
            out[name] = {"claims": [{"claim": f"c{i}", "supported": s} for i, s in enumerate(claims)]}
        elif name == "answer_relevance":
            out[name] = {"reason": "scripted", "verdict": relevance}
        elif name == "context_relevance":
            out[name] = {"documents": [{"index": i, "relevant": r} for i, r in enumerate(docs)]}
        elif name == "answer_correctness":
            out[name] = {"reference_claims": [{"claim": f"r{i}", "covered": c} for i, c in enumerate(covered)]}
    return json.dumps(out)


@pytest.fixture
def server() -> Any:
    with judge_server_thread(responder=scripted) as s:
        yield s


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RAGMON_CONFIG", raising=False)


def judge_args(server: JudgeServer, tmp_path: Path, *extra: str | Path) -> list[str | Path]:
    return ["--judge", "--judge-base-url", server.base_url, "--judge-model", "judge-model",
            "--cache", tmp_path / "cache.sqlite3", *extra]


def judged_json(command: str, *args: str | Path) -> tuple[dict[str, Any], str]:
    """Run ``ragmon COMMAND … --format json``; it must succeed. Returns the report and stderr
    (which carries the run's judge accounting: calls, cache hits, cost)."""
    result = ragmon(command, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ragmon.toml"
    path.write_text(text)
    return path


def test_exact_means_one_call_per_record(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    out, stderr = judged_json("eval", run, *judge_args(server, tmp_path))
    for key, mean in MEANS.items():
        assert out["metrics"][key] == pytest.approx(mean), key
    assert out["metrics"]["mrr"] == 1.0  # retrieval is still scored
    # one call per record with content, each covering every evaluator that applies to it
    assert len(server.requests) == 2
    assert sorted(asked(body)[0] for body in server.requests) == [
        ["faithfulness", "answer_relevance", "context_relevance"],
        ["faithfulness", "answer_relevance", "context_relevance", "answer_correctness"],
    ]
    assert out["judged"]["faithfulness"] == {
        "scored": 2, "failed": 0, "skipped": 1, "failures": {}, "skips": {"not_applicable": 1},
    }
    assert out["judged"]["answer_correctness"]["scored"] == 1
    assert out["judged"]["answer_correctness"]["skips"] == {"not_applicable": 2}
    # every evaluator of the judge is reported, each record counted once per metric
    assert set(out["judged"]) == set(EVALUATORS) and all(k in out["metrics"] for k in EVALUATORS)
    for counts in out["judged"].values():
        assert counts["scored"] + counts["failed"] + counts["skipped"] == 3
    assert out["judge"] == {"model": "judge-model", "endpoint": server.base_url, "failed_records": 0, "causes": []}
    assert stderr == (
        f"ragmon eval: judge judge-model at {server.base_url}: 3 record(s): 2 tried, 2 answered, 0 from the cache, "
        "0 failed, 1 with nothing to judge; $0.0000 + 240 unpriced tokens, 200 input + 40 output tokens\n"
    )
    assert "estimates" not in out  # judged runs carry no lexical estimate


def test_no_claims_is_skipped_not_scored(server: JudgeServer, tmp_path: Path) -> None:
    rows = [{**RECORDS[1], "query_id": "g", "answer": "A greeting to you."}, RECORDS[1]]
    out, _ = judged_json("eval", write_jsonl(tmp_path / "run.jsonl", rows), *judge_args(server, tmp_path))
    assert out["metrics"]["faithfulness"] == 0.0  # the greeting has no claim: no score, not 1 or 0
    assert out["judged"]["faithfulness"]["skips"] == {"no_score": 1}
    assert out["metrics"]["answer_relevance"] == pytest.approx(0.25)


def test_cache_second_run_makes_no_call_and_same_output(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    first = ragmon("eval", run, *judge_args(server, tmp_path), "--format", "json")
    calls = len(server.requests)
    assert first.returncode == 0 and calls == 2
    second = ragmon("eval", run, *judge_args(server, tmp_path), "--format", "json")
    assert len(server.requests) == calls  # nothing was asked again
    assert second.stdout == first.stdout
    assert "3 record(s): 0 tried, 0 answered, 2 from the cache, 0 failed, 1 with nothing to judge; $0.0000" in second.stderr
    table_1 = ragmon("eval", run, *judge_args(server, tmp_path))
    table_2 = ragmon("eval", run, *judge_args(server, tmp_path))
    assert len(server.requests) == calls and table_1.stdout == table_2.stdout
    # another model is another judgement; --no-cache asks again
    ragmon("eval", run, "--judge", "--judge-base-url", server.base_url, "--judge-model", "other",
           "--cache", tmp_path / "cache.sqlite3")
    assert len(server.requests) == calls + 2
    ragmon("eval", run, *judge_args(server, tmp_path), "--no-cache")
    assert len(server.requests) == calls + 4


def distinct(n: int, row: dict[str, Any]) -> list[dict[str, Any]]:
    """``n`` copies of ``row`` with their own query (so neither cache answers)."""
    return [{**row, "query_id": f"q{i}", "query": f"{row['query']} ({i})"} for i in range(n)]


def test_failures_mid_run_are_counted_never_scored(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", distinct(5, RECORDS[1]))
    cfg = config(tmp_path, '[judge]\nmax_retries = 0\ntimeout = "1s"\n')
    faults = (status(500), delay(3.0), reply("this is not JSON"))  # then two good verdicts
    server.script(*faults)
    args = judge_args(server, tmp_path, "--config", cfg, "--judge-concurrency", "1")
    result = ragmon("eval", run, *args, "--format", "json", "--max-judge-failures", "3")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    for key in ("faithfulness", "answer_relevance", "context_relevance"):
        assert out["judged"][key]["scored"] == 2
        assert out["judged"][key]["failures"] == {"error": 1, "invalid": 1, "timeout": 1}
        assert out["judged"][key]["failed"] == 3
    assert out["metrics"]["faithfulness"] == 0.0 and out["metrics"]["answer_relevance"] == 0.0
    assert out["judge"]["failed_records"] == 3 and out["judge"]["causes"] == [
        {"failure": "error", "cause": "judge endpoint answered 500: scripted error", "records": 1},
        {"failure": "timeout", "cause": "no answer within judge.timeout (1s)", "records": 1},
        {"failure": "invalid", "cause": "invalid reply: no JSON object in reply", "records": 1},
    ]
    assert result.stderr.splitlines() == [
        f"ragmon eval: judge judge-model at {server.base_url}: 5 record(s): 5 tried, 3 answered, 0 from the cache, "
        "3 failed, 0 with nothing to judge; $0.0000 + 360 unpriced tokens, 300 input + 60 output tokens",
        f"ragmon eval: judge failed for 1 record(s) (error): {server.base_url}: judge endpoint answered 500: scripted error",
        f"ragmon eval: judge failed for 1 record(s) (timeout): {server.base_url}: no answer within judge.timeout (1s)",
        f"ragmon eval: judge failed for 1 record(s) (invalid): {server.base_url}: invalid reply: no JSON object in reply",
    ]
    assert len(server.requests) == 5
    server.script(*faults)
    table = ragmon("eval", run, *args, "--no-cache")
    assert table.returncode == 3  # without --max-judge-failures, one failure fails the run
    assert table.stderr.endswith(
        "ragmon eval: FAIL judge: 3 of 5 record(s) not judged: more than --max-judge-failures 0 allows (0); "
        "the causes are above\n"
    )
    assert len(server.requests) == 10
    assert re.search(r"faithfulness: failed error 1, invalid 1, timeout 1 \(never scored\)", table.stdout)
    assert f"\njudge failed for 1 record(s) (error): {server.base_url}: judge endpoint answered 500: scripted error\n" in table.stdout
    assert re.search(r"faithfulness\s+0\.0000\s+2\s+3\s+0", table.stdout)
    # the failed three were not cached: a re-run asks for exactly those
    again, _ = judged_json("eval", run, *args)
    assert len(server.requests) == 13
    assert again["judged"]["faithfulness"]["scored"] == 5


def test_budget_exhausted_is_a_failure(server: JudgeServer, tmp_path: Path) -> None:
    rows = distinct(4, RECORDS[1])
    # the budget is checked right before each call against the call's estimated cost: at
    # $10,000 per million input tokens a prompt of some hundred tokens is over $1.5
    cfg = config(tmp_path, '[judge]\nmax_usd_per_hour = 1.5\n[pricing."judge-model"]\ninput = 10000.0\noutput = 0.0\n')
    result = ragmon("eval", write_jsonl(tmp_path / "run.jsonl", rows),
                    *judge_args(server, tmp_path, "--config", cfg, "--judge-concurrency", "1"), "--format", "json")
    out = json.loads(result.stdout)
    assert len(server.requests) == 0  # no call: spend never passes the budget
    assert out["judged"]["faithfulness"]["scored"] == 0
    assert out["judged"]["faithfulness"]["failures"] == {"budget": 4}
    assert result.returncode == 3
    assert "4 record(s): 0 tried, 0 answered, 0 from the cache, 4 failed, 0 with nothing to judge; $0.0000," in result.stderr
    assert (f"judge failed for 4 record(s) (budget): {server.base_url}: not sent: the call would pass judge.max_usd_per_hour"
            in result.stderr)
    assert "FAIL judge: 4 of 4 record(s) not judged: more than --max-judge-failures 0 allows (0)" in result.stderr


def test_gate_exit_codes(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    ok = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-under", "faithfulness=0.3", "--fail-under", "hit_rate@1=1")
    assert ok.returncode == 0, ok.stderr
    assert "ok    faithfulness = 0.3333 >= 0.3" in ok.stdout
    low = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-under", "faithfulness=0.4")
    assert low.returncode == 1 and "FAIL faithfulness = 0.3333 < 0.4" in low.stderr
    both = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-under", "context_relevance=0.75",
                  "--fail-under", "answer_relevance=0.6", "--format", "json")
    assert both.returncode == 1
    assert [t["passed"] for t in json.loads(both.stdout)["thresholds"]] == [True, False]


def test_gate_on_a_metric_no_record_scored(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS[1:])  # no reference answer anywhere
    result = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-under", "answer_correctness=0.1")
    assert result.returncode == 1
    assert "no record was scored for answer_correctness (0 failed, 2 skipped)" in result.stderr
    server.script(status(500), status(500), status(500), status(500), status(500), status(500))
    failing = ragmon("eval", write_jsonl(tmp_path / "one.jsonl", RECORDS[1:2]), *judge_args(server, tmp_path),
                     "--no-cache", "--fail-under", "faithfulness=0.1")
    assert failing.returncode == 3  # the judge failed: that, not the threshold, is the run's verdict
    assert "no record was scored for faithfulness (1 failed, 0 skipped)" in failing.stderr


def test_gate_without_judge_and_bad_specs(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    result = ragmon("eval", run, "--fail-under", "faithfulness=0.5")
    assert result.returncode == 1
    assert "faithfulness is judged only with --judge (the lexical estimate is faithfulness_lexical)" in result.stderr
    for spec in ("faithfulness@5=0.8", "faithfullness=0.8", "faithfulness=2"):
        bad = ragmon("eval", run, "--fail-under", spec)
        assert bad.returncode == 2 and "--fail-under" in bad.stderr, spec
    assert "did you mean faithfulness" in ragmon("eval", run, "--fail-under", "faithfullness=0.8").stderr


def test_lexical_estimates_are_labelled(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    out = run_json("eval", run)
    assert set(out["estimates"]) == {"faithfulness_lexical"}
    assert not any(k in out["metrics"] for k in MEANS)  # never under a judged metric's name
    assert out["estimates"]["faithfulness_lexical"] == pytest.approx(0.5)  # q1 supported, q2 not
    assert out["estimated"]["faithfulness_lexical"]["scored"] == 2
    table = ragmon("eval", run).stdout
    assert "lexical ESTIMATES" in table and re.search(r"faithfulness_lexical\s+0\.5000\s+2\s+0\s+1", table)
    markdown = ragmon("eval", run, "--format", "markdown").stdout
    assert "lexical ESTIMATES" in markdown and "| faithfulness_lexical | 0.5000 | 2 | 0 | 1 |" in markdown
    assert ragmon("eval", run, "--fail-under", "faithfulness_lexical=0.5").returncode == 0
    assert ragmon("eval", run, "--fail-under", "faithfulness_lexical=0.6").returncode == 1
    # a retrieval-only run shows no generation table
    retrieval = write_jsonl(tmp_path / "r.jsonl", [RECORDS[2]])
    assert "generation" not in ragmon("eval", retrieval).stdout


def test_markdown_report_of_a_judged_run(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    md = ragmon("eval", run, *judge_args(server, tmp_path), "--format", "markdown").stdout
    assert "judged by judge-model, one call per record" in md
    assert "| faithfulness | 0.3333 | 2 | 0 | 1 |" in md
    assert "| answer_correctness | 0.5000 | 1 | 0 | 2 |" in md


def test_judge_needs_an_endpoint_and_flags_need_judge(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    result = ragmon("eval", run, "--judge", "--cache", tmp_path / "c.sqlite3")
    assert result.returncode == 2 and "--judge needs an endpoint" in result.stderr
    result = ragmon("eval", run, "--judge-model", "x")
    assert result.returncode == 2 and "--judge-model needs --judge" in result.stderr
    bad = config(tmp_path, "[judge]\nconcurrency = 0\n")
    result = ragmon("eval", run, "--judge", "--config", bad, "--judge-base-url", "http://127.0.0.1:9/v1")
    assert result.returncode == 2 and "judge.concurrency" in result.stderr
    not_db = tmp_path / "notdb"
    not_db.write_text("hello, not sqlite" * 100)
    result = ragmon("eval", run, "--judge", "--judge-base-url", "http://127.0.0.1:9/v1", "--cache", not_db)
    assert result.returncode == 2 and "--cache" in result.stderr and "Traceback" not in result.stderr


def _traces(tracer: Tracer) -> None:
    for i, row in enumerate(RECORDS[:2]):
        with tracer.start_as_current_span("query") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", row["query"])
            root.set_attribute("output.value", row["answer"])
            if "reference_answer" in row:
                root.set_attribute("ragmon.reference_answer", row["reference_answer"])
            root.set_attribute("ragmon.relevant_document_ids", row["relevant_document_ids"])
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for rank, (doc, text) in enumerate(zip(row["retrieved_document_ids"], row["contexts"])):
                    span.set_attribute(f"retrieval.documents.{rank}.document.id", doc)
                    span.set_attribute(f"retrieval.documents.{rank}.document.content", text)


def _partial(tracer: Tracer) -> None:
    """A trace whose second document's content was not captured."""
    with tracer.start_as_current_span("query") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "Where is the moon button?")
        root.set_attribute("output.value", "Press the moon button.")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", "a")
            span.set_attribute("retrieval.documents.0.document.content", "The moon button is on top.")
            span.set_attribute("retrieval.documents.1.document.id", "b")


def test_otlp_json_dump_is_judged_like_jsonl(server: JudgeServer, tmp_path: Path) -> None:
    spans = list(record_spans(_traces))
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(to_otlp_json([s]).decode() + "\n" for s in spans))
    out, _ = judged_json("eval", dump, *judge_args(server, tmp_path))
    assert out["records"] == 2 and len(server.requests) == 2
    for key, mean in MEANS.items():
        assert out["metrics"][key] == pytest.approx(mean), key


def test_otlp_json_dump_with_a_context_not_captured(server: JudgeServer, tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_bytes(to_otlp_json(list(record_spans(_partial))))
    out, _ = judged_json("eval", dump, *judge_args(server, tmp_path))
    # faithfulness and context relevance need every document's text: not judged on half of it
    assert asked(server.requests[0])[0] == ["answer_relevance"]
    assert out["judged"]["faithfulness"]["skips"] == {"not_applicable": 1}
    assert out["judged"]["answer_relevance"]["scored"] == 1


def test_compare_judged_metrics_paired_by_query(server: JudgeServer, tmp_path: Path) -> None:
    good = {"answer": "Refunds are accepted within 30 days.", "contexts": RECORDS[0]["contexts"]}
    bad = {"answer": "Press the moon button.", "contexts": ["Use the reset link."]}
    base = {"query": "What is the refund window?", "retrieved_document_ids": ["p7"], "relevant_document_ids": ["p7"]}
    a = write_jsonl(tmp_path / "a.jsonl", [{**base, "query_id": f"q{i}", **bad} for i in range(6)] + [{**base, "query_id": "only-a", **bad}])
    b = write_jsonl(tmp_path / "b.jsonl", [{**base, "query_id": f"q{i}", **(good if i < 4 else bad)} for i in range(6)])
    args = judge_args(server, tmp_path, "--judge-concurrency", "1")
    out, stderr = judged_json("compare", a, b, *args)
    assert f"ragmon compare: judge judge-model at {server.base_url}: 13 record(s): 2 tried, 2 answered, 11 from the cache" in stderr
    assert len(server.requests) == 2  # 13 records, two distinct contents: the judge's cache answers the rest
    f = out["metrics"]["faithfulness"]
    assert f["pairs"] == 6 and f["a"] == 0.0 and f["b"] == pytest.approx(4 / 6 * 2 / 3)
    assert f["diff"] == pytest.approx(4 / 9) and 0 < f["p_value"] <= 1
    assert f["ci95"][0] <= f["diff"] <= f["ci95"][1]
    rel = out["metrics"]["answer_relevance"]
    assert rel["diff"] == pytest.approx(4 / 6) and rel["p_value"] == pytest.approx(2 / 16, abs=0.02)  # exact: 2 of 2^4 sign patterns
    assert out["judged"]["a"]["faithfulness"]["scored"] == 7 and out["judged"]["b"]["faithfulness"]["scored"] == 6
    assert out["metrics"]["answer_correctness"]["pairs"] == 0 and out["metrics"]["answer_correctness"]["diff"] is None
    same, _ = judged_json("compare", a, b, *args)
    assert len(server.requests) == 2
    assert same == out
    table = ragmon("compare", a, b, *args).stdout
    assert "pairs: common queries scored in both runs" in table and re.search(r"faithfulness\s+6\s+0\.0000\s+0\.4444", table)


def test_compare_without_judge_compares_the_estimates(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", RECORDS)
    out = run_json("compare", a, a)
    assert out["estimates"]["faithfulness_lexical"]["diff"] == 0.0
    assert out["estimates"]["faithfulness_lexical"]["pairs"] == 2
    assert not any(k in out["metrics"] for k in MEANS)


def test_record_without_contexts_is_not_judged_for_faithfulness(server: JudgeServer, tmp_path: Path) -> None:
    no_contexts = {k: v for k, v in RECORDS[1].items() if k != "contexts"}
    empty = {**RECORDS[1], "query_id": "e", "query": "Empty?", "contexts": []}
    out, _ = judged_json("eval", write_jsonl(tmp_path / "run.jsonl", [no_contexts, empty]), *judge_args(server, tmp_path))
    # unknown contexts: only answer relevance; an empty list: the answer is judged against nothing
    assert sorted(asked(body) for body in server.requests) == [(["answer_relevance"], 0), (["faithfulness", "answer_relevance"], 0)]
    assert out["judged"]["faithfulness"]["scored"] == 1 and out["judged"]["faithfulness"]["skips"] == {"not_applicable": 1}
    assert out["judged"]["context_relevance"]["skips"] == {"not_applicable": 2}


def test_progress_bar_on_a_terminal_only(server: JudgeServer, tmp_path: Path) -> None:
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ragmon", "eval", run, *judge_args(server, tmp_path), "--no-cache"],
            stdout=subprocess.PIPE, stderr=secondary, timeout=60, text=True,
        )
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO once everything written was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    assert done.returncode == 0
    assert b"judging:" in shown and b"/3 [" in shown  # the bar, on the terminal
    piped = ragmon("eval", run, *judge_args(server, tmp_path), "--no-cache")
    assert "judging" not in piped.stderr and "/3 [" not in piped.stderr


def test_cache_key_covers_content_model_evaluators_and_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragmon.judge import prompts
    from ragmon.model import RagRecord, RetrievedDocument
    from ragmon.offline.cache import cache_key, prompt_fingerprint

    def record(**change: Any) -> RagRecord:
        fields: dict[str, Any] = dict(
            trace_id=b"\x01" * 16, service="s", variant="", start_ns=0, end_ns=0, query="q", answer="a",
            reference_answer="r", retrieved=(RetrievedDocument("d", None, "text"),),
        )
        return RagRecord(**(fields | change))

    both: tuple[Any, ...] = ("faithfulness", "answer_relevance")
    base = cache_key(record(), both, "m")
    assert cache_key(record(trace_id=b"\x02" * 16, service="other"), both, "m") == base  # not content
    assert cache_key(record(retrieved=(RetrievedDocument("other-id", None, "text"),)), both, "m") == base  # ids are not sent
    changed = [
        cache_key(record(), both, "m2"),
        cache_key(record(), ("faithfulness",), "m"),
        cache_key(record(query="q2"), both, "m"),
        cache_key(record(answer="a2"), both, "m"),
        cache_key(record(reference_answer="r2"), both, "m"),
        cache_key(record(retrieved=(RetrievedDocument("d", None, "text2"),)), both, "m"),
        cache_key(record(reranked=(RetrievedDocument("d", None, "reranked"),)), both, "m"),
    ]
    assert len({base, *changed}) == 1 + len(changed)
    prompt_fingerprint.cache_clear()
    monkeypatch.setattr(prompts, "_SYSTEM", prompts._SYSTEM + " Be strict.")
    assert cache_key(record(), both, "m") != base  # a prompt change is a miss
    prompt_fingerprint.cache_clear()


def test_fail_over_for_metrics_where_higher_is_worse(server: JudgeServer, tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    over = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-over", "answer_relevance=0.4", "--format", "json")
    assert over.returncode == 1 and "FAIL answer_relevance = 0.5000 > 0.4" in over.stderr
    assert json.loads(over.stdout)["thresholds"] == [
        {"metric": "answer_relevance", "max": 0.4, "value": 0.5, "passed": False},
    ]
    ok = ragmon("eval", run, *judge_args(server, tmp_path), "--fail-over", "answer_relevance=0.5")
    assert ok.returncode == 0 and "ok    answer_relevance = 0.5000 <= 0.5" in ok.stdout
    # toxicity (0 = clean) takes --fail-over only; before the judge has it, it is unknown
    wrong = ragmon("eval", run, "--fail-under", "toxicity=0.1")
    expected = "gate it with --fail-over toxicity=VALUE" if "toxicity" in EVALUATORS else "unknown metric"
    assert wrong.returncode == 2 and expected in wrong.stderr
