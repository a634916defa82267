"""The Python API (``ragmon.offline.api``): the same results as ``ragmon eval``, per record and
aggregate, and ``check`` failing with a message that names the failing records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ragmon, write_jsonl
from judge_server import JudgeServer, judge_server_thread, status, user_text, verdict_for

from ragmon.errors import InputError, UsageError
from ragmon.offline.api import Evaluation, JudgeSettings, evaluate

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROWS: list[dict[str, Any]] = [
    {"query_id": "q1", "query": "refund window?", "retrieved_document_ids": ["p7", "f2"], "relevant_document_ids": ["p7"],
     "answer": "Refunds are accepted within 30 days.", "contexts": ["Refunds are accepted within 30 days.", "Shipping."]},
    {"query_id": "q2", "query": "reset password?", "retrieved_document_ids": ["h1", "h2"], "relevant_document_ids": ["h2"],
     "answer": "Press the moon button.", "contexts": ["Use the reset link.", "Links expire."]},
    {"query_id": "q3", "query": "opening hours?", "retrieved_document_ids": ["o1"], "relevant_document_ids": ["o9"],
     "answer": "Nine to five.", "contexts": ["Open 9-17."]},
]


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGMON_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def responder(body: dict[str, Any]) -> str:
    answer = user_text(body).split("ANSWER:", 1)[1].lower()
    if "moon" in answer:
        return verdict_for(body, supported=(False, True), relevance="no")
    return verdict_for(body, supported=(True,), relevance="yes")


@pytest.fixture
def server() -> Any:
    with judge_server_thread(responder=responder) as s:
        yield s


def test_same_means_as_the_cli(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "run.jsonl", ROWS)
    result = evaluate(run, k=(1, 2))
    cli = json.loads(ragmon("eval", run, "--k", "1,2", "--format", "json").stdout)
    assert {k: v for k, v in result.means.items() if k in cli["metrics"]} == cli["metrics"]
    assert result.means["hit_rate@1"] == pytest.approx(1 / 3) and result.means["hit_rate@2"] == pytest.approx(2 / 3)
    assert [r.record for r in result.records] == ["q1", "q2", "q3"]
    assert [r.scores["mrr"] for r in result.records] == [1.0, 0.5, 0.0]
    # records as dicts, in any schema: a Ragas 0.2 row with no document ids is judged, not refused
    more = evaluate(records=[*ROWS, {"user_input": "hello", "response": "Hi.", "retrieved_contexts": ["Greet back."]}], k=(1,))
    assert more.report.not_applicable == 1 and more.records[3].record == 4
    assert more.records[3].why["mrr"] == "not applicable: the record carries no document ids"


def test_check_passes_and_fails_naming_records(tmp_path: Path) -> None:
    result = evaluate(records=ROWS, k=(1,))
    result.check(at_least={"mrr": 0.5, "hit_rate@1": 0.3})
    with pytest.raises(AssertionError) as failed:
        result.check(at_least={"mrr": 0.9, "hit_rate@1": 0.3, "recall@1": 0.5})
    assert str(failed.value) == (
        "ragmon: 2 check(s) failed over 3 records of <records>\n"
        "  mrr = 0.5000 < 0.9 (3 scored); 2 record(s) below 0.9: q3 0.0000, q2 0.5000\n"
        "  recall@1 = 0.3333 < 0.5 (3 scored); 2 record(s) below 0.5: q2 0.0000, q3 0.0000"
    )
    with pytest.raises(UsageError, match="ndcg@7: not a metric of this evaluation"):
        result.check(at_least={"ndcg@7": 0.5})
    with pytest.raises(UsageError, match="did you mean mrr"):
        result.check(at_least={"mrrr": 0.5})


def test_judged_check_names_verdicts_and_judge_failures(server: JudgeServer, tmp_path: Path) -> None:
    settings = JudgeSettings(base_url=server.base_url, model="judge-model", cache=str(tmp_path / "cache.sqlite3"))
    result = evaluate(records=ROWS, k=(1,), judge=settings)
    assert result.means["faithfulness"] == pytest.approx(5 / 6) and result.judge_failures == 0
    assert result.records[1].verdicts["faithfulness"] == {
        "claims": [{"claim": "claim 0", "supported": False}, {"claim": "claim 1", "supported": True}]
    }
    with pytest.raises(AssertionError) as failed:
        result.check(at_least={"faithfulness": 0.9}, at_most={"toxicity": 0.5})
    assert str(failed.value).splitlines()[1] == (
        "  faithfulness = 0.8333 < 0.9 (3 scored); 1 record(s) below 0.9: q2 0.5000 (unsupported: «claim 0»)"
    )
    # a judge that failed fails the check, whatever the thresholds, with its cause
    server.script(*[status(500, error="down for maintenance")] * 20)
    down = evaluate(records=ROWS, k=(1,), judge=JudgeSettings(base_url=server.base_url, model="judge-model", cache=None))
    assert down.judge_failures == 3
    with pytest.raises(AssertionError) as failed:
        down.check(at_least={"mrr": 0.1})
    assert "the judge failed for 3 record(s), more than 0 allowed: 3 record(s) (error): " in str(failed.value)
    assert "judge endpoint answered 500: down for maintenance" in str(failed.value)


def test_bad_input_is_an_error_not_a_result(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        evaluate(write_jsonl(tmp_path / "bad.jsonl", [{"query_id": "q1", "retrieved_document_ids": "p7"}]))
    with pytest.raises(UsageError, match="human labels need a judge"):
        evaluate(records=ROWS, human=tmp_path / "h.jsonl")
    with pytest.raises(UsageError, match="judge needs an endpoint"):
        evaluate(records=ROWS, judge=True)
    with pytest.raises(UsageError, match="evaluate needs files or records"):
        evaluate()


PYTEST_EXAMPLE_PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "ci-gate.md"


def test_docs_pytest_example_runs_as_written(tmp_path: Path) -> None:
    """The pytest example of the CI-gate guide, extracted and run by pytest in a scratch project
    (tests/test_docs.py counts the block as run here)."""
    page = PYTEST_EXAMPLE_PAGE.read_text(encoding="utf-8")
    marker = "<!-- ragmon-pytest-example -->"
    assert page.count(marker) == 1, "the guide's pytest example is marked for this test"
    after = page.split(marker, 1)[1]
    assert after.startswith("\n```python\n"), "the marker is right before the example"
    block = after.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_rag_quality.py").write_text(block, encoding="utf-8")
    write_jsonl(tmp_path / "tests" / "golden.jsonl", ROWS[:2])
    result = ragmon_pytest(tmp_path)
    assert result[0] == 0, result[1]
    write_jsonl(tmp_path / "tests" / "golden.jsonl", ROWS)  # q3 misses: hit rate 2/3 fails the gate
    code, out = ragmon_pytest(tmp_path)
    assert code == 1 and "q3 0.0000" in out, out


def ragmon_pytest(project: Path) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_evaluation_is_a_value() -> None:
    result = evaluate(records=ROWS[:1], k=(1,))
    assert isinstance(result, Evaluation) and result.warnings == ()
