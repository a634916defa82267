"""Judging every record of an offline run with the sidecar's judge (``ragmon eval --judge``).

The records go through ``ragmon.judge.runner.Judge`` — the same prompts, client, concurrency
cap, retries with backoff, circuit breaker and USD budget as ``ragmon run`` — with no sampling
and no per-minute cap: every record is judged once for every applicable evaluator, in one call.
Records are handed over only as a worker frees up (at most ``concurrency`` outstanding), so the
budget is checked when a call is about to start. Before that, the disk cache
(``ragmon.offline.cache``) is asked; a parsed verdict is stored in it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import replace

from ragmon.config import JudgeConfig
from ragmon.groundtruth.jsonl import progress_bar
from ragmon.judge.prompts import Evaluator, applicable_evaluators, build_judge_request
from ragmon.judge.redact import Redactor
from ragmon.judge.runner import CompletionClient, Judge, Judgement, SubmitResult
from ragmon.model import RagRecord
from ragmon.offline.cache import CACHE_NONCE, JudgeCache, cache_key
from ragmon.offline.generation import GenerationReport, MetricResults, RecordOutcome, rag_record
from ragmon.offline.records import EvalRecord
from ragmon.scoring.pricing import Pricer

__all__ = ["judge_records"]

_REFUSED: dict[SubmitResult, str] = {
    SubmitResult.SKIPPED_BUDGET: "budget",
    SubmitResult.BREAKER_OPEN: "breaker_open",
    SubmitResult.DROPPED: "dropped",
    SubmitResult.SKIPPED_RATE: "dropped",  # pragma: no cover - offline records skip the sample
}


def _outcomes(
    applicable: tuple[Evaluator, ...], evaluators: tuple[Evaluator, ...], judged: tuple[str, ...],
    scores: dict[str, float | None] | None, failure: str | None,
) -> dict[str, RecordOutcome]:
    """Per configured evaluator: the score, the failure, or why it was skipped."""
    out: dict[str, RecordOutcome] = {}
    for e in evaluators:
        if e not in applicable or (failure is None and e not in judged):
            out[e] = RecordOutcome(skip="not_applicable")
        elif failure is not None:
            out[e] = RecordOutcome(failure=failure)
        else:
            value = (scores or {}).get(e)
            out[e] = RecordOutcome(skip="no_score") if value is None else RecordOutcome(score=value)
    return out


def _scores(judgement: Judgement) -> dict[str, float | None]:
    """The judgement's score per evaluator it covered (``None`` where its verdict gives none)."""
    return {e: getattr(judgement.scores, e, None) for e in judgement.evaluators}


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
    results: dict[int, dict[str, RecordOutcome]] = {}
    keys: dict[int, str] = {}
    applicable_of: dict[int, tuple[Evaluator, ...]] = {}
    slots = asyncio.Semaphore(config.concurrency)
    bar = progress_bar(len(records), "rec", "judging") if progress else None
    tally = {"judged": 0, "cached": 0, "input": 0, "output": 0}

    def finish(index: int, outcomes: dict[str, RecordOutcome]) -> None:
        results[index] = outcomes
        if bar is not None:
            bar.update(1)

    def on_result(record: RagRecord, judgement: Judgement) -> None:
        index = int.from_bytes(record.trace_id, "big")
        slots.release()
        tally["input"] += judgement.input_tokens
        tally["output"] += judgement.output_tokens
        if judgement.cached:
            tally["cached"] += 1
        if judgement.outcome != "ok" or judgement.scores is None:
            # a worker's outcome: error, timeout, invalid or dropped (admission happened at submit)
            finish(index, _outcomes(applicable_of[index], judge.evaluators, (), None, judgement.outcome))
            return
        scores = _scores(judgement)
        if cache is not None and index in keys and not judgement.cached:
            cache.put(keys[index], scores)
        finish(index, _outcomes(applicable_of[index], judge.evaluators, judgement.evaluators, scores, None))

    judge = Judge(config, client, pricer, time.monotonic, on_result, rng)
    redactor = Redactor.from_patterns(config.redact, config.send_documents)
    try:
        await judge.start()
        for index, record in enumerate(records):
            rag = rag_record(record, index)
            applicable = applicable_evaluators(rag, judge.evaluators)
            applicable_of[index] = applicable
            if not applicable:
                finish(index, _outcomes((), judge.evaluators, (), None, None))
                continue
            if cache is not None:
                request = build_judge_request(redactor.redact_record(rag), applicable, CACHE_NONCE)
                if request is not None:
                    key = cache_key(request, config.model)
                    hit = cache.get(key)
                    if hit is not None and set(hit) == set(request.evaluators):
                        tally["cached"] += 1
                        finish(index, _outcomes(applicable, judge.evaluators, request.evaluators, hit, None))
                        continue
                    keys[index] = key
            await slots.acquire()
            submitted = judge.submit(rag, time.monotonic(), probe=True)
            if submitted is SubmitResult.QUEUED:
                tally["judged"] += 1
            elif submitted is not SubmitResult.CACHED:
                slots.release()
                finish(index, _outcomes(applicable, judge.evaluators, (), None, _REFUSED.get(submitted, "error")))
        await judge.join()
    finally:
        await judge.stop(judge.stop_timeout)
        if bar is not None:
            bar.close()
    stats = judge.stats()
    metrics = tuple(
        MetricResults(e, tuple(results[i][e] for i in range(len(records)))) for e in judge.evaluators
    )
    return GenerationReport(
        "llm", metrics, config.model, tally["judged"], tally["cached"], stats.cost_usd,
        stats.unpriced_tokens, tally["input"], tally["output"],
    )
