"""What the status page shows, assembled from the stages' own state: the rows, the notes on
what cannot be measured, the rolling values with their history, the judge, the probes and the
worst requests. ``ragmon.export.status`` renders it; the board is read on ragmon's loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from ragmon import __version__
from ragmon.config import Config
from ragmon.export import status
from ragmon.export.exporter import RagMetrics
from ragmon.groundtruth.prober import Probes
from ragmon.judge.stage import JudgeStage
from ragmon.pipeline.assembly import TraceAssembler
from ragmon.pipeline.queue import Pipeline
from ragmon.receivers.ingest import IngestStats

__all__ = ["Ports", "StatusBoard"]


@dataclass(slots=True)
class Ports:
    """The ports the sidecar bound (None: that listener is off)."""

    http: int | None = None
    grpc: int | None = None
    metrics: int | None = None


@dataclass
class StatusBoard:
    """The status page's source: the stages it reads, and the views (history, worst requests,
    coverage) that consume scored records and judgements beside the exporter."""

    config: Config
    clock: Callable[[], float]
    ports: Ports
    ingest: IngestStats
    assembler: TraceAssembler
    pipeline: Pipeline
    metrics: RagMetrics
    judge: JudgeStage
    probes: Probes
    history: status.History
    worst: status.Worst
    coverage: status.Coverage

    async def sample_history(self, families: Sequence[Metric]) -> None:
        """A scrape's point of the history, when one is due: read from the gauge families the
        scrape has just collected (in a worker thread: they are immutable), kept on the loop
        (the page reads the history there)."""
        now = self.clock()
        if self.history.due(now):
            rolling = await asyncio.to_thread(status.rolling_from_families, families)
            self.history.sample(now, lambda: rolling)

    def page(self) -> str:
        """A small HTML page: what ragmon listens on and what it has seen."""
        stats = self.pipeline.stats()
        assembly = self.assembler.stats()
        rows = [
            ("version", __version__),
            ("OTLP/HTTP", f"port {self.ports.http}" if self.ports.http else "off"),
            ("OTLP/gRPC", f"port {self.ports.grpc}" if self.ports.grpc else "off"),
            ("spans received", str(sum(self.ingest.spans_received.values()))),
            ("traces pending", str(assembly.traces_pending)),
            ("requests scored", str(stats.records)),
            ("traces ignored (not RAG requests)", str(stats.ignored)),
            ("of which model calls alone (tokens and cost counted)", str(stats.model_call_traces)),
            ("retrievals without relevance", str(stats.unlabelled)),
            ("judge", self.judge.mode),
            ("probes", ", ".join(p.name for p in self.probes.probers) or "none"),
        ]
        notes = []
        if stats.without_content:
            notes.append(
                f"{stats.without_content} of {stats.records} requests carried no query or answer text: "
                "their instrumentation records no message content (OpenTelemetry GenAI instrumentation's "
                "default), so only latency, tokens and cost can be measured for them."
            )
        notes.extend(self.judge.notes())
        if stats.records and stats.unlabelled == stats.records:
            notes.append("No request carried relevance labels: retrieval quality needs ragmon.relevant_document_ids, a golden set, probes or feedback.")
        return status.render(self.snapshot(rows, [*notes, *self.coverage.notes()]))

    def snapshot(self, rows: list[tuple[str, str]], notes: list[str]) -> status.StatusSnapshot:
        """What the status page shows now (rolling values read from the exporter's windows)."""
        self.metrics.flush()
        rolling = status.read_rolling(self.metrics.gauges, self.metrics.latency, self.clock())
        self.history.sample(self.clock(), lambda: rolling)
        shown = sorted(rolling)[: self.config.metrics.max_series]
        judge = self.judge.judge.stats() if self.judge.judge is not None else None
        outcomes: Counter[str] = Counter()
        for (_, outcome), n in (judge.counts.items() if judge else ()):
            outcomes[outcome] += n
        return status.StatusSnapshot(
            rows=rows,
            series=[status.SeriesView(s, v, rolling[s, v], self.history.of(s, v)) for s, v in shown],
            series_hidden=len(rolling) - len(shown),
            received=dict(self.ingest.spans_received),
            rejected=dict(self.ingest.spans_rejected),
            unmeasured=notes,
            conventions=dict(self.coverage.conventions),
            judge=status.JudgeView(
                self.judge.mode, judge.breaker.value if judge else "", judge.cost_usd if judge else 0.0,
                self.config.judge.max_usd_per_hour, dict(outcomes),
            ),
            probes={p.name: (p.last, dict(p.outcomes)) for p in self.probes.probers},
            worst=self.worst.entries(),
        )
