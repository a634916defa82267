"""What the demo shows: ragmon's rolling values per variant, read from its own registry, and
which of the generated alert rules would fire on them.

The alert check applies the thresholds of ``ragmon.ops.rules.Thresholds`` (the generated
rules' defaults) to the demo's shortened windows: the current value is the short window's,
the baseline the long window's value when the regression was injected (the rules compare
30 minutes against the day before). Rendered as a ``rich`` table on a terminal, as one plain
line per variant otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from prometheus_client.registry import Collector
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ragmon.ops.rules import ALERTS, Thresholds

__all__ = ["MIN_SAMPLES", "Row", "Values", "alerts", "plain", "read_values", "render", "service_samples"]

MIN_SAMPLES = 20
"""Scored retrievals (or judged answers) a window needs before the demo's alert check speaks
(the rules' guard, ``min_queries``, is 100 in 30 minutes)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One variant's rolling values over one window (None: nothing observed)."""

    requests: float = 0.0
    hit_rate: float | None = None
    mrr: float | None = None
    retrievals: float = 0.0
    faithfulness: float | None = None
    judged: float = 0.0
    judge: str = ""
    p50: float | None = None
    p95: float | None = None
    cost: float | None = None
    thumbs: float | None = None


Values = Mapping[str, Row]
"""Rows by variant."""


def service_samples(registry: Collector, service: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``service`` in ``registry`` (collected once), by (name, labels)."""
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.labels.get("service") == service:
                found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def read_values(registry: Collector, service: str, window: str, k: int, source: str = "golden") -> dict[str, dict[str, Row]]:
    """``{window: {variant: Row}}`` for ``service`` from ``registry`` (collected once), for
    ``window`` and every other window present; hit rate at ``k`` against ``source`` labels."""
    samples = service_samples(registry, service)
    requests: dict[str, float] = {}
    fields: dict[tuple[str, str], dict[str, object]] = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        variant, win = lab.get("variant", ""), lab.get("window")
        if name == "ragmon_traces_total":
            requests[variant] = value
            continue
        if win is None:
            continue
        row = fields.setdefault((win, variant), {})
        if name == "ragmon_retrieval_hit_rate" and lab.get("source") == source and lab.get("k") == str(k):
            row["hit_rate"] = value
        elif name == "ragmon_retrieval_mrr" and lab.get("source") == source:
            row["mrr"] = value
        elif name == "ragmon_faithfulness_mean" and lab.get("source") == "judge":
            row["faithfulness"], row["judge"] = value, lab.get("judge", "")
        elif name == "ragmon_latency_seconds" and lab.get("stage") == "total":
            if lab.get("quantile") == "0.5":
                row["p50"] = value
            elif lab.get("quantile") == "0.95":
                row["p95"] = value
        elif name == "ragmon_cost_usd_per_request":
            row["cost"] = value
        elif name == "ragmon_user_feedback_mean" and lab.get("name") == "thumbs":
            row["thumbs"] = value
        elif name == "ragmon_window_samples":
            if lab.get("metric") == "retrieval_mrr" and lab.get("source") == source:
                row["retrievals"] = value
            elif lab.get("metric") == "faithfulness_mean" and lab.get("source") == "judge":
                row["judged"] = value
    rows: dict[str, dict[str, Row]] = {window: {}}
    for (win, variant), values in fields.items():
        rows.setdefault(win, {})[variant] = Row(requests=requests.get(variant, 0.0), **values)  # type: ignore[arg-type]
    for variant, count in requests.items():
        rows[window].setdefault(variant, Row(requests=count))
    return rows


def alerts(now: Values, baseline: Values | None, thresholds: Thresholds = Thresholds(), k: int = 5) -> list[str]:
    """The drop alerts that would fire: each ``now`` row against the same variant's
    ``baseline`` (taken when the regression was injected), with the rules' drop thresholds."""
    if not baseline:
        return []
    fired = []
    checks: Sequence[tuple[str, str, float, str]] = (
        ("RagHitRateDrop", "hit_rate", thresholds.hit_rate_drop, f"hit rate@{k}"),
        ("RagMrrDrop", "mrr", thresholds.mrr_drop, "MRR"),
        ("RagFaithfulnessDrop", "faithfulness", thresholds.faithfulness_drop, "faithfulness"),
    )
    for variant, row in sorted(now.items()):
        before = baseline.get(variant)
        if before is None:
            continue
        for alert, attr, drop, what in checks:
            if attr == "faithfulness":
                if row.judge in thresholds.faithfulness_skip_judges or row.judged < MIN_SAMPLES:
                    continue  # the rules leave the lexical estimate out
            elif row.retrievals < MIN_SAMPLES:
                continue
            was, is_ = getattr(before, attr), getattr(row, attr)
            if was is not None and is_ is not None and is_ < was - drop:  # the rules' condition, as written there
                fired.append(f"{alert} ({ALERTS[alert][0]}) would fire for variant {variant}: "
                             f"{what} {was:.2f} -> {is_:.2f} (drop {was - is_:.2f} > {drop:.2f})")
    return fired


def _num(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def _faith(row: Row) -> str:
    if row.faithfulness is None:
        return "-"
    return f"{row.faithfulness:.2f}" + (" (lexical estimate)" if row.judge == "lexical" else "")


def _cells(row: Row) -> list[str]:
    return [
        f"{row.requests:.0f}", _num(row.hit_rate), _num(row.mrr), _faith(row),
        _num(row.p50, "{:.0f}"), _num(row.p95, "{:.0f}"), _num(row.cost, "${:.6f}"), _num(row.thumbs),
    ]


_HEADERS = ("requests (all)", "hit rate@{k}", "MRR", "faithfulness", "p50 ms", "p95 ms", "cost/request", "thumbs up")


def _ms(row: Row) -> Row:
    return replace(row, p50=None if row.p50 is None else row.p50 * 1000, p95=None if row.p95 is None else row.p95 * 1000)


def render(values: Values, window: str, k: int, fired: Iterable[str], status: str) -> RenderableType:
    """The live view: a table of ``values`` by variant, then the alerts, then ``status``."""
    table = Table(title=f"ragmon demo: rolling {window} window (shortened for the demo)", title_justify="left")
    table.add_column("variant")
    for header in _HEADERS:
        table.add_column(header.format(k=k), justify="right")
    for variant, row in sorted(values.items()):
        table.add_row(variant, *_cells(_ms(row)))
    lines = [Text(line, style="bold red") for line in fired] or [Text("no alert would fire", style="green")]
    return Group(table, *lines, Text(status, style="dim"))


def plain(values: Values, window: str, k: int, elapsed: float) -> list[str]:
    """One line per variant, for output that is not a terminal."""
    lines = []
    for variant, row in sorted(values.items()):
        r = _ms(row)
        cells = dict(zip([h.format(k=k) for h in _HEADERS], _cells(r)))
        lines.append(f"[{elapsed:5.1f}s] variant {variant} ({window}): " + ", ".join(f"{h} {c}" for h, c in cells.items()))
    return lines
