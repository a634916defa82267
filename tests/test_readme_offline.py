"""The documentation's offline examples run as written: the ``ragmon eval`` commands of its Ragas /
DeepEval and judge-agreement sections (each block marked ``<!-- ragmon-offline-examples -->`` in
the README or a page of ``docs/``), against the scripted judge server (``OPENAI_BASE_URL``), in a
scratch copy of ``examples/``. (tests/test_docs.py counts these blocks as run here.)"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from judge_server import judge_server_thread

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- ragmon-offline-examples -->"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks() -> list[str]:
    """Each ``sh`` block right after the marker, in the README and the docs."""
    found = []
    for page in PAGES:
        for after in page.read_text(encoding="utf-8").split(MARKER)[1:]:
            assert after.startswith("\n```sh\n"), f"{page}: {MARKER} is right before a sh block"
            found.append(after.split("```sh\n", 1)[1].split("```", 1)[0])
    return found


def commands() -> list[str]:
    """The ``ragmon`` lines of the marked offline blocks (the Ragas / DeepEval ones and the
    judge-agreement one)."""
    return [line for line in "".join(blocks()).splitlines() if line.startswith("ragmon ")]


def test_the_docs_have_the_examples() -> None:
    assert len(blocks()) == 2
    for block in blocks():  # every line runs here: a line of another kind would go untested
        assert all(line.startswith("ragmon ") for line in block.splitlines() if line.strip()), block
    listed = commands()
    assert len(listed) == 4, listed
    assert any("ragas.jsonl" in c for c in listed) and any("deepeval.json" in c for c in listed)
    assert any("--human" in c for c in listed)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


@pytest.mark.parametrize("command", commands())
def test_readme_offline_command_runs_as_written(project: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "RAGMON_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    with judge_server_thread() as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url}
        done = subprocess.run(shlex.split(command), cwd=project, env=env, capture_output=True, text=True, timeout=120)
        calls = len(server.requests)
    assert done.returncode == 0, done.stderr
    assert calls > 0 and "Traceback" not in done.stderr
    assert " 0 failed, " in done.stderr
    if "--records" in command:
        lines = [json.loads(line) for line in (project / "records.jsonl").read_text().splitlines()]
        assert [line["record"] for line in lines] == [1, 2, 3]
        assert all(line["scores"]["faithfulness"] == 1.0 and "faithfulness" in line["verdicts"] for line in lines)
    if "--human" in command:
        assert "agreement with the human labels (95% bootstrap intervals)" in done.stdout


def test_examples_read_without_warnings(project: Path) -> None:
    for name in ("ragas.jsonl", "deepeval.json", "judge_agreement/records.jsonl"):
        done = subprocess.run(["ragmon", "eval", f"examples/{name}", "--format", "json"], cwd=project,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        out: dict[str, Any] = json.loads(done.stdout)
        assert out["records"] == {"ragas.jsonl": 3, "deepeval.json": 2, "judge_agreement/records.jsonl": 24}[name]
