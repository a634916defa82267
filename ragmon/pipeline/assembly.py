"""Trace assembly: group spans by trace id until each trace is finished (SPEC §4, §10).

Pure and synchronous: the caller passes ``now`` (seconds, any monotonic clock) and owns the
instance from one worker; nothing here reads a clock, sleeps or locks.

A trace's *local root* is a span with no parent or with a remote parent (OTLP flags 0x100 and
0x200 both set: ``Span.has_remote_parent``). A trace is finished

- ``complete``: a local root has arrived and no span arrived for ``grace`` seconds;
- ``max_wait``: ``max_wait`` seconds after its first span arrived, rooted or not;
- ``evicted``: early, when ``max_pending`` traces, ``max_spans`` spans or ``max_bytes`` are held:
  rooted traces waiting out their grace first (quiet the longest first: most likely complete),
  then the oldest;
- ``drained``: by ``drain()`` on shutdown.

Times are arrival times on the caller's clock; span timestamps (the app's clock) are never
compared with ``now``. When no local root arrived, the root is the span whose parent has not
arrived (the earliest-starting one if several). Spans arriving for a recently finished trace id
are *late*: counted and dropped, the trace is not re-opened (so a caller that calls the
service twice in one trace, more than ``grace`` apart, loses the second call to ``spans_late``).

Cost: O(1) amortized per span. Pending traces sit in two ordered dicts whose order is their
deadline order: by first arrival (max_wait, eviction) and, for rooted traces, by last arrival
(grace; a new span moves its trace to the end). ``expire`` pops due traces from their fronts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, NamedTuple

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ragmon.config import TracesConfig
from ragmon import catalogue as cat
from ragmon.model import Span, Trace

__all__ = [
    "DEFAULT_LATE_MEMORY",
    "DEFAULT_MAX_TRACE_SPANS",
    "AssemblyStats",
    "FinishReason",
    "StatSample",
    "TraceAssembler",
    "local_root",
]

DEFAULT_MAX_TRACE_SPANS = 10_000
"""Spans kept per trace (plus its first local root); the rest are dropped and counted."""
DEFAULT_LATE_MEMORY = 100_000
"""Finished trace ids remembered to recognise late spans."""


class FinishReason(StrEnum):
    """Why a trace was finished; the ``reason`` label of ``ragmon_traces_finished_total``."""

    COMPLETE = "complete"
    MAX_WAIT = "max_wait"
    EVICTED = "evicted"
    DRAINED = "drained"


class StatSample(NamedTuple):
    """One exported value: a counter when ``kind == "counter"`` (name ends in ``_total``)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: int
    kind: Literal["counter", "gauge"]


@dataclass(frozen=True, slots=True)
class AssemblyStats:
    """A snapshot of the assembler's counters (``*_total``: since start) and gauges.

    Every span given to ``add`` is counted once in ``spans_accepted``, ``spans_late``,
    ``spans_dropped_trace_full`` or ``spans_dropped_duplicate``; an accepted span is held
    until its trace is finished and returned.
    """

    traces_complete: int = 0
    traces_max_wait: int = 0
    traces_evicted: int = 0
    traces_drained: int = 0
    traces_pending: int = 0
    spans_held: int = 0
    bytes_held: int = 0
    spans_accepted: int = 0
    spans_late: int = 0
    spans_dropped_trace_full: int = 0
    spans_dropped_duplicate: int = 0

    @property
    def traces_finished(self) -> int:
        """Traces finished for any reason."""
        return self.traces_complete + self.traces_max_wait + self.traces_evicted + self.traces_drained

    @property
    def spans_dropped(self) -> int:
        """Spans dropped for any reason other than being late."""
        return self.spans_dropped_trace_full + self.spans_dropped_duplicate

    def collect(self) -> Iterator[Metric]:
        """The assembler's families, from ``samples``."""
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for s in self.samples():
            if s.name not in families:
                families[s.name] = cat.by_sample(s.name).empty()
            families[s.name].add_metric([v for _, v in s.labels], s.value)
        yield from families.values()

    def samples(self) -> tuple[StatSample, ...]:
        """The stats as Prometheus samples (``ragmon_traces_evicted_total`` repeats
        ``ragmon_traces_finished_total{reason="evicted"}`` for simple alert rules)."""
        finished = (
            (FinishReason.COMPLETE, self.traces_complete),
            (FinishReason.MAX_WAIT, self.traces_max_wait),
            (FinishReason.EVICTED, self.traces_evicted),
            (FinishReason.DRAINED, self.traces_drained),
        )
        return (
            *(
                StatSample(cat.TRACES_FINISHED.total, (("reason", r.value),), v, "counter")
                for r, v in finished
            ),
            StatSample(cat.TRACES_EVICTED.total, (), self.traces_evicted, "counter"),
            StatSample(cat.TRACES_PENDING.name, (), self.traces_pending, "gauge"),
            StatSample(cat.SPANS_PENDING.name, (), self.spans_held, "gauge"),
            StatSample(cat.SPAN_BYTES_PENDING.name, (), self.bytes_held, "gauge"),
            StatSample(cat.SPANS_ASSEMBLED.total, (), self.spans_accepted, "counter"),
            StatSample(cat.SPANS_LATE.total, (), self.spans_late, "counter"),
            StatSample(
                cat.SPANS_DROPPED.total, (("reason", "trace_full"),),
                self.spans_dropped_trace_full, "counter",
            ),
            StatSample(
                cat.SPANS_DROPPED.total, (("reason", "duplicate"),),
                self.spans_dropped_duplicate, "counter",
            ),
        )


def _is_local_root(span: Span) -> bool:
    return not span.parent_span_id or span.has_remote_parent


def local_root(spans: Iterable[Span]) -> Span | None:
    """The local root among ``spans`` (all of one trace), or ``None`` for an empty or cyclic set.

    A span with no parent or a remote parent; else a span whose parent is not among ``spans``.
    Among several candidates, the earliest-starting (then the first given) wins.
    """
    spans = list(spans)
    candidates = [s for s in spans if _is_local_root(s)]
    if not candidates:
        ids = {s.span_id for s in spans}
        candidates = [s for s in spans if s.parent_span_id not in ids]
    return min(candidates, key=lambda s: s.start_ns, default=None)


class _Pending:
    """A trace being assembled: its spans by span id, in arrival order."""

    __slots__ = ("trace_id", "spans", "first_seen", "last_seen", "root", "size")

    def __init__(self, trace_id: bytes, now: float) -> None:
        self.trace_id = trace_id
        self.spans: dict[bytes, Span] = {}
        self.first_seen = now
        self.last_seen = now
        self.root: Span | None = None
        """The earliest-starting local root so far (the first of equal ones): ``local_root``'s
        answer when one arrived, kept as spans are added."""
        self.size = 0


def _check_seconds(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} seconds, got {value!r}")
    return float(value)


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class TraceAssembler:
    """Groups spans into traces, bounded in time, trace count and span count.

    Traces finished inside ``add`` (evictions) wait in a ready queue and come out first from
    the next ``expire`` or ``drain``: call ``expire`` after each ``add`` so that queue stays
    small. Not thread-safe: one worker owns an instance.

    ``max_trace_spans`` caps one trace: further spans are dropped and counted, except the
    trace's first local root, which is always kept (so a huge trace still completes and has
    its root). ``late_memory`` is how many finished trace ids are remembered to recognise
    late spans (0: none; a late span then starts a new trace).
    """

    def __init__(  # any value: each is checked here (compiled, a typed parameter would be checked first)
        self,
        grace: float | object,
        max_wait: float | object,
        max_pending: int | object,
        max_spans: int | object,
        late_memory: int | object = DEFAULT_LATE_MEMORY,
        max_trace_spans: int | object = DEFAULT_MAX_TRACE_SPANS,
        max_bytes: int | object = TracesConfig().max_bytes,
    ) -> None:
        self._grace = _check_seconds("grace", grace, positive=False)
        self._max_wait = _check_seconds("max_wait", max_wait, positive=True)
        self._max_pending = _check_count("max_pending", max_pending, 1)
        self._max_spans = _check_count("max_spans", max_spans, 1)
        self._late_memory = _check_count("late_memory", late_memory, 0)
        self._max_trace_spans = _check_count("max_trace_spans", max_trace_spans, 1)
        self._max_bytes = _check_count("max_bytes", max_bytes, 1)
        self._held_bytes = 0
        self._now = -math.inf
        self._pending: OrderedDict[bytes, _Pending] = OrderedDict()  # by first arrival
        self._quiet: OrderedDict[bytes, _Pending] = OrderedDict()  # rooted, by last arrival
        self._ready: list[Trace] = []
        self._finished_ids: OrderedDict[bytes, None] = OrderedDict()
        self._finished = dict.fromkeys(FinishReason, 0)
        self._held = 0
        self._accepted = 0
        self._late = 0
        self._dropped_full = 0
        self._dropped_duplicate = 0

    @classmethod
    def from_config(cls, config: TracesConfig) -> TraceAssembler:
        """An assembler for the ``[traces]`` section."""
        return cls(
            grace=config.grace,
            max_wait=config.max_wait,
            max_pending=config.max_pending,
            max_spans=config.max_spans,
            max_bytes=config.max_bytes,
        )

    def add(self, spans: Iterable[Span], now: float) -> None:
        """Add spans that arrived at ``now``; may evict the oldest traces to stay in bounds."""
        now = self._advance(now)
        for span in spans:
            self._add_one(span, now)

    def expire(self, now: float) -> list[Trace]:
        """Return the traces finished by ``now``, in finishing order, and forget them."""
        now = self._advance(now)
        out, self._ready = self._ready, []
        while self._pending:
            oldest = next(iter(self._pending.values()))
            wait_due = oldest.first_seen + self._max_wait
            quiet = next(iter(self._quiet.values()), None)
            grace_due = quiet.last_seen + self._grace if quiet is not None else math.inf
            if quiet is not None and grace_due <= min(wait_due, now):
                out.append(self._finish(quiet, FinishReason.COMPLETE))
            elif wait_due <= now:
                out.append(self._finish(oldest, FinishReason.MAX_WAIT))
            else:
                break
        return out

    def drain(self) -> list[Trace]:
        """Finish and return every trace held (ready ones first, then oldest first)."""
        out, self._ready = self._ready, []
        while self._pending:
            out.append(self._finish(next(iter(self._pending.values())), FinishReason.DRAINED))
        return out

    def finish_rooted(self) -> int:
        """Finish every trace whose local root has arrived now, as ``complete``, without waiting
        out the grace (in-process mode's ``force_flush``); they come out of the next ``expire``.
        Returns how many."""
        finished = 0
        while self._quiet:
            self._ready.append(self._finish(next(iter(self._quiet.values())), FinishReason.COMPLETE))
            finished += 1
        return finished

    def stats(self) -> AssemblyStats:
        """A snapshot of the counters and gauges."""
        return AssemblyStats(
            traces_complete=self._finished[FinishReason.COMPLETE],
            traces_max_wait=self._finished[FinishReason.MAX_WAIT],
            traces_evicted=self._finished[FinishReason.EVICTED],
            traces_drained=self._finished[FinishReason.DRAINED],
            traces_pending=len(self._pending),
            spans_held=self._held,
            bytes_held=self._held_bytes,
            spans_accepted=self._accepted,
            spans_late=self._late,
            spans_dropped_trace_full=self._dropped_full,
            spans_dropped_duplicate=self._dropped_duplicate,
        )

    def _advance(self, now: float) -> float:
        """Time never goes backwards: an earlier ``now`` counts as the latest one seen."""
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite number of seconds, got {now!r}")
        self._now = max(self._now, now)
        return self._now

    def _add_one(self, span: Span, now: float) -> None:
        trace_id = span.trace_id
        state = self._pending.get(trace_id)
        if state is None:
            if trace_id in self._finished_ids:
                self._late += 1
                return
            if len(self._pending) >= self._max_pending:
                self._ready.append(self._finish(self._victim(), FinishReason.EVICTED))
            state = self._pending[trace_id] = _Pending(trace_id, now)
        if span.span_id in state.spans:
            self._dropped_duplicate += 1
            return
        is_root = _is_local_root(span)
        root = state.root
        if len(state.spans) >= self._max_trace_spans and not (is_root and root is None):
            self._dropped_full += 1
            return
        state.spans[span.span_id] = span
        state.last_seen = now
        if is_root and (root is None or span.start_ns < root.start_ns):
            state.root = root = span
        self._held += 1
        self._held_bytes += span.size
        state.size += span.size
        self._accepted += 1
        if root is not None:
            self._quiet[trace_id] = state
            self._quiet.move_to_end(trace_id)
        while self._held > self._max_spans or self._held_bytes > self._max_bytes:
            self._ready.append(self._finish(self._victim(), FinishReason.EVICTED))

    def _victim(self) -> _Pending:
        """The trace to finish early when a cap is reached: a rooted trace waiting out its grace
        (the one quiet the longest: most likely complete already), else the oldest trace."""
        for state in self._quiet.values():
            return state
        return next(iter(self._pending.values()))

    def _finish(self, state: _Pending, reason: FinishReason) -> Trace:
        del self._pending[state.trace_id]
        self._quiet.pop(state.trace_id, None)
        self._held -= len(state.spans)
        self._held_bytes -= state.size
        self._finished[reason] += 1
        if self._late_memory:
            self._finished_ids[state.trace_id] = None
            if len(self._finished_ids) > self._late_memory:
                self._finished_ids.popitem(last=False)
        spans = tuple(state.spans.values())
        return Trace(state.trace_id, spans, state.root if state.root is not None else local_root(spans))

