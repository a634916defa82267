"""``ragmon demo``: the real command in a subprocess (ragmon, the OpenTelemetry-instrumented
synthetic service, OTLP/HTTP between them, the probe and feedback), its view, and its parts."""

from __future__ import annotations

import dataclasses
import io
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from judge_server import judge_server_thread
from process_helpers import OutputLines
from ragmon.config import Config, JudgeConfig
from ragmon.demo.corpus import build_corpus, generate, rerank, retrieve
from ragmon.demo.run import demo_config
from ragmon.demo.view import MIN_SAMPLES, Row, alerts, plain, render
from ragmon.ops.rules import Thresholds

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parent.parent
URL = re.compile(r"metrics:\s+http://127\.0\.0\.1:(\d+)/metrics")
FINAL = re.compile(r"variant (\w): (.*)$")
PAIR = re.compile(r"(requests|hits@\d+) (\d+) \(ragmon (\d+)\)")


def _start(*args: str) -> subprocess.Popen[str]:
    # a key in the environment: without --config the demo must still not call a judge
    return subprocess.Popen(
        [sys.executable, "-m", "ragmon", "demo", *args], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-demo-test", "PYTHONPATH": str(ROOT)},
    )


class _Output(OutputLines):
    """Every line the demo prints, read by a thread (the test waits on them as they come)."""

    def metrics_port(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := URL.search(line):
                    return int(found.group(1))
            time.sleep(0.05)
        raise AssertionError("no metrics URL printed:\n" + "".join(self.lines))

    def finish(self, timeout: float = 60.0) -> str:
        """Wait for the process to end; everything it printed."""
        self.process.wait(timeout)
        self.reader.join(10)
        return self.text


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_demo_end_to_end_shows_the_drop_and_agrees_with_the_service() -> None:
    process = _start("--duration", "16", "--rate", "25")
    output = _Output(process)
    port = output.metrics_port()
    time.sleep(6)
    mid = _scrape(port)
    text = output.finish()
    lines = text.splitlines(keepends=True)
    assert process.returncode == 0, text
    assert "Traceback" not in text
    assert f"status page: http://127.0.0.1:{port}/" in text

    # live values for both variants, from golden labels, probes, labels and feedback
    for variant in "AB":
        key = frozenset({"service": "demo-rag", "variant": variant, "source": "golden", "k": "5", "window": "15s"}.items())
        assert 0.0 <= mid[("ragmon_retrieval_hit_rate", key)] <= 1.0
    sources = {dict(labels).get("source") for name, labels in mid if name == "ragmon_retrieval_queries_total"}
    assert {"golden", "label", "probe", "feedback"} <= sources
    assert any(name == "ragmon_user_feedback_count" for name, _ in mid)
    assert any(name == "ragmon_faithfulness_mean" and dict(labels).get("judge") == "lexical" for name, labels in mid)

    # the regression is injected halfway and the alert named after it
    degraded = next(i for i, line in enumerate(lines) if "variant B's retrieval degraded" in line)
    fired = [i for i, line in enumerate(lines) if "ALERT RagHitRateDrop (critical) would fire for variant B" in line]
    assert fired and fired[0] > degraded, text
    assert not any("would fire for variant A" in line for line in lines)

    # every answer the service gave reached ragmon and was scored exactly as the service counts
    finals = {m.group(1): m.group(2) for line in lines if (m := FINAL.search(line.strip())) and "(ragmon" in line}
    assert set(finals) == {"A", "B"}, text
    for variant, rest in finals.items():
        pairs = PAIR.findall(rest)
        assert [p[0] for p in pairs] == ["requests", "hits@1", "hits@3", "hits@5", "hits@10"]
        for _, service, measured in pairs:
            assert service == measured, rest
        assert int(pairs[0][1]) > 100
    a, b = (dict((p[0], int(p[1])) for p in PAIR.findall(finals[v])) for v in "AB")
    assert b["hits@5"] / b["requests"] < a["hits@5"] / a["requests"] - 0.1  # B lost hits
    assert re.search(r"feedback: \d+ accepted", text)
    assert _closed(port)


def test_ctrl_c_ends_the_demo_cleanly() -> None:
    process = _start("--duration", "120", "--rate", "20")
    output = _Output(process)
    port = output.metrics_port()
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    out = output.finish(30)
    assert process.returncode == 130
    assert "Traceback" not in out
    assert "done. The service's own count" in out
    assert _closed(port)


def test_with_a_configured_judge_the_view_shows_its_faithfulness(tmp_path: Path) -> None:
    with judge_server_thread() as judge:
        config = tmp_path / "ragmon.toml"
        config.write_text(f'[judge]\nbase_url = "{judge.base_url}"\nsample_rate = 1.0\n')
        process = _start("--config", str(config), "--duration", "8", "--rate", "10")
        out = _Output(process).finish()
        assert process.returncode == 0, out
        assert judge.requests
    assert "judge:       llm" in out, out
    lines = [line for line in out.splitlines() if "variant A (15s)" in line and "faithfulness 1.00," in line]
    assert lines, out
    assert "lexical" not in out.split("judge:", 1)[1]


def test_the_demo_refuses_bad_flags() -> None:
    done = subprocess.run([sys.executable, "-m", "ragmon", "demo", "--duration", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--duration" in done.stderr and "expected a number > 0" in done.stderr


def test_the_live_view_renders_on_a_terminal() -> None:
    values = {"A": Row(requests=120, hit_rate=0.95, mrr=0.8, retrievals=60, faithfulness=0.9, judge="lexical",
                       p50=0.5, p95=0.9, cost=2.2e-5, thumbs=0.75),
              "B": Row(requests=118, hit_rate=0.3)}
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    console.print(render(values, "15s", 5, ["RagHitRateDrop (critical) would fire for variant B: …"], "status line"))
    shown = buffer.getvalue()
    assert "hit rate@5" in shown and "0.95" in shown and "0.90 (lexical estimate)" in shown
    assert "500" in shown and "$0.000022" in shown
    assert "RagHitRateDrop (critical) would fire for variant B" in shown and "status line" in shown
    assert plain(values, "15s", 5, 3.0)[1].startswith("[  3.0s] variant B (15s): requests (all) 118, hit rate@5 0.30, MRR -")


def test_alerts_follow_the_rules_thresholds() -> None:
    before = {"A": Row(hit_rate=0.875, mrr=0.75, faithfulness=0.9, judge="llm")}
    n = MIN_SAMPLES
    assert alerts({"A": Row(hit_rate=0.75, mrr=0.6875, retrievals=n)}, before) == [
        "RagHitRateDrop (critical) would fire for variant A: hit rate@5 0.88 -> 0.75 (drop 0.12 > 0.10)"]
    assert alerts({"A": Row(hit_rate=0.8125, mrr=0.625, retrievals=n)}, before) == [
        "RagMrrDrop (warning) would fire for variant A: MRR 0.75 -> 0.62 (drop 0.12 > 0.10)"]
    exact = dataclasses.replace(Thresholds(), hit_rate_drop=0.125, mrr_drop=0.125)  # dyadic: no rounding
    assert alerts({"A": Row(hit_rate=0.75, mrr=0.625, retrievals=n)}, before, exact) == []  # at the threshold: the rules' `<` holds not
    assert len(alerts({"A": Row(hit_rate=0.75 - 2**-20, mrr=0.625 - 2**-20, retrievals=n)}, before, exact)) == 2
    assert alerts({"A": Row(hit_rate=0.1, mrr=0.1, retrievals=n - 1)}, before) == []  # too few to say
    assert alerts({"A": Row(hit_rate=0.1, retrievals=n)}, None) == []  # no baseline yet
    assert alerts({"A": Row(faithfulness=0.5, judged=n, judge="llm")}, before) == [
        "RagFaithfulnessDrop (critical) would fire for variant A: faithfulness 0.90 -> 0.50 (drop 0.40 > 0.10)"]
    assert alerts({"A": Row(faithfulness=0.5, judged=n, judge="lexical")}, before) == []  # the rules skip it
    assert alerts({"A": Row(faithfulness=0.5, judged=n - 1, judge="llm")}, before) == []
    assert alerts({"B": Row(hit_rate=0.1, retrievals=n)}, before) == []  # no baseline for B


def test_the_corpus_is_seeded_and_degrading_hurts_retrieval() -> None:
    corpus = build_corpus()
    assert build_corpus() == corpus and len(corpus.documents) == len(corpus.questions) == 48
    assert build_corpus(8) != corpus

    def hit_rate(degraded: bool) -> float:
        rng = random.Random(0)
        hits = 0
        for q in corpus.questions:
            ranking = [d.id for d, _ in rerank(q.text, retrieve(corpus, q.text, 10, rng, degraded=degraded), 5)]
            hits += q.relevant in ranking
        return hits / len(corpus.questions)

    assert hit_rate(False) == 1.0
    assert hit_rate(True) < 0.4
    contexts = [corpus.documents[0]]
    rng = random.Random(3)
    answers = [generate(contexts, rng, 0.5) for _ in range(200)]
    assert all(a.text.startswith(contexts[0].text) for a in answers)
    assert 60 < sum(not a.grounded for a in answers) < 140
    assert all(a.grounded == (a.text == contexts[0].text) for a in answers)


def test_the_demo_judges_with_a_configured_judge_only() -> None:
    bare = demo_config(None, "g.jsonl", "p.jsonl", "http://127.0.0.1:1/ask")
    assert bare.judge.enabled is False and bare.judge.sample_rate == 1.0
    assert bare.receiver.http == "127.0.0.1:0" and bare.receiver.grpc == "" and bare.metrics.listen == "127.0.0.1:0"
    assert bare.scoring.golden == "g.jsonl" and bare.scoring.windows == (15.0, 300.0) and bare.traces.grace == 0.5
    (probe,) = bare.probe
    assert probe.url == "http://127.0.0.1:1/ask" and probe.dataset == "p.jsonl" and probe.response_ids == "documents[*].id"
    configured = demo_config(Config(judge=JudgeConfig(base_url="http://127.0.0.1:2/v1", sample_rate=0.3)), "g", "p", "u")
    assert configured.judge.base_url == "http://127.0.0.1:2/v1" and configured.judge.sample_rate == 0.3
