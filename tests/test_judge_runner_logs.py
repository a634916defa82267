"""The judge's log lines and its rarer failure paths, exactly: what an operator reads when a
reply is invalid, a stop cuts calls short, a worker or the result callback hits a bug (logged
by type and frames, never the message, which may quote content), or the breaker opens while
records wait."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from judge_server import JudgeServer, delay, status
from ragmon.config import JudgeConfig
from ragmon.judge.breaker import CircuitBreaker
from ragmon.judge.client import JudgeClient, JudgeEndpoint
from ragmon.judge.runner import Judge, Judgement
from ragmon.model import RagRecord
from ragmon.scoring.pricing import Pricer
from test_judge_runner import Harness, config, judged, record, run

LOGGER = "ragmon.judge.runner"
SECRET = "-".join(["private", "document", "text"])
"""Content an exception message may quote (built at run time: a traceback shows source lines)."""


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_an_invalid_reply_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        h = run(lambda h: judged(h, record(1)), server=JudgeServer(lambda body: "not a verdict"))
    assert h.count("invalid") == 1
    assert _messages(caplog, logging.INFO) == ["judge reply invalid: no JSON object in reply"]


def test_stop_logs_how_many_calls_it_cancels(caplog: pytest.LogCaptureFixture) -> None:
    server = JudgeServer()
    server.script(delay(0.5), delay(0.5))

    async def cut(h: Harness) -> None:
        for n in range(2):
            assert h.submit(record(n)) == "queued"
        await asyncio.sleep(0.05)
        await h.judge.stop(0.05)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        h = run(cut, cfg=config(concurrency=2), server=server)
    assert h.count("dropped") == 2
    assert _messages(caplog, logging.WARNING) == ["judge stop: cancelling 2 call(s) in flight"]


class _BrokenPricer(Pricer):
    def price(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        raise RuntimeError(SECRET)


def test_a_bug_on_one_record_is_an_error_logged_without_its_message(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        h = run(lambda h: judged(h, record(1), record(2)), cfg=config(concurrency=1), pricer=_BrokenPricer(package_table=False))
    assert [j.outcome for _, j in h.results] == ["error", "error"]  # the worker lived on
    assert all(j.scores is None and j.model == "judge-model" and j.cost_usd is None for _, j in h.results)
    assert h.count("error") == 2 and h.count("error", "faithfulness") == 2
    errors = _messages(caplog, logging.ERROR)
    assert len(errors) == 2
    assert all(re.fullmatch(r"judge worker failed on one record: RuntimeError\nTraceback \(message withheld\):\n  File .*", e, re.S)
               for e in errors)
    assert SECRET not in caplog.text


def test_a_bug_in_the_result_callback_is_logged_without_its_message(caplog: pytest.LogCaptureFixture) -> None:
    def explode(rec: RagRecord, judgement: Judgement) -> None:
        raise ValueError(SECRET)

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        h = run(lambda h: judged(h, record(1)), on_result=explode)
    assert h.count("ok") == 1
    (error,) = _messages(caplog, logging.ERROR)
    assert error.startswith("judge on_result callback failed: ValueError\nTraceback (message withheld):\n")
    assert SECRET not in caplog.text


def test_records_waiting_when_the_breaker_opens_fail_without_a_call() -> None:
    server = JudgeServer()
    server.script(status(500))

    async def scenario(h: Harness) -> None:
        for n in (1, 2, 3):
            assert h.submit(record(n)) == "queued"  # 2 and 3 wait behind 1
        await h.judge.join()

    h = run(scenario, cfg=config(concurrency=1), server=server, breaker=CircuitBreaker(failure_threshold=1, cooldown=60.0))
    assert len(server.requests) == 1
    assert [j.outcome for _, j in h.results] == ["error", "error", "error"]
    assert all(j.scores is None and j.model == "judge-model" for _, j in h.results)
    assert h.count("error", "faithfulness") == 3


def test_a_judge_waits_five_seconds_for_calls_in_flight_by_default() -> None:
    async def make() -> Judge:
        client = JudgeClient(JudgeEndpoint("http://127.0.0.1:9/v1", "k"), "m", 1.0)
        judge = Judge(JudgeConfig(), client, Pricer(package_table=False), lambda: 0.0, lambda r, j: None)
        await client.aclose()
        return judge

    assert asyncio.run(make()).stop_timeout == 5.0
