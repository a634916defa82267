"""Benchmark in-process mode: CPU per span of ``RagmonSpanProcessor`` against the SDK's own
``BatchSpanProcessor`` with a no-op exporter, in the same run.

Usage::

    python bench/inprocess.py [--traces 5000] [--repeats 5]

``--traces 500 --repeats 1`` is a quick smoke run.

What is measured
----------------
An application thread makes ``--traces`` RAG traces with the real OpenTelemetry SDK
(OpenInference attributes: a CHAIN root with query and answer, a RETRIEVER span with 5
document ids and relevance labels, an LLM span with model, provider and tokens, plus 6
attributes ragmon does not read on each span, as HTTP and framework instrumentation add them)
through a ``TracerProvider`` with one processor:

- ``none``: no processor (the SDK's own cost of making the spans, subtracted from the others);
- ``batch``: ``BatchSpanProcessor`` exporting to an exporter that does nothing;
- ``ragmon``: ``RagmonSpanProcessor`` (default configuration, registry mode: nothing served),
  which converts each span in ``on_end`` and, on its background thread, assembles, scores and
  counts every trace (``provider.shutdown()`` drains it: every trace is scored in the figure).

CPU is the whole process's (``time.process_time``: every thread), from the first span to the
end of ``provider.shutdown()``; processor start-up (the price table) is not counted. The
part of it spent converting spans in ``on_end`` (on the application's thread; the rest runs on
ragmon's) is timed alone on the same spans (``to_span``). Each
processor's figure is (its CPU - the ``none`` CPU of the same round) / spans, in µs; the
table shows medians over ``--repeats`` rounds and the ratio ragmon / batch. The script exits 1
if ragmon scored fewer traces than were made.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragmon.otlp.decode import kept_resource  # noqa: E402
from ragmon.receivers.inprocess import to_span  # noqa: E402
from ragmon.sidecar.inprocess import RagmonSpanProcessor  # noqa: E402

SPANS_PER_TRACE = 3
_NOISE = {
    "http.request.method": "POST", "http.route": "/ask", "server.address": "rag-api.internal",
    "code.function": "answer", "code.namespace": "app.handlers", "thread.name": "worker-3",
}
"""Attributes other instrumentation puts on spans; ragmon does not read them."""


class _Keep(SpanProcessor):
    """Keeps the ended spans (for timing the conversion alone)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def conversion_us(processor: RagmonSpanProcessor, traces: int) -> float:
    """CPU µs per span of ``on_end``'s conversion alone (``to_span``: on the application's thread)."""
    kept = _Keep()
    make_traces(kept, traces)
    selection = processor.sidecar.receiver_settings.selection
    resource = kept_resource(kept.spans[0].resource.attributes, selection)
    started = time.process_time()
    for span in kept.spans:
        to_span(span, selection, resource)
    return (time.process_time() - started) / len(kept.spans) * 1e6


class _NoExport(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def make_traces(processor: SpanProcessor | None, traces: int) -> float:
    """CPU seconds to make ``traces`` traces and shut the provider down (drained)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    if processor is not None:
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    started = time.process_time()
    for n in range(traces):
        with tracer.start_as_current_span("rag", attributes=_NOISE) as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", f"what is the refund window for order {n}?")
            root.set_attribute("output.value", "Orders can be refunded within 30 days of delivery.")
            with tracer.start_as_current_span("retrieve", attributes=_NOISE) as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i in range(5):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{(n + i) % 97}")
                span.set_attribute("ragmon.relevant_document_ids", [f"doc-{n % 97}"])
            with tracer.start_as_current_span("llm", attributes=_NOISE) as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "gpt-4o-mini")
                span.set_attribute("llm.provider", "openai")
                span.set_attribute("llm.token_count.prompt", 850)
                span.set_attribute("llm.token_count.completion", 60)
    provider.shutdown()
    return time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    spans = args.traces * SPANS_PER_TRACE
    results: dict[str, list[float]] = {"batch": [], "ragmon": [], "conversion": []}
    make_traces(None, 200)  # warm up the SDK's code paths
    for _ in range(args.repeats):
        bare = make_traces(None, args.traces)
        batch = make_traces(BatchSpanProcessor(_NoExport(), max_queue_size=spans), args.traces)
        processor = RagmonSpanProcessor(registry=CollectorRegistry(), environ={})
        results["conversion"].append(conversion_us(processor, args.traces))
        ragmon = make_traces(processor, args.traces)
        scored = processor.sidecar.pipeline.stats().records
        if scored != args.traces:
            print(f"ragmon scored {scored} of {args.traces} traces", file=sys.stderr)
            return 1
        results["batch"].append((batch - bare) / spans * 1e6)
        results["ragmon"].append((ragmon - bare) / spans * 1e6)
        print(f"round: SDK alone {bare / spans * 1e6:.1f} µs/span; batch +{results['batch'][-1]:.1f}; "
              f"ragmon +{results['ragmon'][-1]:.1f}", file=sys.stderr)
    median: Callable[[list[float]], float] = statistics.median
    b, r = median(results["batch"]), median(results["ragmon"])
    print(f"{spans} spans a round, {args.repeats} round(s), CPU µs per span beyond the SDK's own (median):")
    print(f"  BatchSpanProcessor (no-op exporter)  {b:8.1f}")
    print(f"  RagmonSpanProcessor (scored)          {r:8.1f}")
    print(f"    of which on_end's conversion         {median(results['conversion']):8.1f}  (the application's thread)")
    print(f"  ratio ragmon / batch                  {r / b:8.2f}x" if b > 0 else "  ratio: batch cost too small to measure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
