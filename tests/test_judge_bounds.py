"""What one judge call may take and cost (issue "Trust, second round"): the record cut before
anything walks it, redaction and the prompt built off the event loop, ``max_tokens`` sized to
the evaluators asked, the USD budget checked against each call's own estimate right before it,
usage-less replies estimated, the configured model's price, breaker settings from ``[judge]``.
The real ``openai`` client against the scripted server, as in ``test_judge_runner``."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import pytest

from judge_server import Action, JudgeServer, cut_at_max_tokens, status, verdict_for
from test_judge_runner import ALL, EMAIL, MODEL, Harness, config, judged, record, run
from ragmon.config import Price
from ragmon.judge import runner as runner_module
from ragmon.judge.breaker import BreakerState
from ragmon.judge.prompts import (
    MAX_CLAIMS,
    MAX_DATA_CHARS,
    REDACT_MARGIN,
    build_judge_request,
    estimate_tokens,
    neutralize,
    reply_token_allowance,
    trim_record,
)
from ragmon.judge.redact import Redactor
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.scoring.pricing import Pricer

NONCE = "0123456789abcdef"
KEEP = MAX_DATA_CHARS + REDACT_MARGIN


def docs(n: int, chars: int = 100) -> tuple[RetrievedDocument, ...]:
    return tuple(RetrievedDocument(f"d{i}", 0.5, f"doc {i:03d} " + "y" * (chars - 8)) for i in range(n))


# -- the cut: slicing only, before anything walks a character -------------------------------------


def test_trim_keeps_the_first_documents_and_slices_every_text() -> None:
    long = "z" * (KEEP + 500)
    rec = record(query=long, answer=long, reference_answer="short", retrieved=docs(30, chars=KEEP + 1),
                 reranked=docs(25, chars=KEEP), root_span_id=b"\x07" * 8, has_retrieval=True)
    trimmed = trim_record(rec, 20)
    cut = trimmed.record
    assert trimmed.documents_left_out == 5  # of the reranked list: the context the generator saw
    assert cut.retrieved == () and cut.reranked is not None and len(cut.reranked) == 20
    assert [d.id for d in cut.reranked] == [f"d{i}" for i in range(20)]
    assert [d.content for d in cut.reranked] == [d.content for d in docs(20, chars=KEEP)]  # not over KEEP: whole
    assert cut.query == cut.answer == long[:KEEP] and cut.reference_answer == "short"
    assert trimmed.truncated == frozenset({"query", "answer"})
    assert (cut.trace_id, cut.root_span_id, cut.service, cut.variant, cut.has_retrieval) == (
        rec.trace_id, rec.root_span_id, rec.service, rec.variant, True)
    # a text not cut is the same object: nothing is copied for a small record
    small = record()
    assert trim_record(small, 20).record.retrieved[0] is small.retrieved[0]
    assert trim_record(small, 20).record.query is small.query
    # documents past the first are cut, and flagged
    longer = trim_record(record(retrieved=docs(3, chars=KEEP + 1)), 20)
    assert longer.truncated == frozenset({"document.0", "document.1", "document.2"})
    assert all(d.content is not None and len(d.content) == KEEP for d in longer.record.retrieved)
    # without documents sent, only their ids are kept
    withheld = trim_record(record(retrieved=docs(30)), 20, send_documents=False)
    assert [d.content for d in withheld.record.retrieved] == [None] * 20 and withheld.documents_left_out == 10


class _Spy(str):
    """A string that records how it is sliced and refuses to be walked whole."""

    slices: list[slice] = []

    def __getitem__(self, key: Any) -> str:
        _Spy.slices.append(key)
        return str.__getitem__(self, key)

    def __iter__(self) -> Any:
        raise AssertionError("walked before it was cut")


def test_neutralize_cuts_before_it_walks() -> None:
    _Spy.slices = []
    text = _Spy("a<b" * 100_000)
    out = neutralize(text, NONCE, 10)
    assert _Spy.slices == [slice(None, 10)]
    assert out == "a&lt;ba&lt" + " [truncated]"  # escaped, then cut again to 10
    assert neutralize("short", NONCE, 10) == "short"
    assert neutralize("short", NONCE, 10, truncated=True) == "short [truncated]"
    assert neutralize("x" * 10, NONCE, 10) == "x" * 10 and neutralize("x" * 11, NONCE, 10) == "x" * 10 + " [truncated]"


@pytest.mark.parametrize("field", ["answer", "document"])
def test_a_redaction_match_straddling_the_cut_is_never_sent_in_part(field: str) -> None:
    """Earlier matches shrink the text (a 27-character address becomes ``[REDACTED]``), which
    would pull what lies at the cut into the part sent; the cut text's last ``REDACT_MARGIN``
    characters are dropped after redaction, so no fragment of the address at the cut leaves."""
    redactor = Redactor.from_patterns([EMAIL])
    filler = "bob.filler.mail@example.org " * 200  # 5,600 characters, each address 17 shorter once redacted
    for offset in range(-30, 6):
        text = filler + "w" * (KEEP - len(filler) + offset) + " qzxvk.private@example.com and more"
        if field == "answer":
            rec, evaluators = record(answer=text), ("coherence",)
        else:
            rec, evaluators = record(retrieved=(RetrievedDocument("d0", content=text),)), ("context_relevance",)
        trimmed = trim_record(rec, 20)
        assert trimmed.truncated == {"answer" if field == "answer" else "document.0"}
        request = build_judge_request(
            redactor.redact_record(trimmed.record), evaluators, NONCE, truncated=trimmed.truncated,
        )
        assert request is not None
        sent = request.messages[1]["content"]
        assert "qzx" not in sent and "example.org" not in sent and "[truncated]" in sent, offset


def test_the_input_estimate_covers_the_longer_way_of_sending_the_prompt() -> None:
    """With structured output the schema goes along; without it, the fallback instructions:
    the estimate is at least either's bytes / 3, plus what each message costs besides."""
    request = build_judge_request(record(), ALL, NONCE)
    assert request is not None
    system, user = (m["content"] for m in request.messages)
    structured = estimate_tokens(system) + estimate_tokens(user) + estimate_tokens(json.dumps(request.response_format))
    fallback = estimate_tokens(system) + estimate_tokens(request.fallback_messages[1]["content"])
    assert request.input_tokens_estimate >= max(structured, fallback) + 2 * 4
    assert request.input_tokens_estimate <= max(structured, fallback) + 2 * 8 + 1


def test_the_prompt_says_how_many_documents_were_left_out() -> None:
    trimmed = trim_record(record(retrieved=docs(45)), 20)
    request = build_judge_request(trimmed.record, ALL, NONCE, documents_left_out=trimmed.documents_left_out)
    assert request is not None
    text = request.messages[1]["content"]
    assert "DOCUMENTS (20; 25 more were left out and are not shown):" in text
    assert "List each index from 0 to 19 exactly once" in text
    assert request.document_ids == tuple(f"d{i}" for i in range(20)) and request.documents_left_out == 25
    uncut = build_judge_request(record(), ALL, NONCE)
    assert uncut is not None and "DOCUMENTS (3):" in uncut.messages[1]["content"]


# -- the judge: cache key, threads, left-out documents ----------------------------------------------


def test_records_that_differ_only_past_the_cut_share_a_judgement() -> None:
    base = docs(25)
    other_tail = base[:20] + tuple(RetrievedDocument(f"x{i}", None, f"other {i}") for i in range(5))
    longer_text = record(1).query + " " + "q" * KEEP

    async def scenario(h: Harness) -> None:
        await judged(h, record(1, retrieved=base))
        assert h.submit(record(2, query=record(1).query, retrieved=other_tail)) == "cached"
        assert h.submit(record(3, query=record(1).query, retrieved=base[:24])) == "queued"  # 4 left out, not 5
        await h.judge.join()
        await judged(h, record(4, query=longer_text + "a", retrieved=base))
        assert h.submit(record(5, query=longer_text + "b", retrieved=base)) == "cached"  # past the cut

    h = run(scenario, cfg=config(max_documents=20))
    assert len(h.server.requests) == 3 and h.judge.stats().cache_hits == 2
    hit = h.results[1]
    assert hit[1].cached and hit[1].scores is not None and hit[1].scores.documents_left_out == 5
    assert hit[0].trace_id == record(2).trace_id and len(hit[0].retrieved) == 20  # delivered as cut
    assert h.judge.stats().documents_left_out == 5 + 4 + 5


def test_a_record_redaction_leaves_nothing_of_is_not_sent(caplog: pytest.LogCaptureFixture) -> None:
    """A pattern that takes a whole cut answer leaves only what the cut's margin drops: nothing
    to judge, no call, ``error`` (like any judgement that failed), logged without content."""
    caplog.set_level(logging.INFO, logger="ragmon")
    answer = "SECRET " * (KEEP // 7 + 10)
    h = run(lambda h: judged(h, record(answer=answer)), cfg=config(evaluators=("coherence",), redact=(r"(?s).+",)))
    assert h.server.requests == [] and [j.outcome for _, j in h.results] == ["error"]
    assert h.count("error", "coherence") == 1
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("ragmon")]
    assert "judge request not sent: nothing left to judge once redacted" in messages
    assert not any("SECRET" in m for m in messages)


def test_redaction_and_the_prompt_are_built_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: dict[str, set[int]] = {"redact": set(), "prompt": set(), "loop": set()}
    redact, build = Redactor.redact_record, runner_module.build_judge_request

    def redacting(self: Redactor, rec: RagRecord) -> RagRecord:
        threads["redact"].add(threading.get_ident())
        return redact(self, rec)

    def building(*args: Any, **kwargs: Any) -> Any:
        threads["prompt"].add(threading.get_ident())
        return build(*args, **kwargs)

    monkeypatch.setattr(Redactor, "redact_record", redacting)
    monkeypatch.setattr(runner_module, "build_judge_request", building)

    async def scenario(h: Harness) -> None:
        threads["loop"].add(threading.get_ident())
        await judged(h, record(1), record(2))

    h = run(scenario, cfg=config(redact=(EMAIL,)))
    assert h.count("ok") == 2
    assert len(threads["redact"]) >= 1 and len(threads["prompt"]) >= 1
    assert not (threads["redact"] | threads["prompt"]) & threads["loop"]


# -- max_tokens ----------------------------------------------------------------------------------


def test_max_tokens_is_the_sum_of_what_the_evaluators_asked_allow() -> None:
    assert reply_token_allowance((), 0) == 64
    assert reply_token_allowance(("faithfulness",), 3) == 64 + 16 + MAX_CLAIMS * 64
    assert reply_token_allowance(("context_relevance",), 20) == 64 + 16 + 20 * 16
    assert reply_token_allowance(("answer_relevance", "coherence", "toxicity"), 3) == 64 + 160 + 64 + 96
    assert reply_token_allowance(ALL, 20) == 4848  # every evaluator, max_documents' default

    async def scenario(h: Harness) -> None:
        await judged(h, record(1), record(2, reference_answer=None, retrieved=docs(30)))

    h = run(scenario, cfg=config(max_documents=20))
    first, second = h.server.requests
    assert first["max_tokens"] == reply_token_allowance(ALL, 3) == 64 + 2 * (16 + 32 * 64) + 16 + 3 * 16 + 320
    no_reference = tuple(e for e in ALL if e != "answer_correctness")
    assert second["max_tokens"] == reply_token_allowance(no_reference, 20)


def test_a_reply_cut_at_max_tokens_is_invalid_charged_and_logged_without_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="ragmon")
    server = JudgeServer(usage=(1000, 4576))
    # a verdict that happens to parse, but the reply was cut: it is not the whole verdict
    server.script(Action(content=None, finish_reason="length"),
                  cut_at_max_tokens('{"faithfulness": {"claims": [{"SECRET'))
    pricer = Pricer({MODEL: Price(input=1.0, output=1.0)}, package_table=False)
    h = run(lambda h: judged(h, record(1), record(2)), cfg=config(concurrency=1), server=server, pricer=pricer)
    cost = pytest.approx(5576 / 1e6)  # the tokens were still spent
    assert [(j.outcome, j.scores, j.cost_usd) for _, j in h.results] == [("invalid", None, cost)] * 2
    assert {e: h.count("invalid", e) for e in ALL} == dict.fromkeys(ALL, 2) and h.judge.stats().cache_size == 0
    reasons = [r.getMessage() for r in caplog.records if r.getMessage().startswith("judge reply invalid")]
    assert reasons == ["judge reply invalid: reply cut at max_tokens (4576)"] * 2
    assert not any("SECRET" in r.getMessage() for r in caplog.records)


# -- the USD budget: checked against each call's estimate, right before it -----------------------


def _estimate(rec: RagRecord) -> tuple[int, int]:
    request = build_judge_request(rec, ALL, NONCE)
    assert request is not None
    return request.input_tokens_estimate, request.max_tokens


@pytest.mark.parametrize("concurrency", [4, 1])
def test_thirty_sampled_traces_at_once_spend_at_most_the_budget(concurrency: int) -> None:
    """The issue's reproduction: ``max_usd_per_hour = 0.01``, 30 sampled traces at once, $0.01
    a call. Each call is estimated at $0.008 (its prompt's bytes / 3 and ``max_tokens``, at the
    configured model's price) and costs $0.01: the first reserves $0.008, every other is
    refused before it is sent ($0.008 + $0.008 > $0.01, then $0.01 + $0.008): one call, $0.01."""
    records = [record(n) for n in range(10, 40)]  # two-digit queries: every prompt the same size
    tokens_in, tokens_out = _estimate(records[0])
    price = 0.008 * 1e6 / (tokens_in + tokens_out)
    usage = (round(0.01 * 1e6 / price) - tokens_out, tokens_out)  # the server's count: $0.01
    server = JudgeServer(usage=usage)
    pricer = Pricer({MODEL: Price(input=price, output=price)}, package_table=False)

    async def scenario(h: Harness) -> None:
        assert [h.submit(r) for r in records] == ["queued"] * 30
        await h.judge.join()

    h = run(scenario, cfg=config(max_usd_per_hour=0.01, concurrency=concurrency, max_queue=100), server=server,
            pricer=pricer)
    assert len(server.requests) == 1
    stats = h.judge.stats()
    assert stats.cost_usd == pytest.approx(0.01, abs=1e-5)  # the server's count rounds to a token
    assert h.count("ok") == 1 and h.count("skipped_budget") == 29
    assert h.judge._admission.reserved == 0.0  # every reservation was settled


def test_with_exact_estimates_the_budget_is_never_passed() -> None:
    """Estimates equal to the cost: $0.045 an hour buys exactly four $0.01 calls, four in flight
    at once (the fifth would need $0.05)."""
    records = [record(n) for n in range(10, 30)]
    tokens_in, tokens_out = _estimate(records[0])
    price = 0.01 * 1e6 / (tokens_in + tokens_out)
    server = JudgeServer(usage=(tokens_in, tokens_out))
    server.script(*[Action(delay=0.05)] * 4)
    pricer = Pricer({MODEL: Price(input=price, output=price)}, package_table=False)

    async def scenario(h: Harness) -> None:
        assert [h.submit(r) for r in records] == ["queued"] * 20
        await h.judge.join()

    h = run(scenario, cfg=config(max_usd_per_hour=0.045, concurrency=4, max_queue=100), server=server, pricer=pricer)
    assert len(server.requests) == 4 and server.max_concurrent == 4
    assert h.judge.stats().cost_usd == pytest.approx(0.04, rel=1e-9) and h.count("skipped_budget") == 16


def test_a_failed_call_gives_its_reservation_back() -> None:
    records = [record(n) for n in range(10, 13)]
    tokens_in, tokens_out = _estimate(records[0])
    price = 0.01 * 1e6 / (tokens_in + tokens_out)
    server = JudgeServer(usage=(tokens_in, tokens_out))
    server.script(status(500), status(401))  # no reply: nothing spent
    pricer = Pricer({MODEL: Price(input=price, output=price)}, package_table=False)
    h = run(lambda h: judged(h, *records), cfg=config(max_usd_per_hour=0.015, concurrency=1), server=server,
            pricer=pricer)
    assert [j.outcome for _, j in h.results] == ["error", "error", "ok"]
    assert h.judge.stats().cost_usd == pytest.approx(0.01, rel=1e-9) and h.judge._admission.reserved == 0.0


def test_an_unpriced_judge_model_is_not_held_by_the_budget() -> None:
    """With no price the cost is unknown (its tokens are counted unpriced), so no budget applies."""
    h = run(lambda h: judged(h, record(1), record(2)), cfg=config(max_usd_per_hour=0.0001))
    assert h.count("ok") == 2 and h.judge.stats().unpriced_tokens == 240


# -- usage-less replies and the configured model's price ------------------------------------------


@pytest.mark.parametrize("action", [Action(no_usage=True), Action(usage=(0, 0))], ids=["no usage", "zeros"])
def test_a_reply_without_usage_is_estimated_and_priced_as_the_configured_model(action: Action) -> None:
    """No ``usage`` (or zeros: a prompt is never 0 tokens): the prompt's estimate in, the
    reply's bytes / 3 out, at ``judge.model``'s price whatever model the reply names."""
    server = JudgeServer()
    server.script(action)
    pricer = Pricer({MODEL: Price(input=2.0, output=4.0)}, package_table=False)
    h = run(lambda h: judged(h, record()), server=server, pricer=pricer)
    tokens_in, _ = _estimate(record())
    tokens_out = -(-len(verdict_for(server.requests[0]).encode()) // 3)
    ((_, judgement),) = h.results
    assert (judgement.outcome, judgement.input_tokens, judgement.output_tokens) == ("ok", tokens_in, tokens_out)
    assert judgement.cost_usd == pytest.approx((2.0 * tokens_in + 4.0 * tokens_out) / 1e6, rel=1e-12)
    assert h.judge.stats().usage_estimated == 1 and h.judge.stats().cost_usd == judgement.cost_usd


# -- the breaker's settings --------------------------------------------------------------------------


def test_breaker_thresholds_and_cool_down_come_from_the_config() -> None:
    server = JudgeServer()
    server.script(status(500), status(500), status(500), status(500))

    async def scenario(h: Harness) -> None:
        await judged(h, record(1), record(2))  # two failures in a row open it (default: 5)
        assert h.judge.stats().breaker is BreakerState.OPEN
        h.now[0] += 9.0
        assert h.submit(record(3)) == "breaker_open"  # the 10 s cool-down is not over
        h.now[0] += 1.5
        await judged(h, record(4))  # the trial fails: the cool-down doubles, up to 15 s
        assert h.judge.stats().breaker is BreakerState.OPEN
        h.now[0] += 14.0
        assert h.submit(record(5)) == "breaker_open"
        h.now[0] += 1.5
        await judged(h, record(6))  # fails again: 15 s (max) again
        h.now[0] += 15.5
        await judged(h, record(7))  # the trial succeeds: closed
        assert h.judge.stats().breaker is BreakerState.CLOSED

    h = run(scenario, cfg=config(concurrency=1, breaker_failures=2, breaker_cooldown=10.0, breaker_max_cooldown=15.0),
            server=server)
    assert len(server.requests) == 5 and [j.outcome for _, j in h.results] == ["error"] * 4 + ["ok"]


def test_breaker_failure_ratio_window_and_minimum_come_from_the_config() -> None:
    server = JudgeServer()
    server.script(Action(), status(500), Action(), status(500))

    async def scenario(h: Harness) -> None:
        await judged(h, *(record(n) for n in range(1, 5)))  # 2 of 4 failed: 0.5 >= 0.5 with 4 calls
        assert h.judge.stats().breaker is BreakerState.OPEN

    run(scenario, cfg=config(concurrency=1, breaker_failures=100, breaker_failure_ratio=0.5, breaker_min_calls=4),
        server=server)

    async def spread(h: Harness) -> None:
        for n in range(1, 7):  # the window is 10 s: failures 11 s apart never add up
            await judged(h, record(n))
            h.now[0] += 11.0
        assert h.judge.stats().breaker is BreakerState.CLOSED

    server = JudgeServer()
    server.script(status(500), Action(), status(500), Action(), status(500), Action())
    h = run(spread, cfg=config(concurrency=1, breaker_failures=100, breaker_failure_ratio=0.5, breaker_min_calls=2,
                               breaker_window=10.0, breaker_cooldown=600.0, breaker_max_cooldown=600.0), server=server)
    assert len(server.requests) == 6  # over a minute (the default window) it would have opened at the third


def test_while_calls_in_flight_hold_the_budget_a_trace_is_refused_as_it_arrives() -> None:
    """Reservations count at admission too: with the hour's whole budget held by a call in
    flight, a new trace is refused at once instead of waiting in the queue to be refused. (A
    token costs 2^-20 USD, so every amount here is exact.)"""
    tokens_in, tokens_out = _estimate(record(10))
    per_token = 2.0**-20
    server = JudgeServer(usage=(tokens_in, tokens_out))
    server.script(Action(delay=0.3))
    pricer = Pricer({MODEL: Price(input=per_token * 1e6, output=per_token * 1e6)}, package_table=False)

    async def scenario(h: Harness) -> None:
        assert h.submit(record(10)) == "queued"
        while not h.server.requests:  # the call is in flight, the whole budget reserved
            await asyncio.sleep(0.01)
        assert h.submit(record(11)) == "skipped_budget"
        await h.judge.join()

    budget = (tokens_in + tokens_out) * per_token
    h = run(scenario, cfg=config(max_usd_per_hour=budget), server=server, pricer=pricer)
    assert h.count("ok") == 1 and h.count("skipped_budget") == 1 and len(server.requests) == 1
    assert h.judge.stats().cost_usd == budget
