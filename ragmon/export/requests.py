"""Requests: counts, errors, latency by stage, cost per request, requests without labels.

One ``_ServiceSeries`` per (service, variant), bound on its first request; past the budget,
one fold entry (``other``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragmon import catalogue as cat
from ragmon.config import TracesConfig
from ragmon.export.labels import OTHER
from ragmon.export.recording import LatencyKey, MeanKey, Recording, Stream
from ragmon.export.series import Cell
from ragmon.model import RagRecord
from ragmon.numbers import span_seconds
from ragmon.scoring.records import RecordScores

__all__ = ["RequestRecorder"]


@dataclass(slots=True)
class _ServiceSeries:
    """State of one (service, variant) bound once: no label lookups per request."""

    service: str
    variant: str
    folded: bool
    traces: Cell
    errors: Cell
    unlabelled: Cell
    error: Stream[MeanKey]
    total: Stream[LatencyKey]
    stages: dict[str, Stream[LatencyKey]] = field(default_factory=dict)
    cost: Stream[MeanKey] | None = None
    """Made on the first request with a cost (as its window series was)."""


class RequestRecorder:
    """``ragmon_traces_total``, ``ragmon_trace_errors_total``, ``ragmon_request_duration_seconds``,
    ``ragmon_retrieval_unlabelled_total`` and the error-ratio, latency and cost-per-request
    rolling gauges."""

    def __init__(self, recording: Recording, max_duration: float = TracesConfig().max_duration) -> None:
        self._rec = recording
        self.max_duration = max_duration
        """Seconds: a request lasting longer (or ending before it starts) records no latency."""
        self.invalid_durations: dict[str, int] = {}
        """Spans whose duration was out of range, by stage (``ragmon_durations_invalid_total``)."""
        self.traces = recording.counter(cat.TRACES)
        self.trace_errors = recording.counter(cat.TRACE_ERRORS)
        self.duration = recording.histogram(cat.REQUEST_DURATION)
        self.unlabelled = recording.counter(cat.RETRIEVAL_UNLABELLED)
        self.series: dict[tuple[str, str], _ServiceSeries] = {}
        self._folded: _ServiceSeries | None = None

    def observe(self, record: RagRecord, scores: RecordScores, service: str, variant: str, trace_id: str) -> None:
        """Count one request of (``service``, ``variant``), labels already limited."""
        rec = self._rec
        sv = self.series.get((service, variant)) or self._series(service, variant)
        sv.traces.inc()
        if record.error:
            sv.errors.inc()
        stream: Stream[Any] = sv.error
        if not stream.values:
            rec.means.append(stream)
        stream.values.append(1.0 if record.error else 0.0)
        total = span_seconds(record.start_ns, record.end_ns, self.max_duration)
        if total is None:
            self._invalid_duration("total")
        else:
            stream = sv.total
            if not stream.values:
                rec.latencies.append(stream)
            stream.values.append(total)
            stream.trace_ids.append(trace_id)
        for stage in record.invalid_durations:
            self._invalid_duration(stage)
        for stage, seconds in record.stage_seconds.items():
            stream = sv.stages.get(stage) or self._stage_stream(sv, stage)
            if not stream.values:
                rec.latencies.append(stream)
            stream.values.append(seconds)
            stream.trace_ids.append(trace_id)
        cost = scores.cost_usd
        if cost is not None:
            if sv.cost is None:
                sv.cost = rec.stream(cat.COST_USD_PER_REQUEST.name, sv.service, sv.variant, "", "", folded=sv.folded)
            stream = sv.cost
            if not stream.values:
                rec.means.append(stream)
            stream.values.append(cost)
        if scores.unlabelled:
            sv.unlabelled.inc()

    def _invalid_duration(self, stage: str) -> None:
        self.invalid_durations[stage] = self.invalid_durations.get(stage, 0) + 1

    def _series(self, service: str, variant: str) -> _ServiceSeries:
        """The bound state of one (service, variant), made on its first request; past the
        budget, the fold entry."""
        if len(self.series) < self._rec.max_series:
            series = self.series[(service, variant)] = self._new_series(service, variant, folded=False)
            return series
        if self._folded is None:
            self._folded = self._new_series(OTHER, OTHER, folded=True)
        return self._folded

    def _new_series(self, service: str, variant: str, *, folded: bool) -> _ServiceSeries:
        labels = (service, variant)
        traces, errors, unlabelled = (
            family.folded_cell(labels) if folded else family.cell(labels)  # errors, unlabelled exported at 0 until the first
            for family in (self.traces, self.trace_errors, self.unlabelled)
        )
        return _ServiceSeries(
            service, variant, folded, traces, errors, unlabelled,
            self._rec.stream(cat.ERROR_RATIO.name, service, variant, "", "", folded=folded),
            self._latency_stream(service, variant, "total", folded=folded),
        )

    def _latency_stream(self, service: str, variant: str, stage: str, *, folded: bool) -> Stream[LatencyKey]:
        labels = (service, variant, stage)
        series = self.duration.folded_series(labels) if folded else self.duration.series(labels)
        return Stream(labels, self._rec.latency, (self.duration, series), folded)

    def _stage_stream(self, sv: _ServiceSeries, stage: str) -> Stream[LatencyKey]:
        stream = sv.stages[stage] = self._latency_stream(sv.service, sv.variant, stage, folded=sv.folded)
        return stream
