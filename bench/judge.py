"""Benchmark the judge: judged traces per second against an endpoint with a fixed latency.

Usage::

    python bench/judge.py [--latency 0.2] [--concurrency 4,16,64] [--seconds 5] [--repeats 3]

``--seconds 2 --repeats 1 --concurrency 4,16`` is a quick smoke run.

What is measured
----------------
Endpoint. An OpenAI-compatible ``POST /v1/chat/completions`` server (aiohttp, 127.0.0.1,
its own process) that waits ``--latency`` seconds and answers a valid faithfulness verdict
(three claims, two supported) with usage 300/40 tokens. It stands for a model server whose
every call takes the same time, so the ideal throughput at concurrency ``c`` is
``c / latency`` calls per second.

Client. ragmon's own judge (``ragmon.judge.runner.Judge`` with ``JudgeClient``: the real
``openai`` async client, structured output, timeouts, retries, breaker, pricing and the
budget windows), sample rate 1, no per-minute cap or budget, a queue large enough to hold
the whole run, ``judge.concurrency = c``. Records are realistic RAG records (query, 5
documents of ~300 characters, a 3-sentence answer), each different so the cache never
answers. ``submit`` is called for ``ideal * seconds * 1.5`` records up front; the run lasts
until every one is judged; throughput = judged / elapsed.

Each concurrency level runs ``--repeats`` times; the table shows the median judged/s, the
ideal, their ratio (1.00 means the judge adds no overhead to the endpoint's latency) and the
median client CPU per call (process CPU time / calls). The script exits 1 if any call ended
in anything but ``ok``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragmon.config import JudgeConfig  # noqa: E402
from ragmon.judge.client import JudgeClient, JudgeEndpoint  # noqa: E402
from ragmon.judge.runner import Judge, Judgement  # noqa: E402
from ragmon.model import RagRecord, RetrievedDocument  # noqa: E402
from ragmon.scoring.pricing import Pricer  # noqa: E402

_VERDICT = json.dumps({"faithfulness": {"claims": [
    {"claim": "a", "supported": True}, {"claim": "b", "supported": False}, {"claim": "c", "supported": True},
]}})


def serve(conn: Connection, latency: float) -> None:
    """The endpoint process: answer every completion after ``latency`` seconds."""
    from aiohttp import web

    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(latency)
        return web.json_response({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": _VERDICT}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
        })

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", complete)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
        conn.send(runner.addresses[0][1])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # wait for "stop"
        await runner.cleanup()

    asyncio.run(main())


def _text(rng: random.Random, words: int) -> str:
    vocabulary = "refund policy order shipping customer account invoice warranty return window days support".split()
    return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."


def make_records(n: int, seed: int) -> list[RagRecord]:
    """``n`` distinct RAG records with content (so the judge's cache never answers)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        docs = tuple(RetrievedDocument(f"doc-{i}-{r}", None, _text(rng, 50)) for r in range(5))
        records.append(RagRecord(
            trace_id=rng.getrandbits(128).to_bytes(16, "big"), service="bench", variant="A", start_ns=0, end_ns=1,
            query=f"question {i}: " + _text(rng, 10), retrieved=docs, answer=" ".join(_text(rng, 12) for _ in range(3)),
            has_retrieval=True,
        ))
    return records


async def measure(port: int, concurrency: int, latency: float, seconds: float, seed: int) -> tuple[float, float, dict[str, int]]:
    """One run: (judged per second, client CPU seconds per call, outcome counts)."""
    n = max(concurrency, int(concurrency / latency * seconds * 1.5))
    config = JudgeConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="bench-judge", sample_rate=1.0, max_per_minute=10**9,
        max_usd_per_hour=float("inf"), concurrency=concurrency, max_queue=n, timeout=30.0,
        evaluators=("faithfulness",),
    )
    client = JudgeClient(JudgeEndpoint(config.base_url, "bench"), config.model, 30.0)
    done: list[Judgement] = []
    judge = Judge(config, client, Pricer({}), time.monotonic, lambda _r, j: done.append(j), random.Random(seed))
    records = make_records(n, seed)
    await judge.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for record in records:
        judge.submit(record, time.monotonic())
    await judge.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    counts = {outcome: n for (_, outcome), n in judge.stats().counts.items()}
    await judge.stop(5.0)
    return len(done) / elapsed, cpu / max(len(done), 1), counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", default="4,16,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=serve, args=(child, args.latency), daemon=True)
    server.start()
    port = parent.recv()
    failed = False
    print(f"endpoint latency {args.latency * 1000:.0f} ms; {args.repeats} run(s) of ~{args.seconds:g} s per level")
    print(f"{'concurrency':>11} {'judged/s':>10} {'ideal/s':>9} {'ratio':>7} {'CPU/call':>10}  outcomes")
    try:
        for level in levels:
            rates, cpus = [], []
            outcomes: dict[str, int] = {}
            for repeat in range(args.repeats):
                rate, cpu, counts = asyncio.run(measure(port, level, args.latency, args.seconds, args.seed + repeat))
                rates.append(rate)
                cpus.append(cpu)
                for outcome, n in counts.items():
                    outcomes[outcome] = outcomes.get(outcome, 0) + n
            ideal = level / args.latency
            rate = statistics.median(rates)
            failed |= set(outcomes) != {"ok"}
            print(f"{level:>11} {rate:>10.1f} {ideal:>9.1f} {rate / ideal:>6.2f}x {statistics.median(cpus) * 1000:>8.2f}ms  {outcomes}")
    finally:
        parent.send("stop")
        server.join(10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
