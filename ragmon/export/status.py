"""The status page ``/``: a typed snapshot rendered to one self-contained HTML page.

``render`` is pure: a ``StatusSnapshot`` in, HTML out, every shown string escaped, no external
asset (sparklines are inline ``<svg>`` polylines, each with its range), refreshing itself every
``REFRESH`` seconds. ``read_rolling`` names every rolling value of the exporter's window stores
(``value_name``) and ``show`` prints it in its unit. ``History`` keeps a bounded time series of
those values (one point per series per ``interval`` seconds, the last ``points`` points, at most
``max_series`` series), sampled on a timer by the sidecar, never on the ingest path and never
by a page view; ``Worst`` keeps the recent worst requests (missed retrievals, lowest
faithfulness) in a bounded heap; ``Coverage`` counts what could not be measured. All three are
fed on the event loop and read when the page is built.
"""

from __future__ import annotations

import heapq
import html
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ragmon import catalogue as cat
from ragmon.export.alerts import Holding
from ragmon.export.windows import WindowReading
from ragmon.model import RagRecord
from ragmon.scoring.records import RecordScores, RetrievalScore

__all__ = [
    "CONVENTION_NAMES",
    "CSP",
    "REFRESH",
    "Coverage",
    "History",
    "JudgeView",
    "SeriesView",
    "StatusSnapshot",
    "Worst",
    "WorstRequest",
    "read_rolling",
    "render",
    "show",
    "unit_of",
    "value_name",
]

REFRESH = 10
"""Seconds between the page's own reloads."""
HISTORY_INTERVAL = 10.0
"""Seconds between two points of the rolling values' history (sampled on a timer)."""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
"""The page's Content-Security-Policy: nothing loaded from anywhere, inline style only."""
MAX_TEXT = 200
"""Characters kept of a string a ``Worst`` entry holds (service, variant, what)."""

CONVENTION_NAMES = {"openinference": "OpenInference", "genai": "OpenTelemetry GenAI", "openllmetry": "OpenLLMetry"}
"""How the page names each convention."""

Rolling = dict[tuple[str, str], dict[str, float]]
"""(service, variant) -> shown value name -> value."""


@dataclass(frozen=True, slots=True)
class SeriesView:
    """One service and variant: its rolling values and their recent history."""

    service: str
    variant: str
    values: Mapping[str, float]
    history: Mapping[str, Sequence[float]] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    """Values other pairs show and this one does not, with why."""


@dataclass(frozen=True, slots=True)
class JudgeView:
    """The judge's mode, breaker state, spend and outcome counts."""

    mode: str
    breaker: str = ""
    spend_usd: float = 0.0
    budget_usd_per_hour: float = 0.0
    outcomes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, order=True)
class WorstRequest:
    """One bad request: ``badness`` orders them (higher is worse)."""

    badness: float
    trace_id: str
    service: str
    variant: str
    what: str


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """Everything the page shows, gathered on request."""

    rows: Sequence[tuple[str, str]]
    series: Sequence[SeriesView] = ()
    received: Mapping[str, int] = field(default_factory=dict)
    rejected: Mapping[tuple[str, str], int] = field(default_factory=dict)
    unmeasured: Sequence[str] = ()
    conventions: Mapping[str, int] = field(default_factory=dict)
    """Convention (``openinference``, ``genai``, ``openllmetry``) -> requests read by it."""
    judge: JudgeView = JudgeView("lexical")
    probes: Mapping[str, tuple[str, Mapping[str, int]]] = field(default_factory=dict)
    """Probe name -> (its last outcome, outcome counts)."""
    worst: Sequence[WorstRequest] = ()
    series_hidden: int = 0
    alerts: Sequence[Holding] = ()
    """The alerts whose conditions hold on ragmon's own windows (``export.alerts.holding``)."""
    windows: tuple[str, str] = ("", "")
    """The shortest and the longest rolling window, as labels (``5m``, ``1h``)."""
    k: int = 0
    """The k of the per-k retrieval values shown."""


# -- reading the rolling values ---------------------------------------------------------------

MeanReadings = Mapping[str, Sequence[WindowReading[tuple[str, str, str, str, str]]]]
"""Per rolling mean gauge, its store's readings (``WindowStore.read``)."""
LatencyReadings = Sequence[WindowReading[tuple[str, str, str]]]

_PER_K = {
    cat.RETRIEVAL_HIT_RATE.name: "hit rate",
    cat.RETRIEVAL_RECALL_MEAN.name: "recall",
    cat.RETRIEVAL_PRECISION_MEAN.name: "precision",
    cat.RETRIEVAL_NDCG_MEAN.name: "NDCG",
}
_SCORES = {family.name: name.replace("_", " ") for name, family in cat.SCORE_MEANS.items()}
_SHOWN_QUANTILES = {"total": (0.5, 0.95, 0.99)}
"""Latency quantiles shown per stage (other stages: p95)."""


def value_name(gauge: str, key: tuple[str, str, str, str, str], k: int) -> str | None:
    """The page's name of one mean series (None: a k the page does not show)."""
    _, _, _, source, detail = key
    if gauge in _PER_K:
        return f"{_PER_K[gauge]}@{k} {source}" if detail == str(k) else None
    if gauge == cat.RETRIEVAL_MRR.name:
        return f"MRR {source}"
    if gauge in _SCORES:
        return f"{_SCORES[gauge]} {detail}" + ("" if source == "judge" else f" ({source})")
    if gauge == cat.USER_FEEDBACK_MEAN.name:
        return f"feedback {detail}"
    if gauge == cat.COST_USD_PER_REQUEST.name:
        return "cost per request"
    if gauge == cat.ERROR_RATIO.name:
        return "error ratio"
    return None


def read_rolling(means: MeanReadings, latency: LatencyReadings, k: int) -> Rolling:
    """Every rolling value per (service, variant) over each store's shortest window: the per-k
    retrieval means at ``k``, MRR per source, every judged score per judge, user feedback per
    name, cost per request, error ratio, and latency quantiles per stage."""
    out: Rolling = {}
    for gauge, readings in means.items():
        live = [r for r in readings if r.mean is not None]
        shortest = min((r.window for r in live), default=0.0)
        for r in live:
            name = value_name(gauge, r.key, k) if r.window == shortest else None
            if name is not None and r.mean is not None:
                out.setdefault((r.key[1], r.key[2]), {})[name] = r.mean
    live_latency = [r for r in latency if r.samples]
    shortest = min((r.window for r in live_latency), default=0.0)
    for t in live_latency:
        if t.window == shortest:
            for q in _SHOWN_QUANTILES.get(t.key[2], (0.95,)):
                value = t.quantiles.get(q)
                if value is not None:
                    stage = "" if t.key[2] == "total" else f" {t.key[2]}"
                    out.setdefault((t.key[0], t.key[1]), {})[f"latency{stage} p{q * 100:g}"] = value
    return out


def unit_of(name: str) -> str:
    """``s`` for a latency, ``USD`` for a cost, "" for ratios and scores (in [0, 1])."""
    return "s" if name.startswith("latency") else "USD" if name.startswith("cost") else ""


def show(name: str, value: float) -> str:
    """``value`` in the unit of ``name``: USD to three significant digits (never an exponent),
    seconds as ms below one second, ratios and scores to three decimals."""
    if not math.isfinite(value):
        return str(value)
    unit = unit_of(name)
    if unit == "USD":
        digits = 2 if value == 0 else max(2, 3 - math.ceil(math.log10(abs(value))))
        return f"{value:.{digits}f} USD"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.3f}"


class History:
    """The recent rolling values: one point per series per ``interval`` seconds, the last
    ``points`` points of at most ``max_series`` series (a series is one value name of one
    service and variant); later series are not kept (``refused`` counts them)."""

    def __init__(self, *, interval: float = HISTORY_INTERVAL, points: int = 60, max_series: int = 1000) -> None:
        if not interval > 0 or points < 2 or max_series < 1:
            raise ValueError("a history needs interval > 0, points >= 2 and max_series >= 1")
        self.interval = interval
        self.points = points
        self.max_series = max_series
        self.refused = 0
        self._last = -math.inf
        self._series: dict[tuple[str, str, str], deque[float]] = {}

    def due(self, now: float) -> bool:
        """Whether a point is due at ``now``."""
        return now - self._last >= self.interval

    def sample(self, now: float, read: Callable[[], Rolling]) -> bool:
        """Add one point per series from ``read()`` when one is due; whether it did."""
        if not self.due(now):
            return False
        self._last = now
        for (service, variant), values in read().items():
            for name, value in values.items():
                key = (service, variant, name)
                kept = self._series.get(key)
                if kept is None:
                    if len(self._series) >= self.max_series:
                        self.refused += 1
                        continue
                    kept = self._series[key] = deque(maxlen=self.points)
                kept.append(value)
        return True

    def __len__(self) -> int:
        """Series kept."""
        return len(self._series)

    def kept_points(self) -> int:
        """Points held, across series (at most ``max_series * points``)."""
        return sum(len(d) for d in self._series.values())

    def of(self, service: str, variant: str) -> dict[str, list[float]]:
        """The history of one service and variant, by value name."""
        return {k[2]: list(d) for k, d in self._series.items() if k[0] == service and k[1] == variant}


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class Worst:
    """The ``size`` worst recent requests: missed retrievals (no relevant document in the top
    k) and the lowest faithfulness. A min-heap on (badness, arrival): a new entry pushes out the
    least bad one once full, and of equally bad ones the oldest."""

    def __init__(self, size: int = 20) -> None:
        if size < 1:
            raise ValueError("Worst needs size >= 1")
        self.size = size
        self._heap: list[tuple[float, int, WorstRequest]] = []
        self._arrivals = 0

    def add(self, entry: WorstRequest) -> None:
        """Keep ``entry`` if it is among the ``size`` worst (ties: the newer is kept)."""
        self._arrivals += 1
        key = (entry.badness, self._arrivals)
        if len(self._heap) >= self.size and key <= self._heap[0][:2]:
            return
        entry = WorstRequest(entry.badness, _cut(entry.trace_id), _cut(entry.service), _cut(entry.variant), _cut(entry.what))
        if len(self._heap) < self.size:
            heapq.heappush(self._heap, (*key, entry))
        else:
            heapq.heapreplace(self._heap, (*key, entry))

    def scored(self, record: RagRecord, scores: RecordScores) -> None:
        """A scored request: a missed retrieval (no hit at the largest k) is kept."""
        for score in scores.retrieval:
            if score.hit:
                k = max(score.hit)
                if score.hit[k] == 0:
                    what = f"missed retrieval: no relevant document in the top {k} ({score.source})"
                    self.add(WorstRequest(1.0, record.trace_id.hex(), record.service, record.variant, what))

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """A scored request (a ``RecordConsumer``): ``scored``."""
        self.scored(record, scores)

    def observe_judged(
        self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float],
        retrieval: RetrievalScore | None, now: float, toxic: Mapping[str, bool] | None = None,
    ) -> None:
        """A judgement (a ``JudgementSink``): ``judged``."""
        self.judged(record, source, judge, scores)

    def judged(self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float]) -> None:
        """A judged request: its faithfulness below 1 is kept (the lower, the worse)."""
        value = scores.get("faithfulness")
        if value is not None and math.isfinite(value) and value < 1:
            what = f"faithfulness {value:.2f} ({source}, {judge})"
            self.add(WorstRequest(1.0 - value, record.trace_id.hex(), record.service, record.variant, what))

    def entries(self) -> list[WorstRequest]:
        """The kept requests, worst first (of equally bad ones, the newest first)."""
        return [entry for *_, entry in sorted(self._heap, key=lambda item: item[:2], reverse=True)]


class Coverage:
    """Counts of requests for which something could not be measured, with why."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.conventions: Counter[str] = Counter()
        self.records = 0

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """A scored request (a ``RecordConsumer``): ``scored``."""
        self.scored(record, scores)

    def scored(self, record: RagRecord, scores: RecordScores) -> None:
        """Count the conventions ``record`` was read by and what it lacks."""
        self.records += 1
        for convention in record.conventions:  # (``Counter.update`` costs more per call)
            self.conventions[convention] += 1
        if "retrieval" in record.stage_seconds and not record.has_retrieval:
            self.counts[
                "no document ids on retriever spans: set scoring.document_id (where the ids are) "
                "or record the retrieved documents; retrieval quality not measured"
            ] += 1
        if any(c.price_source == "no_usage" for c in scores.calls):
            self.counts["model calls without token counts: cost and tokens not measured (streamed calls: include_usage)"] += 1

    def notes(self) -> list[str]:
        """One line per reason, with its count."""
        return [f"{n} of {self.records} requests: {why}" for why, n in sorted(self.counts.items())]


# -- rendering ----------------------------------------------------------------------------------

_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}"
    "h1{color:#1a4d8f}h2{border-bottom:2px solid #1a4d8f;color:#1a4d8f}"
    "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}"
    "th{background:#e4ecf7}.num{text-align:right;font-family:monospace}.bad{color:#b00020}"
    "svg{vertical-align:middle;background:#fff}code{background:#eee;padding:0 3px}"
)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def sparkline(points: Sequence[float], width: int = 120, height: int = 24) -> str:
    """An inline SVG polyline of ``points`` (empty when fewer than 2 finite points)."""
    ys = [p for p in points if math.isfinite(p)]
    if len(ys) < 2:
        return ""
    low, high = min(ys), max(ys)
    span = high - low or 1.0
    step = (width - 2) / (len(ys) - 1)
    coords = " ".join(f"{1 + i * step:.1f},{height - 1 - (y - low) / span * (height - 2):.1f}" for i, y in enumerate(ys))
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f'<polyline fill="none" stroke="#1a4d8f" stroke-width="1.5" points="{coords}"/></svg>'
    )


def _recent(name: str, points: Sequence[float]) -> str:
    """A sparkline of ``points`` and their range in the value's unit (empty under two points)."""
    ys = [p for p in points if math.isfinite(p)]
    line = sparkline(ys)
    if not line:
        return ""
    return f"{line} <span class='range'>{_e(show(name, min(ys)))} – {_e(show(name, max(ys)))}</span>"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A table of already-escaped cells (no header row when ``head`` is empty)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{f'<tr>{th}</tr>' if th else ''}{body}</table>"


def render(snapshot: StatusSnapshot) -> str:
    """The whole page for ``snapshot``."""
    short, long = snapshot.windows
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{REFRESH}'><title>ragmon status</title>",
        f"<style>{_STYLE}</style></head><body><h1>ragmon</h1>",
        _table([], ([f"<b>{_e(k)}</b>", _e(v)] for k, v in snapshot.rows)),
        "<h2>Rolling values</h2>",
    ]
    if snapshot.series:
        parts.append(
            f"<p>Over the last {_e(short)} (the shortest rolling window); hit rate, recall, precision and NDCG "
            f"at k={snapshot.k}. Recent: one point every {HISTORY_INTERVAL:g} s, with its range.</p>"
        )
        for view in snapshot.series:
            parts.append(f"<h3>{_e(view.service)} / {_e(view.variant)}</h3>")
            rows: list[list[str]] = [
                [_e(name), f"<span class='num'>{_e(show(name, value))}</span>", _recent(name, view.history.get(name, ()))]
                for name, value in sorted(view.values.items())
            ]
            rows += [[_e(name), "<span class='num'>—</span>", _e(why)] for name, why in sorted(view.missing.items())]
            parts.append(_table(["value", "now", "recent"], rows))
        if snapshot.series_hidden:
            parts.append(f"<p>{snapshot.series_hidden} more service/variant pairs not shown (series budget).</p>")
    else:
        parts.append("<p>No request scored yet.</p>")
    parts.append("<h2>Alerts that hold now</h2>")
    parts.append(
        f"<p>ragmon's own estimate: the generated rules' thresholds and minimum observations on its rolling "
        f"windows (the last {_e(short)} against the last {_e(long)}). Prometheus evaluates the rules themselves "
        "(the last 30m against a 1d baseline, summed across replicas).</p>"
    )
    parts.append(_table(
        ["alert", "severity", "service / variant", "why"],
        ([_e(a.alert), _e(a.severity), f"{_e(a.service)} / {_e(a.variant)}", f"<span class='bad'>{_e(a.why)}</span>"]
         for a in snapshot.alerts),
    ) if snapshot.alerts else "<p>None.</p>")
    parts.append("<h2>Receivers</h2>")
    protocols = sorted(set(snapshot.received) | {p for p, _ in snapshot.rejected})
    parts.append(_table(
        ["protocol", "spans received", "spans rejected (reason: count)"],
        ([_e(p), str(snapshot.received.get(p, 0)),
          _e(", ".join(f"{r}: {n}" for (q, r), n in sorted(snapshot.rejected.items()) if q == p) or "none")]
         for p in protocols),
    ) if protocols else "<p>No spans received yet.</p>")
    parts.append("<h2>Conventions detected</h2>")
    parts.append(_table(
        ["convention", "requests"],
        ([_e(CONVENTION_NAMES.get(name, name)), str(n)] for name, n in sorted(snapshot.conventions.items())),
    ) if snapshot.conventions else "<p>None yet.</p>")
    parts.append("<h2>Not measured</h2>")
    parts.append("".join(f"<p>{_e(n)}</p>" for n in snapshot.unmeasured) or "<p>Everything configured is measured.</p>")
    judge = snapshot.judge
    parts.append("<h2>Judge</h2>")
    judge_rows = [["mode", _e(judge.mode)], ["breaker", _e(judge.breaker or "n/a")],
            ["spent USD", f"{judge.spend_usd:.4f} (budget {judge.budget_usd_per_hour:g} USD/hour)"]]
    judge_rows += [[_e(f"outcome {k}"), str(n)] for k, n in sorted(judge.outcomes.items())]
    parts.append(_table([], judge_rows))
    parts.append("<h2>Probes</h2>")
    parts.append(_table(
        ["probe", "last outcome", "outcomes"],
        ([_e(name), _e(last or "not run yet"), _e(", ".join(f"{k}: {n}" for k, n in sorted(outcomes.items())))]
         for name, (last, outcomes) in sorted(snapshot.probes.items())),
    ) if snapshot.probes else "<p>No probes configured.</p>")
    parts.append("<h2>Worst recent requests</h2>")
    parts.append(_table(
        ["trace id", "service", "variant", "what"],
        ([f"<code>{_e(w.trace_id)}</code>", _e(w.service), _e(w.variant), f"<span class='bad'>{_e(w.what)}</span>"]
         for w in snapshot.worst),
    ) if snapshot.worst else "<p>None yet.</p>")
    parts.append("<p><a href='/metrics'>/metrics</a></p></body></html>\n")
    return "".join(parts)
