"""The alert thresholds, written once: the generated Prometheus rules (``ragmon.ops.rules``), the
demo's alert check and the status page's own estimate of which alerts hold all read ``Thresholds``.

``holding`` is that estimate: the quality alerts' conditions evaluated on ragmon's own rolling
windows (the shortest as the current window, the longest as the baseline) with the rules'
thresholds and minimum observations. It is one replica's view and not the rules' 1d baseline, so
the page marks it as ragmon's estimate; Prometheus evaluates the rules themselves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragmon import catalogue as cat
from ragmon.export.windows import WindowReading, window_label

__all__ = ["ALERTS", "RUNBOOK_URL", "Holding", "Thresholds", "headline_k", "holding", "parse_duration"]

RUNBOOK_URL = "https://github.com/ragmon/ragmon/blob/main/docs/runbook.md"

ALERTS: dict[str, tuple[str, str]] = {
    "RagHitRateDrop": ("critical", "15m"),
    "RagMrrDrop": ("warning", "15m"),
    "RagFaithfulnessDrop": ("critical", "15m"),
    "RagCoherenceDrop": ("warning", "15m"),
    "RagToxicAnswers": ("critical", "0s"),
    "RagLatencyP95High": ("critical", "10m"),
    "RagErrorRatioHigh": ("critical", "10m"),
    "RagCostBurnHigh": ("warning", "15m"),
    "RagmonJudgeFailing": ("warning", "15m"),
    "RagmonDroppingData": ("warning", "15m"),
    "RagmonDown": ("warning", "5m"),
    "RagmonTargetsMissing": ("warning", "5m"),
}
"""Every alert: (severity, ``for`` before scaling). The runbook anchor is the lower-cased name."""

_DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+")
_DURATION_PART = re.compile(r"(\d+)(ms|[smhdwy])")
_UNIT_SECONDS = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration such as ``30m`` or ``1h30m`` (``ValueError`` otherwise)."""
    if not _DURATION.fullmatch(text):
        raise ValueError(f"not a Prometheus duration: {text!r} (e.g. '30m', '1h30m')")
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Thresholds and guards (minimum observations) of the alerts; every field has a default.

    Drops are absolute (0.10 = ten points of a ratio in [0, 1]). A floor, when set, also fires
    when the current value is below it, whatever the baseline.
    """

    window: str = "30m"
    """Current window of the quality, latency, error and judge alerts."""
    baseline: str = "1d"
    """Baseline window of the drop alerts; it ends ``window`` ago."""
    hit_rate_drop: float = 0.10
    mrr_drop: float = 0.10
    faithfulness_drop: float = 0.10
    coherence_drop: float = 0.10
    hit_rate_floor: float | None = None
    mrr_floor: float | None = None
    faithfulness_floor: float | None = None
    coherence_floor: float | None = None
    min_queries: int = 100
    """Scored retrievals needed in the current window and in the baseline (hit rate, MRR)."""
    min_judged: int = 50
    """Faithfulness (or coherence) scores needed in the current window and in the baseline."""
    faithfulness_skip_judges: tuple[str, ...] = ("lexical",)
    """``judge`` label values left out of the faithfulness alert (the offline lexical estimate)."""
    latency_p95_seconds: float = 5.0
    min_requests: int = 100
    """Requests needed in the window (latency, error ratio)."""
    max_error_ratio: float = 0.05
    max_usd_per_hour: float = 10.0
    min_cost_requests: int = 5
    """Requests needed in the last hour before a cost burn alerts."""
    max_judge_failure_ratio: float = 0.20
    min_judge_requests: int = 20
    """Judge calls (ok, error, timeout, invalid) needed in the window."""
    min_lost_per_5m: int = 10
    """Items lost per 5 minutes, sustained for the alert's ``for``, before ragmon's data loss alerts."""
    job_regex: str = ".*ragmon.*"
    """``job`` label of ragmon's scrape targets."""
    runbook_url: str = RUNBOOK_URL
    """The runbook every alert links to (``#<alert name, lower-cased>`` is appended): point it
    at your own copy of ``docs/runbook.md``."""

    def __post_init__(self) -> None:
        for name in ("window", "baseline"):
            try:
                seconds = parse_duration(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
            if seconds <= 0:
                raise ValueError(f"{name}: must be positive")
        for name in (
            "hit_rate_drop", "mrr_drop", "faithfulness_drop", "coherence_drop", "max_error_ratio", "max_judge_failure_ratio",
        ):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name}: must be in (0, 1], got {value}")
        for name in ("hit_rate_floor", "mrr_floor", "faithfulness_floor", "coherence_floor"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name}: must be in (0, 1] or None, got {value}")
        for name in ("latency_p95_seconds", "max_usd_per_hour"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a positive number, got {value}")
        for name in ("min_queries", "min_judged", "min_requests", "min_cost_requests", "min_judge_requests", "min_lost_per_5m"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        if not self.job_regex:
            raise ValueError("job_regex: must not be empty")
        if not re.fullmatch(r"https?://\S+", self.runbook_url):
            raise ValueError(f"runbook_url: not an http(s) URL: {self.runbook_url!r}")
        for judge in self.faithfulness_skip_judges:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", judge):
                raise ValueError(f"faithfulness_skip_judges: not a judge label value: {judge!r}")




def headline_k(ks: Sequence[int]) -> int:
    """The k the status page and the demo show hit rate at: 5 when scored, else the largest."""
    return 5 if 5 in ks else max(ks)


@dataclass(frozen=True, slots=True)
class Holding:
    """An alert whose condition holds on ragmon's own windows now."""

    alert: str
    severity: str
    service: str
    variant: str
    why: str


_DROPS: tuple[tuple[str, str, str, str], ...] = (
    ("RagHitRateDrop", cat.RETRIEVAL_HIT_RATE.name, "hit_rate", "min_queries"),
    ("RagMrrDrop", cat.RETRIEVAL_MRR.name, "mrr", "min_queries"),
    ("RagFaithfulnessDrop", cat.SCORE_MEANS["faithfulness"].name, "faithfulness", "min_judged"),
    ("RagCoherenceDrop", cat.SCORE_MEANS["coherence"].name, "coherence", "min_judged"),
)
"""(alert, rolling gauge, threshold field prefix, minimum-observations field) of each drop alert."""


def holding(
    means: Mapping[str, Sequence[WindowReading[tuple[str, str, str, str, str]]]],
    latency: Sequence[WindowReading[tuple[str, str, str]]],
    thresholds: Thresholds,
    k: int,
) -> list[Holding]:
    """The alerts whose conditions hold on these readings (``WindowStore.read``): each drop alert
    per series, the shortest window against the longest, with the rules' drop, floor and
    minimum observations in both; latency p95, error ratio and cost burn on the shortest window
    (cost: the last hour's, from the window of one hour when there is one)."""
    t = thresholds
    out: list[Holding] = []
    for alert, gauge, field_, minimum in _DROPS:
        drop, floor, least = getattr(t, f"{field_}_drop"), getattr(t, f"{field_}_floor"), getattr(t, minimum)
        by_key: dict[tuple[str, str, str, str, str], dict[float, WindowReading[tuple[str, str, str, str, str]]]] = {}
        for r in means.get(gauge, ()):
            if r.mean is not None and (gauge != cat.RETRIEVAL_HIT_RATE.name or r.key[4] == str(k)):
                by_key.setdefault(r.key, {})[r.window] = r
        for key, windows in sorted(by_key.items()):
            _, service, variant, source, detail = key
            if field_ == "faithfulness" and detail in t.faithfulness_skip_judges:
                continue
            now, base = windows[min(windows)], windows[max(windows)]
            assert now.mean is not None and base.mean is not None
            if now.samples < least:
                continue
            what = f"{field_.replace('_', ' ')}{f'@{k}' if field_ == 'hit_rate' else ''} ({source}{f', {detail}' if detail and field_ != 'hit_rate' else ''})"
            if floor is not None and now.mean < floor:
                out.append(Holding(alert, ALERTS[alert][0], service, variant,
                                   f"{what} {now.mean:.2f} over the last {window_label(now.window)}, below its floor {floor:g}"))
            elif base is not now and base.samples >= least and now.mean < base.mean - drop:
                out.append(Holding(alert, ALERTS[alert][0], service, variant,
                                   f"{what} {now.mean:.2f} over the last {window_label(now.window)} against {base.mean:.2f} over "
                                   f"{window_label(base.window)}: a drop of {base.mean - now.mean:.2f} > {drop:g}"))
    shortest = min((r.window for r in latency), default=0.0)
    for q in latency:
        p95 = q.quantiles.get(0.95)
        if q.window == shortest and q.key[2] == "total" and p95 is not None and q.samples >= t.min_requests and p95 > t.latency_p95_seconds:
            out.append(Holding("RagLatencyP95High", ALERTS["RagLatencyP95High"][0], q.key[0], q.key[1],
                               f"request latency p95 {p95:.2f} s over the last {window_label(q.window)} > {t.latency_p95_seconds:g} s"))
    errors = [r for r in means.get(cat.ERROR_RATIO.name, ()) if r.mean is not None]
    shortest = min((r.window for r in errors), default=0.0)
    for r in errors:
        assert r.mean is not None
        if r.window == shortest and r.samples >= t.min_requests and r.mean > t.max_error_ratio:
            out.append(Holding("RagErrorRatioHigh", ALERTS["RagErrorRatioHigh"][0], r.key[1], r.key[2],
                               f"error ratio {r.mean:.1%} over the last {window_label(r.window)} > {t.max_error_ratio:.0%}"))
    costs = [r for r in means.get(cat.COST_USD_PER_REQUEST.name, ()) if r.mean is not None]
    hour = 3600.0 if any(r.window == 3600.0 for r in costs) else max((r.window for r in costs), default=0.0)
    for r in costs:
        assert r.mean is not None
        per_hour = r.mean * r.samples * 3600.0 / r.window if r.window else 0.0
        if r.window == hour and r.samples >= t.min_cost_requests and per_hour > t.max_usd_per_hour:
            out.append(Holding("RagCostBurnHigh", ALERTS["RagCostBurnHigh"][0], r.key[1], r.key[2],
                               f"model cost {per_hour:.2f} USD/hour over the last {window_label(r.window)} > {t.max_usd_per_hour:g}"))
    return out
