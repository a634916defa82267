"""Benchmark the OTLP protobuf decoders: compiled (``ragmon/otlp/_walker.pyx``) against
pure-Python, with a bare protobuf parse as the yardstick, in one process.

Usage::

    python bench/decode.py [--batches 20] [--spans-per-body 512] [--repeats 7] [--seconds 1]

Bodies are ``bench/ingest.py``'s realistic RAG traffic (the real SDK's encoding, 6-10 spans a
trace, 12-20 attributes on the RAG spans), decoded with ragmon's default selection. Each
measurement decodes the bodies round after round for ``--seconds`` and reads this thread's CPU
time from ``/proc/thread-self/schedstat`` (nanoseconds, not wall clock: steady on a shared
machine); the figure is CPU µs per span, the median over ``--repeats`` (the order of the
decoders turns each repeat). ``parse`` is ``ExportTraceServiceRequest.ParseFromString`` of
the official classes (upb, C) and nothing else: it builds no Python object per attribute.
``python`` is ``RAGMON_DECODER=python``'s decoder (upb parse of ragmon's lean classes, then the
attribute loop in Python); ``compiled`` is the default when the extension is built.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import build_traffic
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragmon.conventions import SELECTION
from ragmon.otlp.decode import python_decode_protobuf


def cpu_ns() -> int:
    """This thread's CPU time so far, in nanoseconds (``/proc/thread-self/schedstat``)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[0])


def per_span(decode: Callable[[bytes], Any], bodies: Sequence[bytes], spans: int, seconds: float) -> float:
    """CPU µs per span of ``decode`` over rounds of ``bodies`` for at least ``seconds``."""
    rounds = 0
    start = cpu_ns()
    while True:
        for body in bodies:
            decode(body)
        rounds += 1
        used = cpu_ns() - start
        if used >= seconds * 1e9:
            return used / 1e3 / (rounds * spans)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--spans-per-body", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    traffic = build_traffic(args.batches, args.spans_per_body, args.seed)
    bodies, spans = traffic.bodies, sum(traffic.spans)
    decoders: dict[str, Callable[[bytes], Any]] = {
        "parse": ExportTraceServiceRequest.FromString,
        "python": lambda body: python_decode_protobuf(body, SELECTION),
    }
    try:
        from ragmon.otlp._walker import decode_protobuf as compiled
    except ImportError:
        print("compiled decoder: not built (pip install . with a C compiler); Python only")
    else:
        decoders["compiled"] = lambda body: compiled(body, SELECTION)
        if any(compiled(body, SELECTION).spans != python_decode_protobuf(body, SELECTION).spans for body in bodies):
            raise SystemExit("the decoders disagree")
    print(f"{len(bodies)} bodies of {args.spans_per_body} spans ({traffic.mean_body_bytes / args.spans_per_body:.0f} bytes a span), "
          f"{args.repeats} repeats of {args.seconds:g} s each")
    results: dict[str, list[float]] = {name: [] for name in decoders}
    names = list(decoders)
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            results[name].append(per_span(decoders[name], bodies, spans, args.seconds))
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, value in medians.items():
        spread = f"{min(results[name]):.2f}-{max(results[name]):.2f}"
        print(f"{name:>9}: {value:6.2f} CPU-µs per span (range {spread}), {value / medians['parse']:.2f}x the bare parse")
    if "compiled" in medians:
        print(f"compiled / python: {medians['compiled'] / medians['python']:.2f} ({medians['python'] / medians['compiled']:.1f}x faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
