"""A judge that fails loudly (``ragmon eval`` / ``compare --judge``): a failed judgement fails
the run with exit 3 unless ``--max-judge-failures`` allows it, stderr and the report name each
cause once (endpoint, HTTP status or exception, first message), and the counts are exact —
through the real ``openai`` client against a dead port and the scripted judge server."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ragmon, write_jsonl
from judge_server import JudgeServer, drop, judge_server_thread, reply, status

ROW: dict[str, Any] = {
    "query": "How do I reset my password?", "retrieved_document_ids": ["h1"], "relevant_document_ids": ["h1"],
    "answer": "Use the reset link.", "contexts": ["Use the reset link on the sign-in page."],
}


def rows(n: int) -> list[dict[str, Any]]:
    """``n`` records of distinct content (so no cache answers one for another)."""
    return [{**ROW, "query_id": f"q{i}", "query": f"{ROW['query']} ({i})"} for i in range(n)]


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGMON_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Any:
    with judge_server_thread() as s:
        yield s


def dead_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ragmon.toml"
    path.write_text(text)
    return path


def judge(url: str, *extra: str | Path) -> list[str | Path]:
    return ["--judge", "--judge-base-url", url, "--judge-model", "judge-model", "--no-cache", *extra]


def test_dead_endpoint_fails_the_run_and_names_the_cause(tmp_path: Path) -> None:
    url = dead_url()
    run = write_jsonl(tmp_path / "run.jsonl", rows(3))
    cfg = config(tmp_path, "[judge]\nmax_retries = 0\n")
    result = ragmon("eval", run, *judge(url, "--config", cfg, "--judge-concurrency", "1"), "--format", "json")
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"ragmon eval: judge judge-model at {url}: 3 record(s): 3 tried, 0 answered, 0 from the cache, "
        "3 failed, 0 with nothing to judge; $0.0000, 0 input + 0 output tokens"
    )
    assert lines[1].startswith(
        f"ragmon eval: judge failed for 3 record(s) (error): {url}: "
        "judge connection failed (ConnectError): ConnectionRefusedError: "
    )
    assert lines[2:] == [
        "ragmon eval: FAIL judge: 3 of 3 record(s) not judged: more than --max-judge-failures 0 allows (0); "
        "the causes are above"
    ]
    out = json.loads(result.stdout)
    assert out["judge"]["failed_records"] == 3
    [cause] = out["judge"]["causes"]
    assert cause["failure"] == "error" and cause["records"] == 3
    assert cause["cause"].startswith("judge connection failed (ConnectError): ConnectionRefusedError: ")
    assert out["passed"] is True  # no threshold failed: the judge's failure is exit 3, not 1
    assert "Traceback" not in result.stderr


def test_a_run_where_no_judgement_succeeded_never_passes(tmp_path: Path) -> None:
    url = dead_url()
    run = write_jsonl(tmp_path / "run.jsonl", rows(2))
    result = ragmon("eval", run, *judge(url, "--max-judge-failures", "100%"))
    assert result.returncode == 3
    assert result.stderr.endswith(
        "ragmon eval: FAIL judge: 2 of 2 record(s) not judged: no judgement succeeded; the causes are above\n"
    )


def test_breaker_open_is_named_as_its_own_cause(tmp_path: Path) -> None:
    url = dead_url()
    run = write_jsonl(tmp_path / "run.jsonl", rows(15))
    result = ragmon("eval", run, *judge(url))
    assert result.returncode == 3
    # the breaker opens after repeated failures; the records it refused were never sent
    assert (f"ragmon eval: judge failed for 11 record(s) (breaker_open): {url}: "
            "not sent: the circuit breaker is open after repeated failures\n") in result.stderr
    assert f"judge failed for 4 record(s) (error): {url}: judge connection failed (ConnectError)" in result.stderr
    assert "15 record(s): 4 tried, 0 answered, 0 from the cache, 15 failed" in result.stderr
    assert f"judge failed for 11 record(s) (breaker_open): {url}: not sent" in result.stdout  # the report too


def test_http_status_and_its_message(server: JudgeServer, tmp_path: Path) -> None:
    server.script(status(500, error="model overloaded, try later"), status(404, error="The model `judge-model` does not exist"))
    run = write_jsonl(tmp_path / "run.jsonl", rows(2))
    cfg = config(tmp_path, "[judge]\nmax_retries = 0\n")
    result = ragmon("eval", run, *judge(server.base_url, "--config", cfg, "--judge-concurrency", "1"), "--format", "markdown")
    assert result.returncode == 3
    assert sorted(line for line in result.stderr.splitlines() if "judge failed for" in line) == [
        f"ragmon eval: judge failed for 1 record(s) (error): {server.base_url}: judge endpoint answered 404: "
        "The model `judge-model` does not exist",
        f"ragmon eval: judge failed for 1 record(s) (error): {server.base_url}: judge endpoint answered 500: "
        "model overloaded, try later",
    ]
    assert "2 record(s): 2 tried, 2 answered" not in result.stderr  # an error status is no answer
    assert "2 record(s): 2 tried, 0 answered, 0 from the cache, 2 failed" in result.stderr
    assert f"- judge failed for 1 record(s) (error): {server.base_url}: judge endpoint answered 500" in result.stdout


def test_connection_dropped_mid_call(server: JudgeServer, tmp_path: Path) -> None:
    server.script(drop())
    run = write_jsonl(tmp_path / "run.jsonl", rows(1))
    cfg = config(tmp_path, "[judge]\nmax_retries = 0\n")
    result = ragmon("eval", run, *judge(server.base_url, "--config", cfg))
    assert result.returncode == 3
    assert f"judge failed for 1 record(s) (error): {server.base_url}: judge connection failed (" in result.stderr


@pytest.mark.parametrize(
    ("allowed", "code", "why"),
    [
        ("1", 0, ""),
        ("0", 3, "more than --max-judge-failures 0 allows (0)"),
        ("50%", 0, ""),  # 50% of 2 records judged: 1
        ("49.9%", 3, "more than --max-judge-failures 49.9% allows (0)"),
    ],
)
def test_max_judge_failures_count_and_share(
    server: JudgeServer, tmp_path: Path, allowed: str, code: int, why: str
) -> None:
    server.script(reply("this is not JSON"))
    run = write_jsonl(tmp_path / "run.jsonl", rows(2))
    result = ragmon("eval", run, *judge(server.base_url, "--judge-concurrency", "1", "--max-judge-failures", allowed))
    assert result.returncode == code, result.stderr
    assert "judge failed for 1 record(s) (invalid): " in result.stderr
    assert "2 record(s): 2 tried, 2 answered, 0 from the cache, 1 failed" in result.stderr
    if why:
        assert f"FAIL judge: 1 of 2 record(s) not judged: {why}" in result.stderr
    else:
        assert "FAIL judge" not in result.stderr


def test_records_with_nothing_to_judge_are_not_counted_as_judged(server: JudgeServer, tmp_path: Path) -> None:
    server.script(reply("this is not JSON"))
    bare = {"query_id": "bare", "query": "hello", "retrieved_document_ids": ["h1"], "relevant_document_ids": ["h1"]}
    run = write_jsonl(tmp_path / "run.jsonl", [*rows(2), bare, {**bare, "query_id": "bare2"}])
    result = ragmon("eval", run, *judge(server.base_url, "--judge-concurrency", "1", "--max-judge-failures", "25%"))
    # 25% of the 2 records with something to judge (not of all 4): no failure allowed
    assert result.returncode == 3, result.stderr
    assert "4 record(s): 2 tried, 2 answered, 0 from the cache, 1 failed, 2 with nothing to judge" in result.stderr
    assert "FAIL judge: 1 of 2 record(s) not judged: more than --max-judge-failures 25% allows (0)" in result.stderr


def test_threshold_and_judge_failure_judge_wins(server: JudgeServer, tmp_path: Path) -> None:
    server.script(status(401, error="invalid api key"))
    run = write_jsonl(tmp_path / "run.jsonl", rows(2))
    result = ragmon("eval", run, *judge(server.base_url, "--judge-concurrency", "1"), "--fail-under", "hit_rate@1=1",
                    "--fail-under", "faithfulness=1")
    assert result.returncode == 3
    assert "FAIL judge: 1 of 2 record(s) not judged" in result.stderr


def test_compare_fails_when_the_judge_fails(tmp_path: Path) -> None:
    url = dead_url()
    a = write_jsonl(tmp_path / "a.jsonl", rows(2))
    b = write_jsonl(tmp_path / "b.jsonl", rows(2))
    result = ragmon("compare", a, b, *judge(url), "--format", "json")
    assert result.returncode == 3
    assert "ragmon compare: FAIL judge: 4 of 4 record(s) not judged" in result.stderr  # a failure is never cached
    out = json.loads(result.stdout)
    assert out["judge"]["endpoint"] == url
    assert out["judge"]["a"]["failed_records"] == 2 and out["judge"]["b"]["failed_records"] == 2


@pytest.mark.parametrize("bad", ["-1", "x", "5.5", "101%", "-3%", "%", ""])
def test_bad_max_judge_failures_is_a_usage_error_before_any_call(server: JudgeServer, tmp_path: Path, bad: str) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", rows(1))
    result = ragmon("eval", run, *judge(server.base_url, f"--max-judge-failures={bad}"))
    assert result.returncode == 2
    assert result.stderr == (
        f"ragmon eval: error: --max-judge-failures takes a count >= 0 or a percentage such as 5%, got {bad!r}\n"
    )
    assert server.requests == []


def test_max_judge_failures_needs_judge(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", rows(1))
    result = ragmon("eval", run, "--max-judge-failures", "3")
    assert result.returncode == 2 and "--max-judge-failures needs --judge" in result.stderr


def test_a_long_message_is_cut(server: JudgeServer, tmp_path: Path) -> None:
    server.script(status(500, error="overloaded " + "x" * 500 + "\nsecond line"))
    run = write_jsonl(tmp_path / "run.jsonl", rows(1))
    cfg = config(tmp_path, "[judge]\nmax_retries = 0\n")
    result = ragmon("eval", run, *judge(server.base_url, "--config", cfg))
    [line] = [line for line in result.stderr.splitlines() if "judge failed for" in line]
    said = line.split("judge endpoint answered 500: ", 1)[1]
    assert said == ("overloaded " + "x" * 500)[:200] + "…"  # the first line, 200 characters at most
