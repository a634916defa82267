"""The pipeline's bounded queue: refusals by span count and by bytes, and shutdown."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from ragmon.assembly import TraceAssembler
from ragmon.exporter import RagMetrics
from ragmon.model import Span
from ragmon.pipeline import Pipeline
from ragmon.pricing import Pricer
from ragmon.scoring import score_record


def _pipeline(max_spans: int, max_bytes: int) -> Pipeline:
    metrics = RagMetrics(CollectorRegistry(), ks=(1,), windows=(300.0,), max_label_values=10, clock=lambda: 0.0)
    pricer = Pricer()
    return Pipeline(
        assembler=TraceAssembler(grace=1.0, max_wait=10.0, max_pending=10, max_spans=100),
        extract=lambda trace: None,
        score=lambda record: score_record(record, (1,), pricer),
        metrics=metrics,
        clock=lambda: 0.0,
        max_queued_spans=max_spans,
        max_queued_bytes=max_bytes,
    )


def _span(n: int, size: int) -> Span:
    return replace(Span(bytes([1]) * 16, n.to_bytes(8, "big"), b"", "s", 0, 1), size=size)


def test_queue_refuses_past_its_span_count() -> None:
    pipeline = _pipeline(max_spans=3, max_bytes=1 << 20)
    assert pipeline.offer([_span(1, 10), _span(2, 10)])
    assert not pipeline.offer([_span(3, 10), _span(4, 10)])
    assert pipeline.refusal == "overloaded"
    assert pipeline.stats().queued_spans == 2


def test_queue_refuses_past_its_bytes_but_always_takes_one_batch() -> None:
    pipeline = _pipeline(max_spans=100, max_bytes=1000)
    assert pipeline.offer([_span(1, 5000)])  # an empty queue takes any batch the size limit let in
    assert not pipeline.offer([_span(2, 10)])
    assert pipeline.stats().queued_bytes == 5000


async def _shutdown(pipeline: Pipeline) -> None:
    await pipeline.shutdown()


def test_no_offers_after_shutdown() -> None:
    import asyncio

    pipeline = _pipeline(max_spans=10, max_bytes=1 << 20)
    asyncio.run(_shutdown(pipeline))
    assert not pipeline.offer([_span(1, 1)])
    assert pipeline.refusal == "shutting_down"


def test_judged_retrieval_matches_the_metric_core_and_scores_a_judged_miss_zero() -> None:
    from ragmon.metrics import retrieval
    from ragmon.scoring import score_judged_retrieval

    ranking = ["a", "b", "a", "c", "d"]
    score = score_judged_retrieval(ranking, ["c", "x"], [1, 3, 5])
    for k in (1, 3, 5):
        assert score.hit[k] == retrieval.hit_at_k(ranking, {"c"}, k)
        assert score.precision[k] == retrieval.precision_at_k(ranking, {"c"}, k)
    assert score.reciprocal_rank == retrieval.reciprocal_rank(ranking, {"c"}) == 1 / 3  # duplicates count once
    assert score.source == "judge" and score.recall == {} and score.ndcg == {}
    miss = score_judged_retrieval(ranking, [], [1, 3])
    assert miss.reciprocal_rank == 0.0 and miss.hit == {1: 0.0, 3: 0.0} and miss.precision == {1: 0.0, 3: 0.0}
