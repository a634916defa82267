"""Profile ragmon's work after decode, per trace: assembly, extraction, scoring, metrics, the
lexical estimate, freeing.

Usage::

    python bench/profile_ingest.py [--shape realistic|rag3] [--batches 40] [--repeats 5] [--top 25]

bench/ingest.py's traffic (the same SDK-built bodies, either shape) is decoded once with
ragmon's decoder (not timed); the spans are then offered, a body at a time, to a ``Sidecar``
running in this process at its default configuration (no listener, a fake clock moved past the
2 s grace so every trace finishes), and the worker scores them. The process CPU time of that
phase over the traces scored is the post-decode cost per trace (median of ``--repeats`` runs,
each on a fresh sidecar); one more run under ``cProfile`` prints the functions that take it,
by own time and by cumulative time. Issue 14 asks for this cost to shrink by a third.

The compiled pipeline (``ragmon/compiled.py``) is one opaque call to cProfile: run with
``RAGMON_PIPELINE=python`` for the functions inside it (the figure is then the Python one's).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ingest  # noqa: E402  (bench/ingest.py: the traffic)

from ragmon.sidecar.wiring import Sidecar  # noqa: E402
from ragmon.compiled import pipeline  # noqa: E402
from ragmon.config import Config, MetricsConfig, ReceiverConfig  # noqa: E402
from ragmon.model import Span  # noqa: E402
from ragmon.otlp.decode import DECODER, decode_protobuf  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def decoded(traffic: ingest.Traffic, car: Sidecar) -> list[list[Span]]:
    """Every body's spans, as the receiver hands them to the pipeline."""
    return [decode_protobuf(body, car.receiver_settings.selection).spans for body in traffic.bodies]


async def score_all(batches: list[list[Span]], traces: int) -> float:
    """CPU seconds a fresh sidecar spends to assemble and score ``batches`` (``traces`` traces)."""
    clock = _Clock()
    config = Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen=""))
    car = Sidecar(config, clock=clock)
    await car.start()
    try:
        started = time.process_time()
        for spans in batches:
            while car.pipeline.offer(spans).name != "ACCEPTED":
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        clock.now += config.traces.grace + 1.0
        while car.pipeline.stats().records < traces:
            await asyncio.sleep(0.001)
        return time.process_time() - started
    finally:
        await car.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=ingest.SHAPES, default="realistic")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    traffic = ingest.build_traffic(args.batches, 512, 0, args.shape)
    traces, spans = sum(traffic.traces), sum(traffic.spans)
    batches = decoded(traffic, Sidecar(Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen=""))))
    # each run needs trace ids it has not seen: the sidecar remembers finished ones
    runs = []
    for repeat in range(args.repeats + 1):
        fresh = [[dataclasses.replace(s, trace_id=bytes([repeat]) + s.trace_id[1:]) for s in b] for b in batches]
        runs.append(fresh)
    cpu = [asyncio.run(score_all(run, traces)) for run in runs[:-1]]
    per_trace = statistics.median(cpu) / traces * 1e6
    print(f"{args.shape}: {traces:,} traces, {spans:,} spans ({spans / traces:.1f} a trace), decoder {DECODER}, pipeline {pipeline()}; "
          f"after decode: {per_trace:.0f} CPU-µs per trace, {per_trace * traces / spans:.1f} per span "
          f"(median of {args.repeats}: {', '.join(f'{c / traces * 1e6:.0f}' for c in cpu)})")
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(score_all(runs[-1], traces))
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
