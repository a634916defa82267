"""``ragmon.judge.onward``: evaluation results posted as OTLP spans with
``gen_ai.evaluation.result`` events to a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragmon.conventions import SELECTION
from ragmon.otlp.decode import decode_protobuf
from ragmon.judge.onward import EVENT, EvaluationResult, EvaluationSender, evaluation_request

TRACE = bytes(range(1, 17))
ROOT = b"\x07" * 8


def _result(i: int) -> EvaluationResult:
    return EvaluationResult(
        trace_id=TRACE, parent_span_id=ROOT, span_id=(i + 1).to_bytes(8, "big"), time_ns=1_000 + i,
        scores={"faithfulness": 0.75, "answer_relevance": 1.0}, judge="llm",
    )


def test_request_is_a_child_span_with_one_event_per_score_that_ragmon_reads_back() -> None:
    request = evaluation_request([_result(0)])
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert (span.trace_id, span.parent_span_id, span.name) == (TRACE, ROOT, "gen_ai.evaluation")
    decoded = decode_protobuf(request.SerializeToString(), SELECTION).spans[0]
    assert decoded.service == "ragmon" and decoded.parent_span_id == ROOT
    assert [(e.name, e.attributes) for e in decoded.events] == [
        (EVENT, {"gen_ai.evaluation.name": "answer_relevance", "gen_ai.evaluation.score.value": 1.0}),
        (EVENT, {"gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": 0.75}),
    ]


async def _serve(statuses: list[int]) -> tuple[web.AppRunner, str, list[bytes]]:
    bodies: list[bytes] = []

    async def traces(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(status=statuses.pop(0) if statuses else 200)

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}", bodies


def test_sender_batches_retries_and_counts_drops() -> None:
    async def main() -> None:
        runner, url, bodies = await _serve([503])  # first post fails once, then succeeds
        sender = EvaluationSender(url, max_buffered=3, batch=2, interval=0.05, rng=random.Random(0))
        task = asyncio.create_task(sender.run())
        assert [sender.offer(_result(i)) for i in range(4)] == [True, True, True, False]
        for _ in range(200):
            if sender.stats().sent == 3:
                break
            await asyncio.sleep(0.02)
        await sender.close()
        await asyncio.wait_for(task, 5)
        await runner.cleanup()
        stats = sender.stats()
        assert (stats.sent, stats.dropped, stats.failed, stats.buffered) == (3, 1, 0, 0)
        spans = [s for b in bodies[1:] for s in ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans]
        assert sorted(s.span_id for s in spans) == [(i + 1).to_bytes(8, "big") for i in range(3)]
        assert len(bodies) == 3  # 503, then the retried batch of 2, then the last one

    asyncio.run(main())


def test_sender_counts_a_batch_that_keeps_failing_and_a_dead_endpoint() -> None:
    async def main() -> None:
        runner, url, _ = await _serve([400])
        sender = EvaluationSender(url, batch=1, interval=0.05, retries=1, rng=random.Random(0))
        task = asyncio.create_task(sender.run())
        sender.offer(_result(0))
        for _ in range(200):
            if sender.stats().failed:
                break
            await asyncio.sleep(0.02)
        await runner.cleanup()  # the endpoint goes away: the next batch fails after a retry
        sender.offer(_result(1))
        for _ in range(300):
            if sender.stats().failed == 2:
                break
            await asyncio.sleep(0.02)
        await sender.close()
        await asyncio.wait_for(task, 5)
        assert sender.stats().failed == 2 and sender.stats().sent == 0

    asyncio.run(main())


def test_the_logged_endpoint_carries_no_credentials_path_or_query() -> None:
    sender = EvaluationSender("https://user:s3cret@eval.example:8443/otlp?token=t0k", rng=random.Random(0))
    assert sender._where == "https://eval.example:8443"
    assert "s3cret" not in sender._where and "t0k" not in sender._where


def test_sender_as_a_context_manager_sends_on_enter_and_flushes_on_exit() -> None:
    """``async with``: the sending task runs inside; on exit what is buffered is sent (within
    ``stop_timeout``) and later results are dropped."""

    async def main() -> None:
        runner, url, bodies = await _serve([])
        async with EvaluationSender(url, batch=10, interval=60.0, rng=random.Random(0), stop_timeout=5.0) as sender:
            assert sender.offer(_result(0))
        assert not sender.offer(_result(1))
        await runner.cleanup()
        assert len(bodies) == 1
        assert (sender.stats().sent, sender.stats().dropped, sender.stats().buffered) == (1, 1, 0)

    asyncio.run(main())


def test_a_sender_cut_off_at_its_stop_timeout_drops_what_is_left_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        hang = asyncio.Event()

        async def traces(request: web.Request) -> web.Response:
            await hang.wait()
            return web.Response()

        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        sender = EvaluationSender(url, batch=1, interval=60.0, rng=random.Random(0), stop_timeout=0.2)
        async with sender:
            for i in range(3):
                sender.offer(_result(i))
        hang.set()
        await runner.cleanup()
        stats = sender.stats()
        assert stats.sent == 0 and stats.failed + stats.dropped == 3 and stats.buffered == 0

    with caplog.at_level(logging.WARNING, logger="ragmon"):
        asyncio.run(main())
    assert "evaluation sender did not finish in 0s" in caplog.text
