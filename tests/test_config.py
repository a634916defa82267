"""Configuration loading and ``ragmon check-config``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import ragmon

from ragmon.cli import main
from ragmon.config import (
    FeedbackConfig,
    Config,
    Price,
    config_from_mapping,
    load_config,
    parse_duration,
    parse_listen,
    toml_defaults,
)
from ragmon.errors import ConfigError

FULL = """
[receiver]
http = "127.0.0.1:4318"
grpc = ""
token = "s3cret"
max_body_bytes = 1048576

[metrics]
listen = "0.0.0.0:0"
token = ""

[traces]
grace = "2s"
max_wait = "60s"
max_pending = 500

[scoring]
k = [1, 5]
windows = ["5m", "1h"]
document_id = ["metadata.doc_id", "document.id"]
variant_attribute = "app.variant"
golden = "golden.jsonl"

[judge]
base_url = "http://127.0.0.1:8000/v1"
model = "gpt-4o-mini"
sample_rate = 0.25
max_per_minute = 60
max_usd_per_hour = 1.0
concurrency = 4
timeout = "30s"

[[probe]]
name = "ask-api"
url = "http://127.0.0.1:8080/ask"
headers = { Authorization = "Bearer x" }
body = { question = "{query}" }
interval = "60s"

[pricing."my-model"]
input = 0.15
output = 0.60
"""


def test_defaults_match_the_spec() -> None:
    config = Config()
    assert config.receiver.http == "127.0.0.1:4318" and config.receiver.grpc == "127.0.0.1:4317"
    assert config.metrics.listen == "0.0.0.0:9464"
    assert config.scoring.k == (1, 3, 5, 10) and config.scoring.windows == (300.0, 3600.0)
    assert config.traces.grace == 2.0 and config.traces.max_wait == 60.0
    assert config.traces.max_pending == 50_000 and config.receiver.max_body_bytes == 16_777_216


def test_full_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "ragmon.toml"
    path.write_text(FULL)
    config = load_config(str(path))
    assert config.receiver.grpc == "" and config.receiver.token == "s3cret"
    assert config.scoring.k == (1, 5) and config.scoring.document_id == ("metadata.doc_id", "document.id")
    assert config.judge.sample_rate == 0.25
    assert config.probe[0].headers == {"Authorization": "Bearer x"}
    assert config.pricing == {"my-model": Price(0.15, 0.60)}


def test_environment_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[traces]\ngrace = '5s'\n")
    monkeypatch.setenv("RAGMON_CONFIG", str(path))
    assert load_config().traces.grace == 5.0
    monkeypatch.delenv("RAGMON_CONFIG")
    assert load_config() == Config()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"tracs": {}}, "tracs: unknown key (did you mean 'traces'?)"),
        ({"scoring": {"windos": ["5m"]}}, "scoring.windos: unknown key (did you mean 'windows'?)"),
        ({"scoring": {"k": [0]}}, "scoring.k: must list cut-offs >= 1"),
        ({"scoring": {"k": ["5"]}}, "scoring.k: expected a list of int"),
        ({"scoring": {"windows": ["5 minutes"]}}, "scoring.windows: expected a duration"),
        ({"traces": {"grace": "0s"}}, "traces.grace: must be longer than 0"),
        ({"traces": {"max_pending": 0}}, "traces.max_pending: must be at least 1"),
        ({"traces": {"max_pending": True}}, "traces.max_pending: expected int"),
        ({"receiver": {"http": "localhost"}}, 'receiver.http: expected "host:port"'),
        ({"receiver": {"max_body_bytes": 1.5}}, "receiver.max_body_bytes: expected int"),
        ({"judge": {"sample_rate": 2}}, "judge.sample_rate: must be between 0 and 1"),
        ({"judge": {"max_usd_per_hour": -1}}, "judge.max_usd_per_hour: must be >= 0"),
        ({"probe": {"url": "x"}}, "probe: use [[probe]]"),
        ({"probe": [{"name": "p"}]}, "probe[0].url: required"),
        ({"probe": [{"url": "http://x", "headers": {"a": 1}}]}, "probe[0].headers: expected a table of strings"),
        ({"pricing": {"m": {"input": -1}}}, 'pricing."m".input: must be >= 0'),
        ({"pricing": {"m": {"inpt": 1}}}, "pricing.\"m\".inpt: unknown key (did you mean 'input'?)"),
        ({"metrics": "x"}, "metrics: expected a table"),
        ({"scoring": {"windows": ["5m", "300s"]}}, "scoring.windows: lists the same duration twice"),
        ({"pricing": {"M": {"input": 1}, "m": {"input": 2}}}, 'pricing."m": same model as pricing."M"'),
        ({"scoring": {"document_id": ["doc_id"]}}, "scoring.document_id: 'doc_id' is not a place"),
        ({"scoring": {"variant_attribute": ""}}, "scoring.variant_attribute: must name an attribute"),
        ({"scoring": {"windows": ["5m", "0s"]}}, "scoring.windows: each window must be longer than 0"),
        ({"receiver": {"max_body_bytes": 2**31}}, "receiver.max_body_bytes: must be at most 2147483647"),
        ({"receiver": {"max_queued_bytes": 2**63}}, "receiver.max_queued_bytes: must be at most"),
        ({"receiver": {"header_timeout": "0s"}}, "receiver.header_timeout: must be longer than 0"),
        ({"receiver": {"max_connections": 0}}, "receiver.max_connections: must be at least 1"),
        ({"metrics": {"max_series": 0}}, "metrics.max_series: must be at least 1"),
        ({"metrics": {"max_label_chars": 0}}, "metrics.max_label_chars: must be at least 1"),
        ({"metrics": {"linger": "soon"}}, "metrics.linger: expected a duration"),
        ({"receiver": {"body_timeout": "1000000d"}}, "receiver.body_timeout: must be at most 10m, got '1000000d'"),
        ({"receiver": {"header_timeout": "11m"}}, "receiver.header_timeout: must be at most 10m"),
        ({"receiver": {"idle_timeout": "2d"}}, "receiver.idle_timeout: must be at most 1d"),
        ({"traces": {"grace": "100000000d"}}, "traces.grace: must be at most 1h, got '100000000d'"),
        ({"traces": {"max_wait": "25h"}}, "traces.max_wait: must be at most 1d"),
        ({"traces": {"max_duration": "0s"}}, "traces.max_duration: must be longer than 0"),
        ({"traces": {"max_duration": "31d"}}, "traces.max_duration: must be at most 30d"),
        ({"metrics": {"linger": "11m"}}, "metrics.linger: must be at most 10m"),
        ({"metrics": {"write_timeout": "0s"}}, "metrics.write_timeout: must be longer than 0"),
        ({"metrics": {"max_inflight_bytes": 0}}, "metrics.max_inflight_bytes: must be at least 1"),
        ({"scoring": {"k": [1000000000]}}, "scoring.k: each cut-off must be at most 1000, got 1000000000"),
        ({"scoring": {"k": list(range(1, 18))}}, "scoring.k: must list at most 16 cut-offs, got 17"),
        ({"scoring": {"windows": ["5m", "31d"]}}, "scoring.windows: each window must be at most 30d"),
        ({"feedback": {"retention": "8d"}}, "feedback.retention: must be at most 7d"),
        ({"feedback": {"max_bytes": 0}}, "feedback.max_bytes: must be at least 1"),
        ({"probe": [{"url": "http://x", "dataset": "g", "timeout": "1h"}]}, "probe[0].timeout: must be at most 10m"),
        ({"probe": [{"url": "http://x", "dataset": "g", "concurrency": 1000}]}, "probe[0].concurrency: must be at most 64"),
    ],
)
def test_each_problem_names_its_key(data: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data)
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"tracs": {}, "judge": {"sample_rate": 2, "modle": "x"}})
    assert len(info.value.problems) == 3


def test_durations_and_listen_addresses() -> None:
    assert parse_duration("500ms") == 0.5 and parse_duration("5m") == 300 and parse_duration("1h") == 3600
    assert parse_listen("") is None
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:4318") == ("::1", 4318)
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    with pytest.raises(ValueError):
        parse_listen("127.0.0.1:99999")


def test_check_config_ok(tmp_path: Path) -> None:
    path = tmp_path / "ragmon.toml"
    path.write_text(FULL)
    (tmp_path / "golden.jsonl").write_text('{"query": "refund window?", "relevant_document_ids": ["policy-3"]}\n')
    result = ragmon("check-config", path, cwd=tmp_path)  # the golden set is read, relative to the working directory
    assert result.returncode == 0 and result.stdout.strip() == f"{path}: ok"


def test_check_config_prints_each_problem_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[tracs]\n[scoring]\nk = [0]\n")
    result = ragmon("check-config", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"{path}: tracs: unknown key (did you mean 'traces'?)",
        f"{path}: scoring.k: must list cut-offs >= 1",
    ]


@pytest.mark.parametrize("content", [None, "[receiver\n"])
def test_check_config_unreadable_or_invalid_toml(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "c.toml"
    if content is not None:
        path.write_text(content)
    result = ragmon("check-config", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr


def test_memory_bounds_are_configurable() -> None:
    config = config_from_mapping({
        "receiver": {"max_queued_bytes": 1024, "max_attribute_chars": 64},
        "traces": {"max_bytes": 4096},
    })
    assert config.receiver.max_queued_bytes == 1024 and config.receiver.max_attribute_chars == 64
    assert config.traces.max_bytes == 4096
    with pytest.raises(ConfigError):
        config_from_mapping({"traces": {"max_bytes": 0}})


def test_a_linger_of_zero_is_valid() -> None:
    assert config_from_mapping({"metrics": {"linger": "0s"}}).metrics.linger == 0.0


@pytest.mark.parametrize(
    ("body", "problem"),
    [(b"\xff\xfe[receiver]\n", "not UTF-8"), (b"a = " + b"[" * 5000 + b"]" * 5000, "invalid TOML: nested too deeply")],
)
def test_a_file_that_is_not_toml_text_is_one_problem(tmp_path: Path, body: bytes, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(body)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(problem)


def test_tokens_come_from_the_environment_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[receiver]\ntoken = "from-file"\n')
    assert load_config(str(path), environ={}).receiver.token == "from-file"
    env = {"RAGMON_RECEIVER_TOKEN": "from-env", "RAGMON_METRICS_TOKEN": "scrape"}
    config = load_config(str(path), environ=env)
    assert config.receiver.token == "from-env" and config.metrics.token == "scrape"
    assert load_config(str(path), environ={"RAGMON_RECEIVER_TOKEN": ""}).receiver.token == "from-file"
    assert load_config(None, environ={"RAGMON_METRICS_TOKEN": "m"}).metrics.token == "m"


def test_durations_are_read_once_into_seconds() -> None:
    config = config_from_mapping({
        "traces": {"grace": "500ms", "max_wait": "2m"}, "scoring": {"windows": ["1m", "1d"]},
        "receiver": {"header_timeout": "10m"}, "metrics": {"linger": "0s"}, "judge": {"timeout": "3s"},
        "probe": [{"url": "http://127.0.0.1:1/ask", "dataset": "g.jsonl", "interval": "1m", "timeout": "250ms"}],
    })
    assert (config.traces.grace, config.traces.max_wait) == (0.5, 120.0)
    assert config.scoring.windows == (60.0, 86400.0) and config.receiver.header_timeout == 600.0
    assert config.metrics.linger == 0.0 and config.judge.timeout == 3.0
    assert (config.probe[0].interval, config.probe[0].timeout) == (60.0, 0.25)
    with pytest.raises(ConfigError) as info:  # a duration is text in the file, as before
        config_from_mapping({"traces": {"grace": 2}})
    assert info.value.problems == ["traces.grace: expected str, got int 2"]


def test_the_defaults_as_written_in_toml() -> None:
    receiver, scoring = toml_defaults(type(Config().receiver)), toml_defaults(type(Config().scoring))
    assert receiver["header_timeout"] == "10s" and receiver["max_connections"] == 1024
    assert scoring["windows"] == ("5m", "1h") and scoring["k"] == (1, 3, 5, 10)
    assert toml_defaults(type(Config().metrics))["linger"] == "10s"
    for section in ("receiver", "metrics", "traces", "scoring", "judge"):
        written = {key: list(value) if isinstance(value, tuple) else value
                   for key, value in toml_defaults(type(getattr(Config(), section))).items() if value is not None}
        assert config_from_mapping({section: written}) == Config()


def test_a_feedback_section_is_read_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``[feedback]`` sets the retention and the cap of ``POST /v1/feedback``; bad keys are named."""
    assert config_from_mapping({"feedback": {"retention": "30m", "max_traces": 10}}).feedback == FeedbackConfig(1800.0, 10)
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"feedback": {"retention": "0s", "max_trace": 1}})
    assert info.value.problems == [
        "feedback.retention: must be longer than 0, got '0s'",
        "feedback.max_trace: unknown key (did you mean 'max_traces'?)",
    ]
    path = tmp_path / "ragmon.toml"
    path.write_text('[feedback]\nretention = "1h"\nmax_traces = 1000\n')
    assert main(["check-config", str(path)]) == 0



def test_judge_evaluators_are_the_judges_own_list() -> None:
    """One list: the default and the accepted names are ``ragmon.judge.prompts.EVALUATORS``."""
    from ragmon.judge.prompts import EVALUATORS

    assert Config().judge.evaluators == EVALUATORS
    assert {"coherence", "toxicity"} <= set(EVALUATORS)
    chosen = config_from_mapping({"judge": {"evaluators": ["toxicity", "coherence"]}}).judge.evaluators
    assert chosen == ("toxicity", "coherence")
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"judge": {"evaluators": ["faithfulness", "vibes"]}})
    (problem,) = info.value.problems
    assert problem.startswith("judge.evaluators: unknown evaluator(s) ['vibes']; known: ") and "'toxicity'" in problem


@pytest.mark.parametrize(
    ("judge", "problem"),
    [
        ({"concurrency": 100000}, "judge.concurrency: must be at most 256, got 100000"),
        ({"concurrency": 0}, "judge.concurrency: must be at least 1, got 0"),
        ({"max_retries": 1000000}, "judge.max_retries: must be between 0 and 10, got 1000000"),
        ({"max_retries": -1}, "judge.max_retries: must be between 0 and 10, got -1"),
        ({"base_url": "not a url"}, "judge.base_url: must be empty or an http:// or https:// URL with a host"),
        ({"base_url": "ftp://host/v1"}, "judge.base_url: must be empty or an http:// or https:// URL with a host"),
        ({"base_url": "http:///v1"}, "judge.base_url: must be empty or an http:// or https:// URL with a host"),
        ({"base_url": "http://user:pw@host:99999/v1"},
         "judge.base_url: must be empty or an http:// or https:// URL with a host and a port in 0-65535"),
        ({"export_endpoint": "collector:4318"},
         "judge.export_endpoint: must be empty or an http:// or https:// URL with a host"),
        ({"model": ""}, "judge.model: must name a model"),
        ({"model": "   "}, "judge.model: must name a model"),
        ({"model": "m" * 257}, "judge.model: must be at most 256 characters, got 257"),
        ({"timeout": "11m"}, "judge.timeout: must be at most 10m, got '11m'"),
        ({"timeout": "0s"}, "judge.timeout: must be longer than 0, got '0s'"),
        ({"max_queue": 100001}, "judge.max_queue: must be at most 100000, got 100001"),
        ({"max_queue_bytes": 0}, "judge.max_queue_bytes: must be at least 1, got 0"),
        ({"max_queue_bytes": 2**30 + 1}, f"judge.max_queue_bytes: must be at most {2**30}, got {2**30 + 1}"),
        ({"max_documents": 0}, "judge.max_documents: must be at least 1, got 0"),
        ({"max_documents": 257}, "judge.max_documents: must be at most 256, got 257"),
        ({"breaker_failures": 0}, "judge.breaker_failures: must be at least 1, got 0"),
        ({"breaker_failures": 1001}, "judge.breaker_failures: must be at most 1000, got 1001"),
        ({"breaker_failure_ratio": 0}, "judge.breaker_failure_ratio: must be more than 0 and at most 1, got 0.0"),
        ({"breaker_failure_ratio": 1.5}, "judge.breaker_failure_ratio: must be more than 0 and at most 1, got 1.5"),
        ({"breaker_min_calls": 0}, "judge.breaker_min_calls: must be at least 1, got 0"),
        ({"breaker_min_calls": 100001}, "judge.breaker_min_calls: must be at most 100000, got 100001"),
        ({"breaker_window": "0s"}, "judge.breaker_window: must be longer than 0, got '0s'"),
        ({"breaker_window": "2d"}, "judge.breaker_window: must be at most 1d, got '2d'"),
        ({"breaker_cooldown": "2h"}, "judge.breaker_cooldown: must be at most 1h, got '2h'"),
        ({"breaker_max_cooldown": "25h"}, "judge.breaker_max_cooldown: must be at most 1d, got '25h'"),
        ({"breaker_cooldown": "10m", "breaker_max_cooldown": "5m"},
         "judge.breaker_max_cooldown: must be at least breaker_cooldown"),
    ],
)
def test_absurd_judge_values_are_refused_in_one_line_naming_the_key(judge: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"judge": judge})
    assert info.value.problems == [problem]
    assert "pw" not in str(info.value)  # a URL is never quoted: it may hold a password


def test_the_judge_bounds_and_breaker_are_read() -> None:
    judge = config_from_mapping({"judge": {
        "concurrency": 256, "max_retries": 10, "base_url": "https://user:pw@judge.example:8443/v1", "model": "m",
        "timeout": "10m", "max_queue": 100000, "max_queue_bytes": 2**30, "max_documents": 256,
        "breaker_failures": 3, "breaker_failure_ratio": 1, "breaker_min_calls": 4, "breaker_window": "2m",
        "breaker_cooldown": "1h", "breaker_max_cooldown": "1d",
    }}).judge
    assert (judge.concurrency, judge.max_retries, judge.timeout, judge.max_queue, judge.max_queue_bytes) == (
        256, 10, 600.0, 100000, 2**30)
    assert (judge.max_documents, judge.breaker_failures, judge.breaker_failure_ratio, judge.breaker_min_calls) == (
        256, 3, 1.0, 4)
    assert (judge.breaker_window, judge.breaker_cooldown, judge.breaker_max_cooldown) == (120.0, 3600.0, 86400.0)
    defaults = Config().judge
    assert (defaults.max_documents, defaults.max_queue_bytes, defaults.breaker_failures, defaults.breaker_cooldown,
            defaults.breaker_max_cooldown) == (20, 32 * 1024 * 1024, 5, 5.0, 300.0)
