"""The judge under faults, in process: an open breaker costs ingest next to nothing, refused
requests do not open it, absurd replies do not poison cost, the onward sender counts what a
shutdown cuts off, and no log record carries content, replies or the key (every failure path,
the ``openai`` and HTTP loggers included)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from judge_server import (
    Action,
    JudgeServer,
    completion,
    delay,
    drop,
    gzip_bomb,
    hang,
    raw,
    reply,
    status,
    streamed,
    wire,
)
from test_judge_runner import EMAIL, MODEL, Harness, _NoCalls, config, record, run
from ragmon.config import JudgeConfig, Price
from ragmon.export.exporter import RagMetrics
from ragmon.judge import runner as runner_module
from ragmon.judge.breaker import BreakerState, CircuitBreaker
from ragmon.judge.client import MAX_REPLY_BYTES, Completion
from ragmon.judge.onward import EvaluationResult, SenderStats
from ragmon.judge.prompts import (
    COHERENCE_CHECKS,
    EVALUATORS,
    TOXICITY_CATEGORIES,
    JudgeRequest,
    build_judge_request,
    estimate_tokens,
)
from ragmon.judge.redact import Redactor
from ragmon.judge.runner import CompletionClient, Judge, Judgement
from ragmon.judge.sampling import JudgeAdmission
from ragmon.judge.stage import JudgeStage
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.scoring.pricing import Pricer, PriceResult

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None)


# -- an open breaker is nearly free on the ingest path ---------------------------------------


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the per-record work of the judge: cutting, cache key, admission, redaction, prompt."""
    calls: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(Redactor, "redact_record", counting("redact", Redactor.redact_record))
    monkeypatch.setattr(runner_module, "trim_record", counting("trim", runner_module.trim_record))
    monkeypatch.setattr(JudgeAdmission, "decide", counting("admit", JudgeAdmission.decide))
    monkeypatch.setattr(runner_module, "_cache_key", counting("hash", runner_module._cache_key))
    monkeypatch.setattr(runner_module, "build_judge_request", counting("prompt", runner_module.build_judge_request))
    return calls


def test_an_open_breaker_refuses_before_redaction_hashing_and_queueing(work: Counter[str]) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown=60.0)
    breaker.failure(0.0)
    judge = Judge(config(redact=(EMAIL,)), _NoCalls(), Pricer(package_table=False), lambda: 0.0,
                  lambda r, j: None, breaker=breaker)
    results = [judge.submit(record(n), 1.0, probe=n == 7) for n in range(20)]
    assert results == ["breaker_open"] * 20
    assert work == Counter()  # no copy, no sha256 key, no admission (budget untouched), no redaction, no prompt
    stats = judge.stats()
    assert stats.queue_depth == 0 and stats.cache_hits == 0
    assert {e: stats.counts.get((e, "error"), 0) for e in runner_module.EVALUATORS} == dict.fromkeys(
        runner_module.EVALUATORS, 20)
    assert breaker.state is BreakerState.OPEN  # asking did not move it
    # once the cool-down is over the next record is admitted (the trial is left to the worker)
    assert judge.submit(record(99), 61.0) == "queued"
    assert work["trim"] == work["hash"] == work["admit"] == 1
    assert work["redact"] == work["prompt"] == 0  # both in the worker, off the event loop
    assert breaker.state is BreakerState.OPEN and breaker.allow(61.0)


def test_a_worker_builds_no_prompt_once_the_breaker_opened(work: Counter[str]) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown=60.0)
    delivered: list[Judgement] = []

    async def main() -> Judge:
        judge = Judge(config(concurrency=1), _NoCalls(), Pricer(package_table=False), lambda: 5.0,
                      lambda r, j: delivered.append(j), breaker=breaker)
        assert [judge.submit(record(n), 5.0) for n in range(3)] == ["queued"] * 3
        breaker.failure(5.0)  # the endpoint failed while they waited
        await judge.start()
        await asyncio.wait_for(judge.join(), 5)
        await judge.stop(1.0)
        return judge

    stats = asyncio.run(main()).stats()
    assert work["prompt"] == 0  # _NoCalls would have raised on a call
    assert [j.outcome for j in delivered] == ["error"] * 3 and all(j.scores is None for j in delivered)
    assert stats.counts[("faithfulness", "error")] == 3


class _Op:
    FAIL, SUCCEED, ASK, WAIT = range(4)


@FAST
@given(st.lists(st.tuples(st.sampled_from(range(4)), st.floats(0.0, 40.0)), max_size=40))
def test_breaker_refusing_is_a_pure_preview_of_allow(ops: list[tuple[int, float]]) -> None:
    breaker = CircuitBreaker(failure_threshold=2, cooldown=5.0, max_cooldown=20.0, trial_timeout=30.0)
    now = 0.0
    for op, dt in ops:
        if op == _Op.WAIT:
            now += dt
        elif op == _Op.FAIL:
            breaker.failure(now)
        elif op == _Op.SUCCEED:
            breaker.success(now)
        else:
            state, until, cooldown = breaker.state, breaker.open_until, breaker.cooldown
            refusing = breaker.refusing(now)
            assert breaker.refusing(now) is refusing
            assert (breaker.state, breaker.open_until, breaker.cooldown) == (state, until, cooldown)
            assert breaker.allow(now) is not refusing


# -- what may and may not open the breaker; replies that must not poison the counters --------


def test_a_refused_request_does_not_open_the_breaker_but_a_refused_key_does() -> None:
    server = JudgeServer()
    server.script(reply(verdict_for_all()), *[status(400, error="context length exceeded")] * 3,
                  status(413), status(422), status(401), status(401))

    async def scenario(h: Harness) -> None:
        for n in range(6):
            await judged_one(h, record(n))
        assert h.judge.stats().breaker is BreakerState.CLOSED  # five refusals in a row: still closed
        await judged_one(h, record(6))
        await judged_one(h, record(7))
        assert h.judge.stats().breaker is BreakerState.OPEN

    h = run(scenario, cfg=config(concurrency=1), server=server, breaker=CircuitBreaker(failure_threshold=2))
    assert h.count("ok") == 1 and h.count("error") == 7 and len(server.requests) == 8


def verdict_for_all() -> str:
    """A valid verdict for a ``record()`` asking every evaluator (3 documents)."""
    return json.dumps({
        "faithfulness": {"claims": [{"claim": "a", "supported": True}]},
        "answer_relevance": {"reason": "r", "verdict": "yes"},
        "context_relevance": {"documents": [{"index": i, "relevant": True} for i in range(3)]},
        "answer_correctness": {"reference_claims": [{"claim": "b", "covered": True}]},
        "coherence": dict.fromkeys(COHERENCE_CHECKS, True),
        "toxicity": dict.fromkeys(TOXICITY_CATEGORIES, "none"),
    })


async def judged_one(h: Harness, rec: RagRecord) -> None:
    assert h.submit(rec) == "queued"
    await h.judge.join()


def test_absurd_usage_and_model_names_do_not_poison_cost_or_memory() -> None:
    server = JudgeServer()
    server.script(
        raw(completion(verdict_for_all(), model="m" * 100_000,
                       usage={"prompt_tokens": 10**30, "completion_tokens": -5})),
        raw(completion(verdict_for_all(), usage={"prompt_tokens": 1e308, "completion_tokens": "9"})),
    )
    pricer = Pricer({MODEL: Price(input=1.0, output=1.0)}, package_table=False)
    h = run(lambda h: judge_all(h, record(1), record(2)), server=server, pricer=pricer)
    stats = h.judge.stats()
    # counts that are no counts are estimated (the prompt's bytes / 3, the reply's bytes / 3), priced, charged
    request = build_judge_request(record(1), EVALUATORS, "0" * 16)
    assert request is not None
    tokens = (request.input_tokens_estimate, estimate_tokens(verdict_for_all()))
    assert h.count("ok") == 2 and stats.unpriced_tokens == 0 and stats.usage_estimated == 2
    assert stats.cost_usd == pytest.approx(2 * sum(tokens) / 1e6, rel=1e-12)
    assert [j.model for _, j in h.results] == [MODEL, MODEL]
    assert [(j.input_tokens, j.output_tokens) for _, j in h.results] == [tokens, tokens]


class _InfinitePricer(Pricer):
    def price(self, model: str, provider: str | None, input_tokens: int, output_tokens: int,
              cached_input_tokens: int = 0, span_cost_usd: float | None = None,
              at_ns: int | None = None) -> PriceResult:
        return PriceResult(math.inf, "config", model)


def test_a_non_finite_price_counts_the_tokens_as_unpriced() -> None:
    h = run(lambda h: judge_all(h, record(1)), pricer=_InfinitePricer(package_table=False))
    stats = h.judge.stats()
    assert h.count("ok") == 1 and stats.cost_usd == 0.0 and stats.unpriced_tokens == 120
    assert h.results[0][1].cost_usd is None


async def judge_all(h: Harness, *records: RagRecord) -> None:
    for rec in records:
        assert h.submit(rec) == "queued"
    await h.judge.join()


# -- the onward sender cut off at shutdown ----------------------------------------------------


@contextlib.asynccontextmanager
async def never_answering() -> AsyncIterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that never answers; yields its base URL."""

    async def never(request: web.Request) -> web.Response:
        await asyncio.Event().wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/traces", never)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def _stage(config: JudgeConfig, client: CompletionClient | None = None) -> JudgeStage:
    metrics = RagMetrics(CollectorRegistry(), ks=(1, 3), windows=[300.0], max_label_values=100, clock=lambda: 0.0)
    return JudgeStage(config, (metrics,), metrics.ks, Pricer(package_table=False), lambda: 0.0, {}, client=client,
                      rng=random.Random(0))


def test_results_the_sender_could_not_send_at_shutdown_are_counted() -> None:
    docs = (RetrievedDocument("d0", content="Paris is the capital of France."),)

    async def main() -> SenderStats:
        async with never_answering() as url:
            stage = _stage(JudgeConfig(sample_rate=1.0, export_endpoint=url, lexical_max_per_second=1000))
            await stage.start()
            for n in range(600):  # lexical scores, sent onward
                stage.observe(record(n, retrieved=docs, answer="Paris is the capital of France."), 0.0)
            await asyncio.wait_for(stage.stop(0.3), 5)
        assert stage.sender is not None
        return stage.sender.stats()

    sent = asyncio.run(main())
    assert sent.sent == 0 and sent.buffered == 0
    assert sent.failed == 512 and sent.dropped == 88  # the batch in flight, then what was left


class _Hanging:
    async def complete(self, request: JudgeRequest) -> Completion:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def test_stage_stop_keeps_to_its_timeout_when_judge_and_sender_both_hang() -> None:
    async def main() -> tuple[float, JudgeStage]:
        async with never_answering() as url:
            stage = _stage(JudgeConfig(sample_rate=1.0, export_endpoint=url, concurrency=1), _Hanging())
            await stage.start()
            stage.observe(record(1), 0.0)
            assert stage.sender is not None and stage.judge is not None
            for n in range(10):
                stage.sender.offer(EvaluationResult(bytes(16), b"", n.to_bytes(8, "big"), 0, {"faithfulness": 1.0}, "llm"))
            while stage.judge.stats().in_flight == 0:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            await asyncio.wait_for(stage.stop(1.0), 10)
            return time.monotonic() - started, stage

    elapsed, stage = asyncio.run(main())
    assert elapsed < 1.6, f"stop(1.0) took {elapsed:.2f}s"  # not 1 s for the judge plus 1 s for the sender
    assert stage.judge is not None and stage.sender is not None
    assert stage.judge.stats().counts[("faithfulness", "dropped")] == 1
    sent = stage.sender.stats()
    assert sent.failed + sent.dropped == 10 and sent.buffered == 0


# -- logs carry no content, no reply, no key ---------------------------------------------------

KEY = "sk-LEAKCHECK-9f27c4e1d0"
QUERY = "QRYSECRET-4b1e"
ANSWER = "ANSSECRET-77ad"
DOC = "DOCSECRET-0c9f"
REFERENCE = "REFSECRET-e2a4"
REPLY = "RPLSECRET-51b8"
SECRETS = (KEY, QUERY, ANSWER, DOC, REFERENCE, REPLY, "9f27c4e1d0")
ECHO = f"{REPLY}: you sent {QUERY} / {ANSWER} / {DOC} / {REFERENCE} with key {KEY}"


def _secret_record(n: int) -> RagRecord:
    docs = (RetrievedDocument("d0", content=f"{DOC} The capital is Paris."),
            RetrievedDocument("d1", content=f"{DOC} France makes cheese."))
    return record(n, query=f"{QUERY} capital? ({n})", answer=f"{ANSWER} Paris.", retrieved=docs,
                  reference_answer=f"{REFERENCE} Paris.")


BUG_TOKENS = 777_777
"""A reply reporting this many prompt tokens makes ``_BuggyPricer`` raise."""


class _BuggyPricer(Pricer):
    """Raises with content in the message for one token count: a bug in the worker's path."""

    def price(self, model: str, provider: str | None, input_tokens: int, output_tokens: int,
              cached_input_tokens: int = 0, span_cost_usd: float | None = None,
              at_ns: int | None = None) -> PriceResult:
        if input_tokens == BUG_TOKENS:
            raise RuntimeError(f"bug while pricing {ECHO}")
        return super().price(model, provider, input_tokens, output_tokens, cached_input_tokens, span_cost_usd, at_ns)


def _log_texts(records: list[logging.LogRecord]) -> Iterator[tuple[str, str]]:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    for rec in records:
        yield rec.name, formatter.format(rec) + repr(rec.args) + repr(rec.__dict__.get("extra", ""))


def test_no_log_record_carries_content_replies_or_the_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "asyncio"):
        caplog.set_level(logging.DEBUG, logger=name)
    def valid(**change: Any) -> str:  # a verdict for a secret record (two documents), changed
        verdict: dict[str, Any] = {
            "faithfulness": {"claims": [{"claim": ECHO, "supported": True}]},
            "answer_relevance": {"reason": ECHO, "verdict": "yes"},
            "context_relevance": {"documents": [{"index": 0, "relevant": True}, {"index": 1, "relevant": False}]},
            "answer_correctness": {"reference_claims": [{"claim": ECHO, "covered": True}]},
        }
        verdict.update(change)
        return json.dumps(verdict)

    wrong_shape = json.dumps({ECHO: 1, "answer_relevance": {"reason": ECHO, "verdict": ECHO}})
    bad_docs = json.dumps({"context_relevance": {"documents": [{"index": 7, "relevant": True, ECHO: ECHO}]}})
    server = JudgeServer()
    server.script(
        status(400, error=f"response_format is not supported; {ECHO}"),  # switches to JSON instructions
        reply(f"Sure! {ECHO}"),  # invalid: no JSON object
        reply(wrong_shape), reply(bad_docs), reply(valid(**{ECHO: ECHO})),
        reply(valid(answer_relevance={"reason": "r", "verdict": ECHO})),
        reply(valid(faithfulness={"claims": [{"claim": "c", "supported": True, ECHO: 1}]})), reply(json.dumps({"faithfulness": {"claims": [{"claim": ECHO}]}})),
        reply(ECHO * 2_000),  # over MAX_REPLY_CHARS
        status(500, error=ECHO), status(503, error=ECHO),  # retried once, then error
        status(429, error=ECHO, retry_after="0"), status(502, error=ECHO),
        status(400, error=ECHO), status(401, error=ECHO), status(404, error=ECHO), status(422, error=ECHO),
        raw(f"<html>{ECHO}</html>"), raw(json.dumps({"object": "error", "message": ECHO})),
        raw(json.dumps({"choices": [{"message": ECHO}]})), raw('{"a":' * 50_000 + ECHO),
        raw(completion(ECHO * (MAX_REPLY_BYTES // len(ECHO) + 1))), streamed(2 * MAX_REPLY_BYTES), gzip_bomb(10**7),
        drop(), drop(),
        # malformed HTTP: h11's errors quote the bytes they refused
        wire(f"HTTP/1.1 200 OK\r\n{QUERY} {REPLY}\r\n\r\n".encode()), wire(f"{ECHO}\r\n\r\n".encode()),
        delay(1.0, content=ECHO), delay(1.0, content=ECHO),  # timeouts
        raw(completion(verdict_for_all(), usage={"prompt_tokens": BUG_TOKENS, "completion_tokens": 1})),  # a bug
        Action(),  # a valid verdict: ok, then on_result raises
    )

    def explode(rec: RagRecord, judgement: Judgement) -> None:
        if judgement.outcome == "ok":
            raise ValueError(f"callback failed on {rec.query} {rec.answer} {ECHO}")

    async def scenario(h: Harness) -> None:
        n = 0
        while h.server.scripted:
            n += 1
            assert h.submit(_secret_record(n)) == "queued"
            await h.judge.join()
        h.server.script(hang())
        assert h.submit(_secret_record(n + 1)) == "queued"
        while h.server.current == 0:  # the call is in flight
            await asyncio.sleep(0.01)
        await h.judge.stop(0.05)  # cancels it

    h = run(scenario, cfg=config(concurrency=1, max_retries=1, timeout=0.3, evaluators=("faithfulness",
            "answer_relevance", "context_relevance", "answer_correctness")), server=server,
            pricer=_BuggyPricer(package_table=False), breaker=CircuitBreaker(failure_threshold=10_000, min_calls=10_000),
            on_result=explode, key=KEY)
    outcomes = Counter(j.outcome for _, j in h.results)
    assert outcomes["invalid"] >= 5 and outcomes["error"] >= 10 and outcomes["timeout"] == 1 and outcomes["ok"] >= 1
    assert KEY not in h.server.bodies_text() and QUERY in h.server.bodies_text()  # the content did go out
    # httpcore's DEBUG trace (``receive_response_headers.complete`` / ``.failed``) repeats
    # response headers and h11's errors verbatim: that is the transport's own debug output,
    # which only the process's logging configuration can silence (ragmon's CLI, at
    # ``--log-level debug``); everything else is clean at every level
    texts = list(_log_texts([
        r for r in caplog.records if r.levelno >= logging.INFO or not r.name.startswith("httpcore")
    ]))
    leaks = [(name, text[:300]) for name, text in texts for secret in SECRETS if secret in text]
    assert not leaks
    messages = "\n".join(text for _, text in texts)
    for expected in ("judge reply invalid", "judge call failed", "judge worker failed on one record",
                     "on_result callback failed", "RuntimeError", "ValueError", "cancelling 1 call"):
        assert expected in messages, expected
    loggers = {name.split(".")[0] for name, _ in texts}
    assert {"ragmon", "openai"} <= loggers and loggers & {"httpx", "httpx2"}, loggers
