"""Judging every record of an offline run with the sidecar's judge (``ragmon eval --judge``).

The records go through ``ragmon.judge.runner.Judge`` — the same prompts, client, concurrency
cap, retries with backoff, circuit breaker and USD budget as ``ragmon run`` — with no sampling
and no per-minute cap: every record is judged once for every applicable evaluator, in one call.
Records are handed over only as a worker frees up (at most ``concurrency`` outstanding, the
next one from the callback of the one that finished); the budget is checked right before each
call against its estimated cost (a refusal is the failure ``budget``, not a record sent). Before that, the disk cache (``ragmon.offline.cache``) is asked; a parsed
verdict is stored in it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ragmon.config import JudgeConfig
from ragmon.formats.progress import progress_bar
from ragmon.judge.prompts import Evaluator, applicable_evaluators
from ragmon.judge.redact import Redactor
from ragmon.judge.runner import CompletionClient, Judge, Judgement, SubmitResult
from ragmon.model import RagRecord
from ragmon.offline.cache import JudgeCache, cache_key
from ragmon.offline.details import Details, verdict_details
from ragmon.offline.generation import GenerationReport, MetricResults, RecordOutcome, rag_record
from ragmon.offline.records import EvalRecord
from ragmon.scoring.pricing import Pricer

__all__ = ["judge_records"]

_REFUSED: dict[SubmitResult, tuple[str, str]] = {
    SubmitResult.SKIPPED_BUDGET: ("budget", "not sent: judge.max_usd_per_hour was spent"),
    SubmitResult.BREAKER_OPEN: ("breaker_open", "not sent: the circuit breaker is open after repeated failures"),
    SubmitResult.DROPPED: ("dropped", "not sent: the judge's queue was full"),
    SubmitResult.SKIPPED_RATE: ("dropped", "not sent"),  # pragma: no cover - offline records skip the sample
}
_FAILURE: dict[str, str] = {"skipped_budget": "budget"}
"""A worker's outcome as an offline failure (the budget refused the call right before it)."""


def _outcomes(
    applicable: tuple[Evaluator, ...], evaluators: tuple[Evaluator, ...], judged: tuple[str, ...],
    scores: dict[str, float | None] | None, failure: str | None, cause: str = "", details: Details | None = None,
) -> dict[str, RecordOutcome]:
    """Per configured evaluator: the score, the failure (and its cause), or why it was skipped."""
    out: dict[str, RecordOutcome] = {}
    for e in evaluators:
        if e not in applicable or (failure is None and e not in judged):
            out[e] = RecordOutcome(skip="not_applicable")
        elif failure is not None:
            out[e] = RecordOutcome(failure=failure, cause=cause)
        else:
            value = (scores or {}).get(e)
            detail = (details or {}).get(e)
            out[e] = RecordOutcome(skip="no_score", detail=detail) if value is None else RecordOutcome(score=value, detail=detail)
    return out


def _scores(judgement: Judgement) -> dict[str, float | None]:
    """The judgement's score per evaluator it covered (``None`` where its verdict gives none)."""
    return {e: getattr(judgement.scores, e, None) for e in judgement.evaluators}


class _Run:
    """The state of one offline judging run (one event loop thread: no locks)."""

    def __init__(self, records: Sequence[EvalRecord], config: JudgeConfig, cache: JudgeCache | None, bar: Any) -> None:
        self.records = records
        self.config = config
        self.cache = cache
        self.bar = bar
        self.judge: Judge | None = None
        self.redactor = Redactor.from_patterns(config.redact, config.send_documents)
        self.results: dict[int, dict[str, RecordOutcome]] = {}
        self.keys: dict[int, str] = {}
        self.applicable: dict[int, tuple[Evaluator, ...]] = {}
        self.next = 0
        self.outstanding = 0
        self.pumping = False
        self.done = asyncio.Event()
        self.judged = self.cached = self.answered = self.input_tokens = self.output_tokens = 0

    @property
    def evaluators(self) -> tuple[Evaluator, ...]:
        assert self.judge is not None
        return self.judge.evaluators

    def finish(self, index: int, outcomes: dict[str, RecordOutcome]) -> None:
        self.results[index] = outcomes
        if self.bar is not None:
            self.bar.update(1)
        if len(self.results) == len(self.records):
            self.done.set()

    def pump(self) -> None:
        """Hand records to the judge until ``concurrency`` are outstanding, answering what the
        disk cache knows on the way. Called at start and from every result, so a freed worker
        gets its next record at once (no hop through another task); re-entry (a cache hit of
        the judge's own, delivered inside ``submit``) returns and the outer loop goes on."""
        if self.pumping:
            return
        self.pumping = True
        try:
            while self.outstanding < self.config.concurrency and self.next < len(self.records):
                index = self.next
                self.next += 1
                self.offer(index)
        finally:
            self.pumping = False
        if len(self.results) == len(self.records):
            self.done.set()

    def offer(self, index: int) -> None:
        assert self.judge is not None
        rag = rag_record(self.records[index], index)
        redacted = self.redactor.redact_record(rag)
        # what the judge's request will ask: the evaluators the record has the content for,
        # also once redacted (a field redaction leaves empty is no field)
        judged = applicable_evaluators(redacted, applicable_evaluators(rag, self.evaluators))
        self.applicable[index] = judged
        if not judged:
            self.finish(index, _outcomes((), self.evaluators, (), None, None))
            return
        if self.cache is not None:
            key = cache_key(redacted, judged, self.config.model)
            hit = self.cache.get(key)
            if hit is not None and set(hit[0]) == set(judged):
                self.cached += 1
                self.finish(index, _outcomes(judged, self.evaluators, judged, hit[0], None, details=hit[1]))
                return
            self.keys[index] = key
        self.outstanding += 1
        submitted = self.judge.submit(rag, time.monotonic(), probe=True)
        if submitted is not SubmitResult.QUEUED and submitted is not SubmitResult.CACHED:  # refused: no call
            self.outstanding -= 1
            failure, cause = _REFUSED.get(submitted, ("error", "not sent"))
            self.finish(index, _outcomes(judged, self.evaluators, (), None, failure, cause))

    def on_result(self, record: RagRecord, judgement: Judgement) -> None:
        """The judge's callback: a worker finished a record, or its cache answered."""
        index = int.from_bytes(record.trace_id, "big")
        self.outstanding -= 1
        self.input_tokens += judgement.input_tokens
        self.output_tokens += judgement.output_tokens
        if judgement.cached:
            self.cached += 1
        if judgement.calls:
            self.judged += 1
            if judgement.outcome in ("ok", "invalid"):
                self.answered += 1
        if judgement.outcome != "ok" or judgement.scores is None:
            # a worker's outcome: error, timeout, invalid, dropped, or the budget right before the call
            failure = _FAILURE.get(judgement.outcome, judgement.outcome)
            cause = judgement.cause or ("cut off at the end of the run" if failure == "dropped" else "")
            self.finish(index, _outcomes(self.applicable[index], self.evaluators, (), None, failure, cause))
        else:
            scores = _scores(judgement)
            details = None if judgement.verdicts is None else verdict_details(
                judgement.verdicts, [d.id for d in record.retrieved]
            )
            if self.cache is not None and index in self.keys and not judgement.cached:
                self.cache.put(self.keys[index], scores, details)
            self.finish(index, _outcomes(
                self.applicable[index], self.evaluators, judgement.evaluators, scores, None, details=details
            ))
        self.pump()


async def judge_records(
    records: Sequence[EvalRecord],
    config: JudgeConfig,
    client: CompletionClient,
    pricer: Pricer,
    *,
    cache: JudgeCache | None = None,
    progress: bool = False,
    rng: random.Random | None = None,
) -> GenerationReport:
    """Judge every record; see the module docstring. Closes ``client``, not ``cache``."""
    config = replace(config, sample_rate=1.0, max_queue=max(config.concurrency, 1))
    bar = progress_bar(len(records), "rec", "judging") if progress else None
    run = _Run(records, config, cache, bar)
    judge = run.judge = Judge(config, client, pricer, time.monotonic, run.on_result, rng, verdicts=True)
    try:
        await judge.start()
        run.pump()
        if records:
            await run.done.wait()
        await judge.join()
    finally:
        await judge.stop(judge.stop_timeout)
        if bar is not None:
            bar.close()
    stats = judge.stats()
    metrics = tuple(
        MetricResults(e, tuple(run.results[i][e] for i in range(len(records)))) for e in judge.evaluators
    )
    return GenerationReport(
        "llm", metrics, config.model, run.judged, run.cached, run.answered, stats.cost_usd,
        stats.unpriced_tokens, run.input_tokens, run.output_tokens,
    )
