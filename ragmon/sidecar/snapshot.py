"""What the status page shows, assembled from the stages' own state: the rows, the notes on
what cannot be measured, the rolling values with their history, the judge, the probes and the
worst requests. ``ragmon.export.status`` renders it; the board is read on ragmon's loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ragmon import __version__
from ragmon.config import Config
from ragmon.export import status
from ragmon.export.alerts import Thresholds, headline_k, holding
from ragmon.export.windows import window_label
from ragmon.export.exporter import RagMetrics
from ragmon.groundtruth.prober import Probes
from ragmon.judge.stage import JudgeStage
from ragmon.pipeline.assembly import TraceAssembler
from ragmon.pipeline.queue import Pipeline
from ragmon.receivers.ingest import IngestStats

__all__ = ["Ports", "StatusBoard", "missing_why"]


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

    def _readings(self) -> tuple[status.MeanReadings, status.LatencyReadings]:
        """Every window store's readings now (buffered values folded in first)."""
        self.metrics.flush()
        now = self.clock()
        return {gauge: store.read(now) for gauge, store in self.metrics.gauges.items()}, self.metrics.latency.read(now)

    def sample_history(self) -> bool:
        """One point of every rolling value's history, when one is due (the sidecar's timer
        calls this every ``History.interval`` seconds); whether it added one."""
        if not self.history.due(self.clock()):
            return False
        means, latency = self._readings()
        return self.history.sample(self.clock(), lambda: status.read_rolling(means, latency, self.k))

    @property
    def k(self) -> int:
        """The k of the per-k values shown (the demo's and the alerts' headline k)."""
        return headline_k(self.config.scoring.k)

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
        return status.render(self.snapshot(rows, notes, scored=stats.records > 0))

    def snapshot(self, rows: list[tuple[str, str]], notes: list[str], *, scored: bool = True) -> status.StatusSnapshot:
        """What the status page shows now (rolling values read from the exporter's windows;
        ``scored``: some request was scored, so each retrieval source without values says why)."""
        means, latency = self._readings()
        rolling = status.read_rolling(means, latency, self.k)
        windows = sorted(self.config.scoring.windows)
        short, long = window_label(windows[0]), window_label(windows[-1])
        shown = sorted(rolling)[: self.config.metrics.max_series]
        everywhere = {name for values in rolling.values() for name in values}
        sources = {name.rsplit(" ", 1)[1] for name in everywhere if name.startswith("MRR ")}
        if scored:
            notes = [*notes, *self._unmeasured_sources(sources, short)]
        notes = [*notes, *self.coverage.notes()]
        judge = self.judge.judge.stats() if self.judge.judge is not None else None
        outcomes: Counter[str] = Counter()
        for (_, outcome), n in (judge.counts.items() if judge else ()):
            outcomes[outcome] += n
        return status.StatusSnapshot(
            rows=rows,
            series=[
                status.SeriesView(s, v, rolling[s, v], self.history.of(s, v), {
                    name: f"{missing_why(name, self.config.judge.sample_rate)} over the last {short} (other variants have this value)"
                    for name in everywhere - rolling[s, v].keys()
                })
                for s, v in shown
            ],
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
            alerts=holding(means, latency, Thresholds(), self.k),
            windows=(short, long),
            k=self.k,
        )

    def _unmeasured_sources(self, shown: set[str], window: str) -> list[str]:
        """One line per relevance source with no retrieval value on the page, and why."""
        cfg = self.config
        why = {
            "label": "no request carried relevance labels (ragmon.relevant_document_ids or ragmon.relevance)",
            "golden": (f"no scored query matched the golden set ({cfg.scoring.golden})" if cfg.scoring.golden
                       else "no golden set (scoring.golden)"),
            "probe": ("no probe request scored yet" if self.probes.probers else "no probes ([[probes]])"),
            "feedback": "no feedback joined to a scored request (POST /v1/feedback)",
            "judge": ("no judged retrieval yet" if self.judge.judge is not None and "context_relevance" in cfg.judge.evaluators
                      else "needs the LLM judge with context_relevance among judge.evaluators"),
        }
        return [f"retrieval quality from {source}: not measured over the last {window}: {reason}."
                for source, reason in why.items() if source not in shown]


def missing_why(name: str, sample_rate: float) -> str:
    """Why one variant lacks a value others have (``status.value_name``'s names), with the
    judge's ``sample_rate``."""
    rate = f"the judge reads a {sample_rate:.0%} sample"
    source = name.rsplit(" ", 1)[-1]
    if name.startswith(("hit rate@", "recall@", "precision@", "NDCG@", "MRR ")):
        return {
            "label": "no request of this variant carried relevance labels",
            "golden": "no query of this variant matched the golden set",
            "probe": "no probe request reached this variant",
            "feedback": "no feedback was joined to a request of this variant",
            "judge": f"no retrieval of this variant was judged ({rate})",
        }.get(source, "no scored retrieval from this source")
    if name.startswith("latency "):
        stage = name.split(" ")[1]
        return "no request" if stage.startswith("p") else f"no request of this variant had a {stage} stage"
    if name.startswith("feedback "):
        return f"no '{source}' feedback for this variant"
    if name == "cost per request":
        return "no priced model call in this variant's requests"
    if name == "error ratio":
        return "no request"
    return f"no request of this variant was judged ({rate})"
