"""No URL password reaches ragmon's log, at any level ragmon sets, from any library.

Reported: openai's client moved to ``httpx2``, missing from the quiet list, and its INFO line
``HTTP Request: POST http://user:PASSWORD@…`` named the judge's base URL on every call. The
mechanism is now the handler's filter (other libraries only from WARNING, passwords masked in
every line), so a library of a new name cannot leak; the end-to-end test runs ``ragmon run`` at
each ``--log-level`` with such a base URL and a real judge call through the openai client.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from judge_server import judge_server_thread
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from process_helpers import LOCAL_PORTS, RagmonProcess
from test_sidecar import send_rag_traces

from ragmon.judge.endpoint import mask_credentials
from ragmon.sidecar.logs import QUIET_LOGGERS, configure_logging

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

PASSWORD = "s3cr3t-PASSWORD"
LEVELS = ("debug", "info", "warning", "error")


@pytest.fixture
def fresh_root() -> Iterator[None]:
    """The root logger as configure_logging finds it in a new process; restored after."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    touched = (*QUIET_LOGGERS, "somelib", "httpx2", "httpcore.http11")  # every logger a test sets a level on
    quiet = {name: logging.getLogger(name).level for name in touched}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in quiet.items():
            logging.getLogger(name).setLevel(was)


@pytest.mark.parametrize("form", ["text", "json"])
@pytest.mark.parametrize("level", LEVELS)
def test_no_library_line_below_warning_and_no_password_at_any_level(
    fresh_root: None, capsys: pytest.CaptureFixture[str], level: str, form: str,
) -> None:
    logging.getLogger().handlers.clear()  # pytest's capture handler too: basicConfig adds ours then
    configure_logging(level, form)
    url = f"http://user:{PASSWORD}@127.0.0.1:1/v1/chat/completions"
    for name in ("httpx2", "somelib", "httpcore.http11"):  # a library ragmon never heard of too
        logging.getLogger(name).setLevel(logging.DEBUG)  # as a library may set itself
        logging.getLogger(name).info("HTTP Request: POST %s", url)
        logging.getLogger(name).debug("request headers for %s", url)
    logging.getLogger("somelib").warning("connection to %s failed", url)
    logging.getLogger("ragmon.judge").error("judge call to %s failed", url)
    try:
        raise ValueError(f"cannot reach {url}")
    except ValueError:
        logging.getLogger("ragmon").exception("a traceback quoting the URL")
    err = capsys.readouterr().err
    assert PASSWORD not in err
    lines = err.splitlines()
    if form == "json":
        records = [json.loads(line) for line in lines if line.startswith("{")]
        loggers = [r["logger"] for r in records]
    else:
        loggers = [line.split()[3].rstrip(":") for line in lines if line[:2] == "20"]
    assert "httpx2" not in loggers and "httpcore.http11" not in loggers  # below WARNING: not ragmon's
    wanted = {"warning": ["somelib", "ragmon.judge", "ragmon"], "error": ["ragmon.judge", "ragmon"]}
    assert loggers == wanted.get(level, ["somelib", "ragmon.judge", "ragmon"])
    assert "user:***@127.0.0.1:1" in err


def test_mask_credentials() -> None:
    assert mask_credentials("POST http://u:p@h/x and https://a:b:c@h2") == "POST http://u:***@h/x and https://a:***@h2"
    assert mask_credentials("http://user@host/ and mailto:a@b and a:b@c") == "http://user@host/ and mailto:a@b and a:b@c"


@pytest.mark.parametrize("level", ["debug", "info"])
def test_ragmon_run_logs_no_judge_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    """The real process at the levels where libraries would speak (warning and error are
    quieter still: the test above), a real judge call through the openai client to a base URL
    with a password: the call is made and no line carries the password."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with judge_server_thread() as server:
        base = server.base_url.replace("http://", f"http://user:{PASSWORD}@")
        config = tmp_path / "ragmon.toml"
        config.write_text(LOCAL_PORTS.replace("[metrics]\n", '[metrics]\nlinger = "0s"\n') + f'[traces]\ngrace = "100ms"\n[judge]\nbase_url = "{base}"\nsample_rate = 1.0\n')
        with RagmonProcess("--config", str(config), "--log-level", level) as ragmon:
            send_rag_traces(OTLPSpanExporter(endpoint=ragmon.url("OTLP/HTTP", "/v1/traces")), "rag-api")
            deadline = time.monotonic() + 20
            while not server.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.requests, ragmon.stderr
            assert ragmon.stop() == 0
    text = ragmon.stderr
    assert PASSWORD not in text, text
    assert " INFO ragmon: ragmon " in text  # it logged at this level (its start-up line)
