"""The pipeline's bounded queue (refusals by span count and by bytes, shutdown) and its metrics
buffering (flushed before every yield; batched folding scrapes as per-request folding)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from ragmon.pipeline.assembly import TraceAssembler
from ragmon.export.exporter import MAX_BUFFERED, RagMetrics
from ragmon.model import LlmCall, ModelCalls, Offer, RagRecord, Span, Trace
from ragmon.pipeline.queue import _SLICE, Pipeline, PipelineStats
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import PricedCall, RecordScorer, RecordScores, RetrievalScore


def _pipeline_args(max_spans: int = 5, max_bytes: int = 1000) -> dict[str, Any]:
    metrics = RagMetrics(CollectorRegistry(), ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: 0.0)
    pricer = Pricer()
    return dict(
        assembler=TraceAssembler(grace=1.0, max_wait=10.0, max_pending=10, max_spans=100),
        reader=_Reads(lambda trace: None),
        scorer=RecordScorer((1,), pricer),
        metrics=metrics,
        clock=lambda: 0.0,
        max_queued_spans=max_spans,
        max_queued_bytes=max_bytes,
    )


def _pipeline(max_spans: int, max_bytes: int) -> Pipeline:
    return Pipeline(**_pipeline_args(max_spans, max_bytes))


def _span(n: int, size: int) -> Span:
    return replace(Span(bytes([1]) * 16, n.to_bytes(8, "big"), b"", "s", 0, 1), size=size)


def test_queue_refuses_past_its_span_count() -> None:
    pipeline = _pipeline(max_spans=3, max_bytes=1 << 20)
    assert pipeline.offer([_span(1, 10), _span(2, 10)]) is Offer.ACCEPTED
    assert pipeline.offer([_span(3, 10), _span(4, 10)]) is Offer.OVERLOADED
    assert pipeline.stats().queued_spans == 2


def test_queue_refuses_past_its_bytes_but_always_takes_one_batch() -> None:
    pipeline = _pipeline(max_spans=100, max_bytes=1000)
    assert pipeline.offer([_span(1, 5000)]) is Offer.ACCEPTED  # an empty queue takes any batch the size limit let in
    assert pipeline.offer([_span(2, 10)]) is Offer.OVERLOADED
    assert pipeline.stats().queued_bytes == 5000


async def _shutdown(pipeline: Pipeline) -> None:
    await pipeline.shutdown()


def test_no_offers_after_shutdown() -> None:
    pipeline = _pipeline(max_spans=10, max_bytes=1 << 20)
    asyncio.run(_shutdown(pipeline))
    assert pipeline.offer([_span(1, 1)]) is Offer.SHUTTING_DOWN


def test_judged_retrieval_matches_the_metric_core_and_scores_a_judged_miss_zero() -> None:
    from ragmon.metrics import retrieval
    from ragmon.scoring.records import score_judged_retrieval

    ranking = ["a", "b", "a", "c", "d"]
    score = score_judged_retrieval(ranking, ["c", "x"], [1, 3, 5])
    for k in (1, 3, 5):
        assert score.hit[k] == retrieval.hit_at_k(ranking, {"c"}, k)
        assert score.precision[k] == retrieval.precision_at_k(ranking, {"c"}, k)
    assert score.reciprocal_rank == retrieval.reciprocal_rank(ranking, {"c"}) == 1 / 3  # duplicates count once
    assert score.source == "judge" and score.recall == {} and score.ndcg == {}
    miss = score_judged_retrieval(ranking, [], [1, 3])
    assert miss.reciprocal_rank == 0.0 and miss.hit == {1: 0.0, 3: 0.0} and miss.precision == {1: 0.0, 3: 0.0}


# -- metrics: buffered per slice, flushed before every yield ------------------------------------

KS = (1, 3, 5, 10)


def _random_record(rng: random.Random) -> RagRecord:
    start = rng.randrange(10**9)
    stages = {s: rng.random() * rng.choice([0.01, 1.0, 100.0]) for s in rng.sample(["retrieval", "rerank", "generation", "embedding"], rng.randrange(4))}
    return RagRecord(
        trace_id=rng.randbytes(16), service=rng.choice(["a", "b", "c", ""]), variant=rng.choice(["v1", "v2", ""]),
        start_ns=start, end_ns=start + rng.randrange(10**10), error=rng.random() < 0.2, stage_seconds=stages,  # type: ignore[arg-type]
    )


def _random_scores(rng: random.Random) -> RecordScores:
    def at_k() -> dict[int, float]:
        return {k: rng.choice([0.0, 1.0, 1 / 3, 0.1, 0.7, rng.random()]) for k in KS}

    retrieval = tuple(
        RetrievalScore(source, rng.choice([0.0, 1.0, 0.5, 1 / 3, rng.random()]), {k: float(rng.random() < 0.5) for k in KS}, at_k(), at_k(), at_k())
        for source in rng.sample(["label", "golden"], rng.randrange(3))
    )
    calls = tuple(
        rng.choice([
            PricedCall(model, "generate", 0, 0, None, "no_usage"),
            PricedCall(model, "generate", rng.randrange(500), rng.randrange(50), None, "unpriced"),
            PricedCall(model, "generate", rng.randrange(5000), rng.randrange(900), rng.random() / 100, "table"),
        ])
        for model in rng.sample(["m1", "m2", "m3", ""], rng.randrange(3))
    )
    return RecordScores(retrieval, rng.random() < 0.1, calls)


def _masked_scrapes(metrics: RagMetrics, registry: CollectorRegistry) -> tuple[str, str]:
    def mask(text: bytes) -> str:
        out = re.sub(r"^(\S+_created(\{[^}]*\})?) \S+$", r"\1 <t>", text.decode(), flags=re.MULTILINE)
        return re.sub(r'(# \{trace_id="[^"]*"\} \S+) \S+$', r"\1 <t>", out, flags=re.MULTILINE)

    return mask(generate_latest(registry)), mask(generate_openmetrics(registry))


def _metrics(clock: list[float], max_label_values: int = 2) -> tuple[RagMetrics, CollectorRegistry]:
    registry = CollectorRegistry(auto_describe=True)
    metrics = RagMetrics(registry, ks=KS, windows=(300.0, 3600.0), max_label_values=max_label_values, clock=lambda: clock[0])
    return metrics, registry


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_metrics_scrape_as_flushing_every_request(seed: int) -> None:
    """Buffering a slice and folding it in bulk exports the same as folding each request."""
    rng = random.Random(seed)
    clock = [0.0]
    each, each_registry = _metrics(clock)
    batched, batched_registry = _metrics(clock)
    for now, n in [(0.0, 40), (0.0, 300), (2.0, 1), (10.0, 200), (400.0, 30), (4000.0, 3), (4001.0, 0)]:
        for _ in range(n):
            record, scores = _random_record(rng), _random_scores(rng)
            each.observe(record, scores, now)
            each.flush()
            batched.observe(record, scores, now)  # flushed when ``now`` changes, or by the scrape
        clock[0] = now + rng.choice([0.0, 1.0, 250.0])
        assert _masked_scrapes(batched, batched_registry) == _masked_scrapes(each, each_registry)


def test_a_scrape_folds_in_what_observe_accepted() -> None:
    clock = [5.0]
    metrics, registry = _metrics(clock)
    record = RagRecord(trace_id=bytes(range(16)), service="svc", variant="v", start_ns=0, end_ns=2 * 10**9)
    metrics.observe(record, RecordScores((), False, ()), 5.0)
    text = generate_latest(registry).decode()
    assert 'ragmon_request_duration_seconds_count{service="svc",stage="total",variant="v"} 1.0' in text
    assert 'ragmon_request_duration_seconds_bucket{le="2.5",service="svc",stage="total",variant="v"} 1.0' in text
    assert 'ragmon_error_ratio{service="svc",variant="v",window="5m"} 0.0' in text
    openmetrics = generate_openmetrics(registry).decode()
    assert f'le="2.5",service="svc",stage="total",variant="v"}} 1.0 # {{trace_id="{bytes(range(16)).hex()}"}} 2.0' in openmetrics
    assert generate_latest(registry).decode() == text  # folded once, not twice


class _LoggedMetrics(RagMetrics):
    def __init__(self, events: list[str]) -> None:
        self.registry = CollectorRegistry()
        super().__init__(self.registry, ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: 0.0)
        self.events = events
        self.pending: list[int] = []

    def observe(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        self.events.append("observe")
        super().observe(record, scores, now)
        latencies = self.recording.latencies  # one latency value a record: what waits for a flush
        self.pending.append(len(latencies[0].values) if latencies else 0)


@dataclass(frozen=True)
class _Reads:
    """An extraction stage from a function."""

    read: Callable[[Trace], RagRecord | ModelCalls | None]


@dataclass(frozen=True)
class _Scores:
    """A scoring stage from functions."""

    score: Callable[[RagRecord], RecordScores]
    price: Callable[[ModelCalls], Sequence[PricedCall]]


def test_metric_buffers_are_bounded_and_a_scrape_shows_every_value() -> None:
    """The worker yields every slice; the metrics flush every ``MAX_BUFFERED`` records by
    themselves, and the last values (same window buckets) wait for a scrape, which shows all."""
    events: list[str] = []
    metrics = _LoggedMetrics(events)
    pricer = Pricer()
    pipeline = Pipeline(
        assembler=TraceAssembler(grace=1.0, max_wait=10.0, max_pending=10, max_spans=100),
        reader=_Reads(lambda trace: RagRecord(trace.trace_id, "s", "v", 0, 1000)),
        scorer=RecordScorer((1,), pricer),
        metrics=metrics,
        clock=lambda: 0.0,
        max_queued_spans=10,
    )
    traces = [Trace(i.to_bytes(16, "big"), (), None) for i in range(2 * MAX_BUFFERED + 7)]

    async def run() -> None:
        done = False

        async def other_task() -> None:  # runs whenever the worker yields
            while not done:
                events.append("yield")
                await asyncio.sleep(0)

        task = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        events.clear()
        await pipeline._process(list(traces), 1.0)
        done = True
        await task

    asyncio.run(run())
    assert events.count("observe") == len(traces)
    assert events.count("yield") >= len(traces) // _SLICE
    # flushed by themselves as the 513th record comes, twice; the last 7 wait (same window buckets, no scrape yet)
    assert metrics.pending == [*range(1, MAX_BUFFERED + 1), *range(1, MAX_BUFFERED + 1), *range(1, 8)]
    assert metrics.registry.get_sample_value(
        "ragmon_window_samples", {"service": "s", "variant": "v", "source": "", "metric": "latency_total", "window": "5m"}
    ) == len(traces)
    assert not metrics.recording.means and not metrics.recording.latencies


# -- the queue's promises: exact bounds, bytes given back, a bad trace never stops the worker ---


def test_queue_takes_exactly_its_span_capacity() -> None:
    pipeline = _pipeline(max_spans=3, max_bytes=1 << 20)
    assert pipeline.offer([_span(1, 10), _span(2, 10), _span(3, 10)]) is Offer.ACCEPTED  # 3 of 3: full, still taken
    assert pipeline.offer([_span(4, 10)]) is Offer.OVERLOADED
    assert pipeline.stats().queued_spans == 3


def test_an_empty_queue_takes_a_batch_larger_than_its_span_capacity() -> None:
    pipeline = _pipeline(max_spans=2, max_bytes=1 << 20)
    assert pipeline.offer([_span(1, 10), _span(2, 10), _span(3, 10)]) is Offer.ACCEPTED  # else refused forever
    assert pipeline.offer([_span(4, 10)]) is Offer.OVERLOADED
    assert pipeline.stats().queued_spans == 3


def test_queue_takes_exactly_its_byte_capacity() -> None:
    pipeline = _pipeline(max_spans=100, max_bytes=1000)
    assert pipeline.offer([_span(1, 600)]) is Offer.ACCEPTED
    assert pipeline.offer([_span(2, 400)]) is Offer.ACCEPTED  # 1000 of 1000 bytes: taken
    assert pipeline.offer([_span(3, 1)]) is Offer.OVERLOADED
    assert pipeline.stats().queued_bytes == 1000


def _counting_pipeline(extract: object, max_spans: int = 10, max_bytes: int = 1000) -> tuple[Pipeline, RagMetrics]:
    metrics = RagMetrics(CollectorRegistry(), ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: 0.0)
    pricer = Pricer()
    pipeline = Pipeline(
        assembler=TraceAssembler(grace=0.0, max_wait=10.0, max_pending=100, max_spans=1000),
        reader=_Reads(extract),  # type: ignore[arg-type]
        scorer=RecordScorer((1,), pricer),
        metrics=metrics,
        clock=lambda: 0.0,
        max_queued_spans=max_spans,
        max_queued_bytes=max_bytes,
        tick=0.01,
    )
    return pipeline, metrics


def _root(trace: int, size: int) -> Span:
    return replace(Span(trace.to_bytes(16, "big"), bytes([1]) * 8, b"", "root", 0, 10**9), size=size)


async def _until(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.005)


def test_the_worker_gives_back_every_queued_span_and_byte() -> None:
    """Many times the queue's capacity passes through it: nothing stays counted after the worker
    took it (else ingest would answer 503 forever once the capacity had passed once)."""
    pipeline, _ = _counting_pipeline(lambda trace: None, max_spans=4, max_bytes=1000)

    async def run() -> list[Offer]:
        worker = asyncio.create_task(pipeline.run())
        answers = []
        for trace in range(1, 51):  # 50 batches of 3 spans and 900 bytes through a queue of 4 / 1000
            batch = [_root(trace, 300), replace(_root(trace, 300), span_id=bytes([2]) * 8), replace(_root(trace, 300), span_id=bytes([3]) * 8)]
            answers.append(pipeline.offer(batch))
            await _until(lambda: pipeline.stats().queued_spans == 0)
        assert pipeline.stats().queued_bytes == 0
        await pipeline.shutdown()
        await worker
        return answers

    assert asyncio.run(run()) == [Offer.ACCEPTED] * 50
    assert pipeline.stats().queued_bytes == 0 and pipeline.stats().queued_spans == 0


class _Boom(Exception):
    """Not a ValueError, TypeError or anything a narrowed ``except`` would name."""


def test_a_trace_that_fails_is_counted_and_the_worker_goes_on() -> None:
    bad = (7).to_bytes(16, "big")

    def extract(trace: Trace) -> RagRecord:
        if trace.trace_id == bad:
            raise _Boom("bug in extraction")
        return RagRecord(trace.trace_id, "svc", "v", 0, 10**9)

    pipeline, metrics = _counting_pipeline(extract)
    registry = CollectorRegistry()
    from ragmon.export.exporter import StatsCollector

    registry.register(StatsCollector(lambda: pipeline.stats().collect()))

    async def run() -> None:
        worker = asyncio.create_task(pipeline.run())
        for trace in (6, 7, 8):
            assert pipeline.offer([_root(trace, 10)]) is Offer.ACCEPTED
        await _until(lambda: pipeline.stats().records + sum(pipeline.stats().dropped.values()) == 3)
        assert not worker.done()
        assert pipeline.offer([_root(9, 10)]) is Offer.ACCEPTED  # still working after the bad trace
        await _until(lambda: pipeline.stats().records == 3)
        await pipeline.shutdown()
        await worker

    asyncio.run(run())
    assert pipeline.stats().dropped == {"trace_error": 1}
    assert registry.get_sample_value("ragmon_dropped_total", {"reason": "trace_error"}) == 1.0
    metrics.flush()
    assert metrics.requests.traces.cell(("svc", "v")).value == 3.0


def test_the_worker_yields_while_it_moves_a_full_queue_into_assembly() -> None:
    """A full queue (200,000 spans at the default) is moved in steps of at most ``_TAKE_SPANS``
    spans with a yield between them: liveness, scrapes and ingest keep their turns."""
    from ragmon.pipeline.queue import _TAKE_SPANS

    pipeline, _ = _counting_pipeline(lambda trace: None, max_spans=100_000, max_bytes=1 << 30)
    batch = 1000
    for trace in range(1, 21):
        spans = [replace(_root(trace, 10), span_id=(i + 1).to_bytes(8, "big"), parent_span_id=b"" if i == 0 else bytes([1]) * 8)
                 for i in range(batch)]
        assert pipeline.offer(spans) is Offer.ACCEPTED
    steps: list[int] = []

    async def run() -> None:
        worker = asyncio.create_task(pipeline.run())
        seen = 0
        async with asyncio.timeout(5.0):
            while pipeline.stats().queued_spans:
                await asyncio.sleep(0)
                accepted = pipeline._assembler.stats().spans_accepted
                steps.append(accepted - seen)
                seen = accepted
        await pipeline.shutdown()
        await worker

    asyncio.run(run())
    assert sum(steps) == 20 * batch
    assert max(steps) <= _TAKE_SPANS + batch and len([s for s in steps if s]) >= 20 * batch // (_TAKE_SPANS + batch)


# -- counters, steps and yields: exact -----------------------------------------------------------


class _Seen:
    """A ``RecordConsumer`` that records (trace id, now) of every scored record."""

    def __init__(self, seen: list[tuple[bytes, float]]) -> None:
        self.seen = seen

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        self.seen.append((record.trace_id, now))


def _recording_pipeline(
    extract: object, score: object, times: list[float], seen: list[tuple[bytes, float]], **kwargs: object
) -> Pipeline:
    """A pipeline on the clock ``times[0]`` whose consumer records (trace id, now) of every
    scored record."""
    params: dict[str, object] = dict(
        metrics=RagMetrics(CollectorRegistry(), ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: times[0]),
        max_queued_spans=10_000, clock=lambda: times[0],
        assembler=TraceAssembler(grace=1.0, max_wait=100.0, max_pending=100, max_spans=10_000),
    )
    params.update(kwargs)
    return Pipeline(
        reader=_Reads(extract),  # type: ignore[arg-type]
        scorer=_Scores(score, RecordScorer((1,), Pricer()).price),  # type: ignore[arg-type]
        consumers=[_Seen(seen)],
        **params,  # type: ignore[arg-type]
    )


def test_a_fresh_pipeline_counts_nothing() -> None:
    pipeline = _pipeline(max_spans=5, max_bytes=1000)
    assert pipeline.stats() == PipelineStats(
        queued_spans=0, max_queued_spans=5, queued_bytes=0, records=0, ignored=0, unlabelled=0, without_content=0, dropped={}
    )


def test_queue_counts_every_batch_up_to_its_span_capacity() -> None:
    pipeline = _pipeline(max_spans=3, max_bytes=1 << 20)
    assert pipeline.offer([_span(1, 10), _span(2, 10)]) is Offer.ACCEPTED
    assert pipeline.offer([_span(3, 10)]) is Offer.ACCEPTED  # 3 of 3 spans, over two batches: taken
    assert pipeline.stats().queued_spans == 3
    assert pipeline.offer([_span(4, 10)]) is Offer.OVERLOADED


def test_scoring_counts_ignored_unlabelled_contentless_and_failed_traces(caplog: pytest.LogCaptureFixture) -> None:
    """Every finished trace is counted once: ignored (not a RAG request), failed (logged with its
    id, the worker goes on) or scored; scored ones also as unlabelled and without content."""
    kinds = ["ignore", "ignore", "bare", "fail", "bare", "fail", "full"]
    traces = [Trace(i.to_bytes(16, "big"), (), None) for i in range(len(kinds))]

    def extract(trace: Trace) -> RagRecord | None:
        kind = kinds[int.from_bytes(trace.trace_id, "big")]
        if kind == "fail":
            raise _Boom("bug in extraction")
        if kind == "ignore":
            return None
        return RagRecord(trace.trace_id, "s", "v", 0, 10**9, content_recorded=kind == "full")

    def score(record: RagRecord) -> RecordScores:
        return RecordScores((), not record.content_recorded, ())  # "bare" records are unlabelled

    seen: list[tuple[bytes, float]] = []
    pipeline = _recording_pipeline(extract, score, [0.0], seen)
    with caplog.at_level("ERROR", logger="ragmon"):
        asyncio.run(pipeline._process(list(traces), 3.0))
    stats = pipeline.stats()
    assert (stats.records, stats.ignored, stats.unlabelled, stats.without_content, stats.dropped) == (3, 2, 2, 2, {"trace_error": 2})
    assert seen == [(traces[i].trace_id, 3.0) for i in (2, 4, 6)]
    assert [r.getMessage() for r in caplog.records] == [f"could not score trace {traces[i].trace_id.hex()}" for i in (3, 5)]
    assert all(r.exc_info is not None for r in caplog.records)


def test_scoring_yields_to_the_loop_once_per_slice_of_traces() -> None:
    """Receivers and scrapes get a turn every ``_SLICE`` traces: no sooner (throughput), no
    later (latency), and only for a turn (no sleeping)."""
    pipeline = _recording_pipeline(lambda trace: None, lambda record: None, [0.0], [])
    turns = 0

    async def run() -> None:
        nonlocal turns
        done = False

        async def other_task() -> None:  # runs once whenever the worker yields
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        turns = 0
        await pipeline._process([Trace(i.to_bytes(16, "big"), (), None) for i in range(2 * _SLICE - 1)], 0.0)
        done = True
        await task

    asyncio.run(run())
    assert turns == 1
    assert pipeline.stats().ignored == 2 * _SLICE - 1


def test_the_worker_moves_exactly_take_spans_per_step_then_yields() -> None:
    """A step moves whole batches until ``_TAKE_SPANS`` spans are moved, then yields one turn."""
    from ragmon.pipeline.queue import _TAKE_SPANS

    pipeline = _recording_pipeline(lambda trace: None, lambda record: None, [0.0], [])

    def batch(first: int, n: int) -> list[Span]:  # spans of one trace, no root: held, not finished
        return [Span(bytes(16), i.to_bytes(8, "big"), bytes([1]) * 8, "s", 0, 1) for i in range(first, first + n)]

    for first, n in [(10, _TAKE_SPANS - 1), (1, 1), (2, 1), (3, 1)]:
        assert pipeline.offer(batch(first, n)) is Offer.ACCEPTED

    async def run() -> list[int]:
        worker = asyncio.create_task(pipeline.run())
        steps, moved = [], 0
        for _ in range(3):
            await asyncio.sleep(0)  # the worker does one step
            accepted = pipeline._assembler.stats().spans_accepted
            steps.append(accepted - moved)
            moved = accepted
        await pipeline.shutdown()
        await worker
        return steps

    assert asyncio.run(run()) == [_TAKE_SPANS, 2, 0]


def test_an_idle_worker_waits_for_a_batch_and_wakes_as_one_arrives() -> None:
    """No spans, no work (it does not spin on the loop); an offered batch is taken at once, not
    at the next tick."""
    calls = [0]
    clock = [7.0]
    seen: list[tuple[bytes, float]] = []

    def counting_clock() -> float:
        calls[0] += 1
        return clock[0]

    pipeline = _recording_pipeline(
        lambda trace: RagRecord(trace.trace_id, "s", "v", 0, 1), lambda record: RecordScores((), False, ()), clock, seen,
        assembler=TraceAssembler(grace=0.0, max_wait=100.0, max_pending=100, max_spans=100), tick=30.0, clock=counting_clock,
    )

    async def run() -> None:
        worker = asyncio.create_task(pipeline.run())
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls[0] == 0
        assert pipeline.offer([_root(5, 10)]) is Offer.ACCEPTED
        async with asyncio.timeout(5.0):
            while not seen:
                await asyncio.sleep(0)
        await pipeline.shutdown()
        await worker

    asyncio.run(run())
    assert seen == [((5).to_bytes(16, "big"), 7.0)]


def test_shutdown_scores_every_batch_still_queued_at_the_clock_time() -> None:
    """Batches queued before the shutdown are taken, their traces drained and scored at the
    clock's time; then the worker returns."""
    seen: list[tuple[bytes, float]] = []
    pipeline = _recording_pipeline(
        lambda trace: RagRecord(trace.trace_id, "s", "v", 0, 1), lambda record: RecordScores((), False, ()), [42.0], seen
    )
    assert [pipeline.offer([_root(1, 10)]), pipeline.offer([_root(2, 10)])] == [Offer.ACCEPTED] * 2

    async def run() -> None:
        await pipeline.shutdown()
        async with asyncio.timeout(5.0):
            await pipeline.run()

    asyncio.run(run())
    assert seen == [((1).to_bytes(16, "big"), 42.0), ((2).to_bytes(16, "big"), 42.0)]
    assert pipeline._assembler.stats().traces_drained == 2
    assert pipeline.stats().queued_spans == 0


def test_an_idle_worker_finishes_a_quiet_trace_within_a_second() -> None:
    """With no spans arriving, a trace whose grace ran out still reaches the metrics promptly
    (the worker wakes on its own tick, well within a scrape interval)."""
    clock = [0.0]
    seen: list[tuple[bytes, float]] = []
    pipeline = _recording_pipeline(
        lambda trace: RagRecord(trace.trace_id, "s", "v", 0, 1), lambda record: RecordScores((), False, ()), clock, seen
    )  # the default tick, as the sidecar runs it

    async def run() -> None:
        worker = asyncio.create_task(pipeline.run())
        assert pipeline.offer([_root(3, 10)]) is Offer.ACCEPTED
        async with asyncio.timeout(5.0):
            while pipeline._assembler.stats().spans_accepted == 0:
                await asyncio.sleep(0)
        clock[0] = 2.0  # grace (1 s) over: due, but nothing wakes the worker but its tick
        async with asyncio.timeout(1.0):
            while not seen:
                await asyncio.sleep(0.005)
        await pipeline.shutdown()
        await worker

    asyncio.run(run())
    assert seen == [((3).to_bytes(16, "big"), 2.0)]


def test_as_a_context_manager_the_pipeline_runs_its_worker_and_drains_on_exit() -> None:
    """``async with``: the worker runs inside; on exit the pipeline refuses new spans and the
    traces it holds are scored before the exit returns."""
    seen: list[tuple[bytes, float]] = []
    pipeline = _recording_pipeline(
        lambda trace: RagRecord(trace.trace_id, "s", "v", 0, 1), lambda record: RecordScores((), False, ()), [7.0], seen
    )

    async def run() -> None:
        assert pipeline.worker is None
        async with pipeline:
            assert pipeline.worker is not None and not pipeline.worker.done()
            assert pipeline.offer([_root(1, 10)]) is Offer.ACCEPTED
        assert pipeline.worker.done() and pipeline.offer([_root(2, 10)]) is Offer.SHUTTING_DOWN

    asyncio.run(run())
    assert seen == [((1).to_bytes(16, "big"), 7.0)]


def test_on_exit_a_worker_past_its_stop_timeout_is_cancelled_and_the_loss_logged(caplog: pytest.LogCaptureFixture) -> None:
    """The drain is bounded: past ``stop_timeout`` the worker is cancelled (at its next yield,
    every ``_SLICE`` traces) and the traces not scored are logged."""

    def slow(trace: Trace) -> RagRecord | None:
        time.sleep(0.0002)
        return None

    pipeline, _ = _counting_pipeline(slow, max_spans=10_000, max_bytes=10**9)
    pipeline.stop_timeout = 0.05

    async def run() -> None:
        async with pipeline:
            for trace in range(1, 32 * _SLICE + 1):
                assert pipeline.offer([_root(trace, 10)]) is Offer.ACCEPTED
        assert pipeline.worker is not None and pipeline.worker.cancelled()

    with caplog.at_level(logging.ERROR, logger="ragmon"):
        asyncio.run(run())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert re.fullmatch(r"shutdown: the pipeline did not finish within 0\.05s; \d+ trace\(s\) not scored", errors[0])
    assert pipeline.stats().ignored < 32 * _SLICE


def test_a_trace_of_model_calls_alone_counts_its_priced_calls_and_is_not_a_request() -> None:
    """``ModelCalls`` from extraction: priced and handed to ``observe_calls`` (not ``observe``,
    not ``after``), counted as ignored and as a model-call trace; a request still is a record."""
    class Calls(RagMetrics):
        def __init__(self) -> None:
            super().__init__(CollectorRegistry(), ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: 0.0)
            self.seen: list[tuple[str, tuple[PricedCall, ...]]] = []

        def observe_calls(self, service: str, calls: Iterable[PricedCall]) -> None:
            self.seen.append((service, tuple(calls)))
            super().observe_calls(service, calls)

    calls = ModelCalls(b"\x01" * 16, "svc", 0, (LlmCall("m", None, 10, 2, cost_usd=0.5), LlmCall("e", None, 4, 0, "embedding")))

    def extract(trace: Trace) -> RagRecord | ModelCalls:
        return calls if trace.trace_id[0] else RagRecord(trace.trace_id, "svc", "v", 0, 1)

    seen: list[tuple[bytes, float]] = []
    metrics = Calls()
    pipeline = _recording_pipeline(extract, lambda record: RecordScores((), False, ()), [0.0], seen, metrics=metrics)
    traces = [Trace(bytes([i]) * 16, (), None) for i in (1, 0, 1)]
    asyncio.run(pipeline._process(list(traces), 2.0))
    priced = (PricedCall("m", "generation", 10, 2, 0.5, "span"), PricedCall("e", "embedding", 4, 0, None, "unpriced"))
    assert metrics.seen == [("svc", priced), ("svc", priced)]
    assert seen == [(bytes(16), 2.0)]  # only the request reaches the judge stage
    stats = pipeline.stats()
    assert (stats.records, stats.ignored, stats.model_call_traces) == (1, 2, 2)


def test_the_worker_task_is_named_and_stop_without_start_does_nothing() -> None:
    """The worker shows as ``ragmon-pipeline`` in task dumps; stopping a pipeline that never
    started (a start-up that failed early) is a no-op; ``stop_timeout`` defaults to 10 s."""
    pipeline = _pipeline(max_spans=5, max_bytes=1000)
    assert pipeline.stop_timeout == 10.0
    assert Pipeline(**{**_pipeline_args(), "stop_timeout": 2.5}).stop_timeout == 2.5

    async def run() -> None:
        await pipeline.stop(1.0)
        assert pipeline.worker is None
        started = _pipeline(max_spans=5, max_bytes=1000)
        async with started:
            assert started.worker is not None and started.worker.get_name() == "ragmon-pipeline"

    asyncio.run(run())


def test_each_trace_is_let_go_once_scored_not_after_the_whole_batch() -> None:
    """The worker frees a finished trace right after scoring it (its memory still in the CPU's
    caches), not in a pass over the batch at the end: when trace i is read, trace i - 1 (and its
    spans) are gone, and the scored batch is in order."""
    import weakref

    class Held:  # stands for a span: only a weak reference to it is kept here
        pass

    held: list[weakref.ref[Held]] = []
    alive_when_read: list[bool] = []

    def extract(trace: Trace) -> RagRecord:
        index = trace.trace_id[-1]
        if index:
            alive_when_read.append(held[index - 1]() is not None)
        return RagRecord(trace.trace_id, "s", "v", 0, 1)

    traces = []
    for i in range(5):
        marker = Held()
        held.append(weakref.ref(marker))
        traces.append(Trace(bytes(15) + bytes([i]), (marker,), None))  # type: ignore[arg-type]
    del marker
    seen: list[tuple[bytes, float]] = []
    pipeline = _recording_pipeline(extract, lambda record: RecordScores((), False, ()), [0.0], seen)
    asyncio.run(pipeline._process(traces, 1.0))
    assert alive_when_read == [False] * 4
    assert [trace_id[-1] for trace_id, _ in seen] == [0, 1, 2, 3, 4]
    assert traces == [] and all(ref() is None for ref in held)
