"""Profile ragmon's work after decode, per trace: assembly, extraction, scoring, metrics, the
lexical estimate, freeing.

Usage::

    python bench/profile_ingest.py [--shape realistic|rag3] [--batches 40] [--repeats 5] [--top 25] [--doc-chars 300] [--io-chars N]

bench/ingest.py's traffic (the same SDK-built bodies, either shape) is decoded once with
ragmon's decoder (not timed); the spans are then offered, a body at a time, to a ``Sidecar``
running in this process at its default configuration (no listener, a fake clock moved past the
2 s grace so every trace finishes), and the worker scores them. The process CPU time of that
phase over the traces scored is the post-decode cost per trace (median of ``--repeats`` runs,
each on a fresh sidecar); one more run under ``cProfile`` prints the functions that take it,
by own time and by cumulative time. Issue 14 asks for this cost to shrink by a third.

Then the stages: the decode of the same bodies timed on its own (CPU-µs per trace, median of
``--repeats``), and the post-decode work split by stage from the profiled run's cumulative
times, scaled to the unprofiled figure: assembly, the content drop, extraction (conventions),
scoring, the metrics, the judge stage (of which the lexical estimate). Issue 27 asks where a
3-span trace's 76 µs go.

The compiled pipeline (``ragmon/compiled.py``) is one opaque call to cProfile: run with
``RAGMON_PIPELINE=python`` for the functions inside it and the stage table (the figures are
then the Python build's).
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


STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "assembly": (("pipeline/assembly.py", "add"), ("pipeline/assembly.py", "expire")),
    "content drop": (("conventions/content.py", "drop"),),
    "extraction": (("conventions/_extract.py", "read"),),
    "scoring": (("scoring/records.py", "score"), ("scoring/records.py", "price")),
    "metrics": (("export/exporter.py", "observe"), ("export/exporter.py", "observe_calls")),
    "judge stage": (("judge/stage.py", "observe"),),
    "  of which lexical estimate": (("judge/lexical.py", "lexical_faithfulness"),),
}
"""Stage -> the (file, function) pairs whose cumulative time is the stage's."""


def stage_table(stats: pstats.Stats, total_profiled: float, per_trace: float, traces: int) -> list[str]:
    """The post-decode stages' shares of the profiled run, as CPU-µs per trace of the
    unprofiled run (an estimate: the profiler's overhead is spread evenly)."""
    cumulative: dict[str, float] = {}
    for (filename, _, function), (_, _, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        for stage, places in STAGES.items():
            if any(filename.endswith(f) and function == name for f, name in places):
                cumulative[stage] = cumulative.get(stage, 0.0) + cum
    lines = []
    for stage in STAGES:
        share = cumulative.get(stage, 0.0) / total_profiled if total_profiled else 0.0
        lines.append(f"  {stage:30} {share * per_trace:6.1f} CPU-µs a trace ({share:5.1%})")
    return lines


def decode_cost(traffic: ingest.Traffic, car: Sidecar, repeats: int) -> float:
    """CPU-µs per trace to decode the bodies, median of ``repeats``."""
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        decoded(traffic, car)
        runs.append(time.process_time() - started)
    return statistics.median(runs) / sum(traffic.traces) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=ingest.SHAPES, default="realistic")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--doc-chars", type=int, default=300, help="characters of each document's content (default 300)")
    parser.add_argument("--io-chars", type=int, default=None, help="characters of the model's input and output (default: bench/ingest.py's)")
    args = parser.parse_args(argv)
    traffic = ingest.build_traffic(args.batches, 512, 0, args.shape, doc_chars=args.doc_chars, io_chars=args.io_chars)
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
    car = Sidecar(Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen="")))
    print(f"decode ({DECODER}): {decode_cost(traffic, car, args.repeats):.1f} CPU-µs per trace (median of {args.repeats})")
    profile = cProfile.Profile()
    profile.enable()
    profiled = asyncio.run(score_all(runs[-1], traces))
    profile.disable()
    stats = pstats.Stats(profile)
    if pipeline() == "python":
        print(f"after decode, by stage (profiled run: {profiled / traces * 1e6:.0f} CPU-µs per trace, scaled to {per_trace:.0f}):")
        print("\n".join(stage_table(stats, profiled, per_trace, traces)))
    else:
        print("(by stage: run with RAGMON_PIPELINE=python; the compiled pipeline is opaque to the profiler)")
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
