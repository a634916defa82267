"""``ragmon.judge.runner.Judge`` at its edges: what a failed judgement carries, bugs and
endpoint failures in the logs, the cache's key and eviction, pricing of the judge's own
tokens, backoff jitter, and the worker lifecycle (``start`` twice, ``stop`` when idle or cut
off). The real ``openai`` client against the scripted server, as in ``test_judge_runner``."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from judge_server import JudgeServer, completion, delay, raw, status
from test_judge_faults import verdict_for_all
from test_judge_runner import ALL, DOCS, EMAIL, MODEL, Harness, _NoCalls, config, judged, record, run
from ragmon.config import Price
from ragmon.judge.breaker import BreakerState, CircuitBreaker
from ragmon.judge.client import Completion
from ragmon.judge.prompts import JudgeRequest
from ragmon.judge.runner import Judge, Judgement
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.scoring.pricing import Pricer, PriceResult

SECRET = "CONTENT-SECRET-31c7"


def _ragmon_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("ragmon") and r.levelno >= logging.ERROR]


# -- failed judgements and bugs -------------------------------------------------------------


def test_a_failed_judgement_names_its_evaluators_and_model_and_spent_no_tokens() -> None:
    server = JudgeServer()
    server.script(status(500))
    h = run(lambda h: judged(h, record()), server=server)
    assert [j for _, j in h.results] == [
        Judgement(ALL, "error", None, 0, 0, None, MODEL, cause="judge endpoint answered 500: scripted error", calls=1)
    ]


class _BrokenPricer(Pricer):
    """A bug in the worker's path: pricing raises, its message quoting content."""

    def price(self, model: str, provider: str | None, input_tokens: int, output_tokens: int,
              cached_input_tokens: int = 0, span_cost_usd: float | None = None,
              at_ns: int | None = None) -> PriceResult:
        raise RuntimeError(f"pricing failed on {SECRET}")


def test_a_bug_while_judging_counts_error_and_logs_its_type_and_frames_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ragmon")
    h = run(lambda h: judged(h, record(1), record(2)), cfg=config(concurrency=1), pricer=_BrokenPricer())
    assert [j for _, j in h.results] == [
        Judgement(ALL, "error", None, 0, 0, None, MODEL, cause="a bug in ragmon (RuntimeError; logged)")
    ] * 2
    assert {e: h.count("error", e) for e in ALL} == dict.fromkeys(ALL, 2)  # the worker went on
    errors = _ragmon_errors(caplog)
    assert len(errors) == 2
    for message in errors:
        assert ": RuntimeError\n" in message and ", in price\n" in message  # type and the raising frame
        assert SECRET not in message


def test_endpoint_failures_and_an_open_breaker_are_not_logged_as_bugs(caplog: pytest.LogCaptureFixture) -> None:
    """A refusal (422), retries that run out on a 429 with Retry-After, and a record the
    breaker refuses in the worker all end as ``error`` with no error-level log."""
    caplog.set_level(logging.DEBUG, logger="ragmon")
    server = JudgeServer()
    server.script(status(422), status(500), status(429, retry_after="0"))

    async def scenario(h: Harness) -> None:
        await judged(h, record(1))
        await judged(h, record(2), record(3))  # record 2's two failures open the breaker; 3 waits
        assert h.judge.stats().breaker is BreakerState.OPEN

    h = run(scenario, cfg=config(concurrency=1, max_retries=1), server=server,
            breaker=CircuitBreaker(failure_threshold=2, cooldown=60.0))
    assert len(server.requests) == 3
    assert [j for _, j in h.results] == [
        Judgement(ALL, "error", None, 0, 0, None, MODEL, cause="judge endpoint answered 422: scripted error", calls=1),
        # the retry's answer is the one named: the last attempt's
        Judgement(ALL, "error", None, 0, 0, None, MODEL, cause="judge endpoint answered 429: scripted error", calls=2),
        Judgement(ALL, "error", None, 0, 0, None, MODEL,
                  cause="not sent: the circuit breaker is open after repeated failures"),
    ]
    assert _ragmon_errors(caplog) == []


@pytest.mark.parametrize("redact", [(), (EMAIL,)], ids=["plain", "redacting"])
def test_text_made_only_of_invisible_characters_is_no_text(redact: tuple[str, ...]) -> None:
    """The prompt (and the redactor) drop zero-width and control characters, so a field made
    only of them is absent: nothing is sent for it and no evaluator is counted ``ok`` for it."""

    async def scenario(h: Harness) -> None:
        assert h.submit(record(1, query="\u200b", answer="\u200b\u200d")) == "not_applicable"
        assert h.submit(record(2, answer="\u200b\x00 ")) == "queued"  # the query and documents remain
        await h.judge.join()

    h = run(scenario, cfg=config(redact=redact))
    assert len(h.server.requests) == 1
    assert h.judge.stats().counts == {("context_relevance", "ok"): 1}
    [(_, judgement)] = h.results
    assert judgement.evaluators == ("context_relevance",)


# -- the cache ------------------------------------------------------------------------------


def same_content(n: int, like: int, **kw: object) -> RagRecord:
    """Another trace (``n``) with the content of ``record(like)``."""
    return record(n, query=record(like).query, **kw)


def test_the_cache_evicts_the_least_recently_used_judgement() -> None:
    async def scenario(h: Harness) -> None:
        await judged(h, record(1), record(2))
        assert h.submit(same_content(11, 1)) == "cached"  # 1 is now more recent than 2
        await judged(h, record(3))  # evicts 2
        assert [h.submit(same_content(n, like)) for n, like in ((13, 3), (12, 1))] == ["cached", "cached"]
        assert h.submit(same_content(14, 2)) == "queued"
        await h.judge.join()

    h = run(scenario, cfg=config(cache_size=2))
    stats = h.judge.stats()
    assert stats.cache_hits == 3 and stats.cache_size == 2 and len(h.server.requests) == 4


def test_a_cache_of_one_remembers_one_judgement() -> None:
    async def scenario(h: Harness) -> None:
        await judged(h, record(1))
        assert h.submit(same_content(2, 1)) == "cached"

    h = run(scenario, cfg=config(cache_size=1))
    assert h.judge.stats().cache_hits == 1 and len(h.server.requests) == 1


def test_reranked_documents_are_what_keys_the_cache() -> None:
    async def scenario(h: Harness) -> None:
        await judged(h, record(1, reranked=(DOCS[2], DOCS[0])))
        assert h.submit(same_content(2, 1, reranked=(DOCS[2], DOCS[0]))) == "cached"
        assert h.submit(same_content(3, 1, reranked=(DOCS[0],))) == "queued"  # same retrieved, other context
        await h.judge.join()

    h = run(scenario)
    assert len(h.server.requests) == 2


def test_without_documents_sent_their_content_does_not_split_the_cache() -> None:
    other = tuple(RetrievedDocument(d.id, content=f"other {d.content}") for d in DOCS)

    async def scenario(h: Harness) -> None:
        await judged(h, record(1))
        assert h.submit(same_content(2, 1, retrieved=other)) == "cached"  # the judge saw the same request

    h = run(scenario, cfg=config(send_documents=False))
    assert len(h.server.requests) == 1


def test_text_with_a_lone_surrogate_is_judged_and_cached() -> None:
    """Decoders replace lone surrogates, but a record built in code may still carry one."""
    async def scenario(h: Harness) -> None:
        await judged(h, record(1, answer="Paris \ud800 is the capital."))
        assert h.submit(record(2, query=record(1).query, answer="Paris \ud800 is the capital.")) == "cached"

    h = run(scenario)
    assert [j.outcome for _, j in h.results] == ["ok", "ok"] and len(h.server.requests) == 1


# -- pricing of the judge's own tokens --------------------------------------------------------


@pytest.mark.parametrize("named", ["proxy-deployment-7", "bigger-model", "cheaper-model"])
def test_a_reply_naming_another_model_is_priced_as_the_configured_model(named: str) -> None:
    """A proxy may answer with its own deployment name, priced or not: the reply's model name
    never chooses the price, ``judge.model``'s is always used (and the name is reported)."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    server = JudgeServer()
    server.script(raw(completion(verdict_for_all(), model=named, usage=usage)))
    pricer = Pricer({MODEL: Price(input=2.0, output=4.0), "bigger-model": Price(input=10.0, output=30.0),
                     "cheaper-model": Price(input=0.0, output=0.0)}, package_table=False)
    h = run(lambda h: judged(h, record(1)), server=server, pricer=pricer)
    assert [(j.outcome, j.model, j.cost_usd) for _, j in h.results] == [("ok", named, pytest.approx(0.004, rel=1e-12))]
    stats = h.judge.stats()
    assert stats.cost_usd == pytest.approx(0.004, rel=1e-12) and stats.unpriced_tokens == 0


def test_a_free_judge_model_costs_zero_and_is_not_unpriced() -> None:
    pricer = Pricer({MODEL: Price(input=0.0, output=0.0)}, package_table=False)
    h = run(lambda h: judged(h, record()), pricer=pricer)
    assert h.results[0][1].cost_usd == 0.0
    assert (h.judge.stats().cost_usd, h.judge.stats().unpriced_tokens) == (0.0, 0)


# -- configuration and backoff ----------------------------------------------------------------


def test_unknown_evaluators_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown evaluator\(s\) \['bogus'\]; known: \['faithfulness'"):
        Judge(config(evaluators=("faithfulness", "bogus")), _NoCalls(), Pricer(package_table=False),
              lambda: 0.0, lambda r, j: None)


class _RecordingRng(random.Random):
    """Records the bounds of every jitter draw and draws no wait at all."""

    def __init__(self) -> None:
        super().__init__(0)
        self.bounds: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.bounds.append((a, b))
        return a


class _Answering:
    async def complete(self, request: JudgeRequest) -> Completion:
        return Completion(verdict_for_all(), 10, 5, MODEL)

    async def aclose(self) -> None:
        pass


def test_backoff_is_full_jitter_from_the_given_rng_doubling_from_half_a_second_to_ten() -> None:
    rng = _RecordingRng()

    async def main() -> None:
        judge = Judge(config(max_retries=6), _Answering(), Pricer(package_table=False), lambda: 0.0,
                      lambda r, j: None, rng)
        await judge.start()
        assert judge.submit(record(), 0.0) == "queued"
        await asyncio.wait_for(judge.join(), 5)
        await judge.stop(1.0)

    asyncio.run(main())
    assert rng.bounds == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 8.0), (0.0, 10.0)]


# -- lifecycle ----------------------------------------------------------------------------------


def test_starting_twice_keeps_the_concurrency_cap() -> None:
    server = JudgeServer()
    server.script(*[delay(0.02) for _ in range(4)])

    async def scenario(h: Harness) -> None:
        await h.judge.start()  # already started by ``run``
        await judged(h, *(record(n) for n in range(4)))

    h = run(scenario, cfg=config(concurrency=1), server=server)
    assert server.max_concurrent == 1 and h.count("ok") == 4


def test_stop_returns_at_once_when_no_call_is_in_flight() -> None:
    async def scenario(h: Harness) -> None:
        await judged(h, record(1))
        await asyncio.wait_for(h.judge.stop(30.0), 2.0)

    h = run(scenario)
    assert h.count("ok") == 1


class _Hanging:
    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def complete(self, request: JudgeRequest) -> Completion:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def test_stop_has_counted_the_calls_it_cut_off_when_it_returns() -> None:
    async def main() -> None:
        client = _Hanging()
        judge = Judge(config(concurrency=1), client, Pricer(package_table=False), lambda: 0.0, lambda r, j: None)
        await judge.start()
        assert judge.submit(record(), 0.0) == "queued"
        await asyncio.wait_for(client.called.wait(), 5)
        await judge.stop(0.01)
        stats = judge.stats()
        assert stats.in_flight == 0 and {e: stats.counts.get((e, "dropped")) for e in ALL} == dict.fromkeys(ALL, 1)

    asyncio.run(main())
