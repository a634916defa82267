"""Benchmark ``ragmon eval --judge``: records judged per second offline.

Usage::

    python bench/eval_judge.py [--latency 0.2] [--concurrency 16] [--seconds 10] [--repeats 3]

``--seconds 2 --repeats 1`` is a quick smoke run.

What is measured
----------------
Endpoint. The endpoint of ``bench/judge.py``: an OpenAI-compatible server (aiohttp,
127.0.0.1, its own process) that waits ``--latency`` seconds and answers a valid faithfulness
verdict, so the ideal rate at concurrency ``c`` is ``c / latency`` records per second.

Client. The offline path of ``ragmon eval --judge`` from a JSONL file: reading the records
(``ragmon.offline.files.read_records``), then ``ragmon.offline.judging.judge_records`` — the
sidecar's judge (real ``openai`` client, retries, breaker, pricing, USD budget) fed one record
per free worker, with the disk cache on (a fresh SQLite file each run, so every record is a
miss and is written to it) — then the report (``evaluate`` and the JSON rendering).
``[judge] evaluators = ["faithfulness"]``, ``concurrency = c``. Records are distinct RAG
records (query, 5 contexts of ~300 characters, a 3-sentence answer), ``c / latency * seconds``
of them. Rate = records / wall time of the whole path (read, judge, report).

The table shows the median rate over ``--repeats`` runs, the ideal, their ratio (goal >= 0.9)
and the median client CPU per record (process CPU time / records). The script exits 1 if any
record was not scored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge import serve  # noqa: E402

from ragmon.config import JudgeConfig  # noqa: E402
from ragmon.judge.client import JudgeClient, JudgeEndpoint  # noqa: E402
from ragmon.offline.cache import JudgeCache  # noqa: E402
from ragmon.offline.evaluate import evaluate  # noqa: E402
from ragmon.offline.files import read_records  # noqa: E402
from ragmon.offline.judging import judge_records  # noqa: E402
from ragmon.offline.report import eval_json  # noqa: E402
from ragmon.offline.scan import scan_run  # noqa: E402
from ragmon.scoring.pricing import Pricer  # noqa: E402


def _text(rng: random.Random, words: int) -> str:
    vocabulary = "refund policy order shipping customer account invoice warranty return window days support".split()
    return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."


def write_run(path: Path, n: int, seed: int) -> None:
    """``n`` distinct records with an answer and five contexts."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({
                "query_id": f"q{i}", "query": f"question {i}: " + _text(rng, 10),
                "retrieved_document_ids": [f"d{i}-{r}" for r in range(5)], "relevant_document_ids": [f"d{i}-0"],
                "answer": " ".join(_text(rng, 12) for _ in range(3)),
                "contexts": [_text(rng, 50) for _ in range(5)],
            }) + "\n")


async def measure(port: int, concurrency: int, latency: float, seconds: float, seed: int) -> tuple[float, float, int, int]:
    """One run: (records per second, client CPU seconds per record, records, records scored)."""
    n = max(concurrency, int(concurrency / latency * seconds))
    config = JudgeConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="bench-judge", concurrency=concurrency,
        max_usd_per_hour=float("inf"), timeout=30.0, evaluators=("faithfulness",),
    )
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run.jsonl"
        write_run(run, n, seed)
        cache = JudgeCache(str(Path(tmp) / "cache.sqlite3"))
        cpu0, t0 = time.process_time(), time.perf_counter()
        records = list(read_records(str(run)))
        client = JudgeClient(JudgeEndpoint(config.base_url, "bench"), config.model, config.timeout)
        generation = await judge_records(records, config, client, Pricer({}), cache=cache, rng=random.Random(seed))
        report = eval_json(evaluate([str(run)], scan_run(records, None, (1, 5)), (), generation))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        cache.close()
    return n / elapsed, cpu / n, n, int(report["judged"]["faithfulness"]["scored"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", default="16")
    parser.add_argument("--seconds", type=float, default=10.0)
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
    print(f"{'concurrency':>11} {'records':>8} {'records/s':>10} {'ideal/s':>9} {'ratio':>7} {'CPU/record':>11}")
    try:
        for level in levels:
            rates, cpus = [], []
            for repeat in range(args.repeats):
                rate, cpu, n, scored = asyncio.run(measure(port, level, args.latency, args.seconds, args.seed + repeat))
                rates.append(rate)
                cpus.append(cpu)
                failed |= scored != n
            ideal = level / args.latency
            rate = statistics.median(rates)
            print(f"{level:>11} {n:>8} {rate:>10.1f} {ideal:>9.1f} {rate / ideal:>6.2f}x {statistics.median(cpus) * 1000:>9.2f}ms")
    finally:
        parent.send("stop")
        server.join(10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
