"""Rendering ``ragmon eval`` and ``ragmon compare`` results as a table, JSON or markdown."""

from __future__ import annotations

import json
from typing import Any

from ragmon.metrics.batch import METRICS
from ragmon.offline.compare import Comparison
from ragmon.offline.evaluate import EvalReport

__all__ = ["FORMATS", "render_eval", "render_compare", "eval_json", "compare_json"]

FORMATS = ("table", "json", "markdown")
_MAX_LISTED = 10


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4f}"


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.4f}" + (" *" if value < 0.05 else "")


def _grid(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """Rows per metric and columns per k; MRR (no k) has its own column."""
    ks = report.scores.ks
    header = ["metric", *[f"@{k}" for k in ks]]
    rows = []
    for name in METRICS:
        if name == "mrr":
            rows.append(["mrr", _num(report.means["mrr"]), *[""] * (len(ks) - 1)] if ks else ["mrr"])
        else:
            rows.append([name, *[_num(report.means[f"{name}@{k}"]) for k in ks]])
    return header, rows


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:]))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _summary(report: EvalReport) -> str:
    files = ", ".join(report.files)
    return (
        f"{report.records} records from {files}: {report.scores.queries} scored, "
        f"{report.scores.unlabelled} unlabelled (excluded)"
    )


def _threshold_lines(report: EvalReport, markdown: bool) -> list[str]:
    lines = []
    for result in report.thresholds:
        t = result.threshold
        if result.value is None:
            verdict, detail = "FAIL", f"{t.key}: no query was scored (need >= {t.minimum:g})"
        elif result.passed:
            verdict, detail = "ok", f"{t.key} = {result.value:.4f} >= {t.minimum:g}"
        else:
            verdict, detail = "FAIL", f"{t.key} = {result.value:.4f} < {t.minimum:g}"
        if markdown:
            lines.append(f"- {'✅' if result.passed else '❌'} {detail}")
        else:
            lines.append(f"{verdict:<4}  {detail}")
    return lines


def eval_json(report: EvalReport) -> dict[str, Any]:
    """The ``--format json`` object of SPEC §8a, plus files, records and threshold results."""
    return {
        "queries": report.scores.queries,
        "unlabelled": report.scores.unlabelled,
        "records": report.records,
        "files": list(report.files),
        "metrics": report.means,
        "thresholds": [
            {"metric": r.threshold.key, "min": r.threshold.minimum, "value": r.value, "passed": r.passed}
            for r in report.thresholds
        ],
        "passed": report.passed,
    }


def render_eval(report: EvalReport, fmt: str) -> str:
    """Render an eval report in one of ``FORMATS``."""
    if fmt == "json":
        return json.dumps(eval_json(report), ensure_ascii=False)
    header, rows = _grid(report)
    if fmt == "markdown":
        parts = ["### ragmon eval", "", _summary(report), "", _md_table(header, rows)]
        if report.thresholds:
            parts += ["", *_threshold_lines(report, markdown=True)]
        return "\n".join(parts)
    parts = [_summary(report), "", _text_table(header, rows)]
    if report.thresholds:
        parts += ["", *_threshold_lines(report, markdown=False)]
    return "\n".join(parts)


def compare_json(comparison: Comparison) -> dict[str, Any]:
    """The ``--format json`` object of ``ragmon compare``."""
    return {
        "a": comparison.file_a,
        "b": comparison.file_b,
        "common_queries": comparison.common,
        "only_in_a": list(comparison.only_in_a),
        "only_in_b": list(comparison.only_in_b),
        "unlabelled": list(comparison.unlabelled),
        "resamples": comparison.resamples,
        "seed": comparison.seed,
        "metrics": {
            m.key: {
                "a": m.mean_a, "b": m.mean_b, "diff": m.diff, "p_value": m.p_value,
                "ci95": None if m.ci_low is None else [m.ci_low, m.ci_high],
            }
            for m in comparison.metrics
        },
    }


def _listed(keys: tuple[str, ...]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED])
    return shown + (f", … ({len(keys) - _MAX_LISTED} more)" if len(keys) > _MAX_LISTED else "")


def _compare_notes(c: Comparison) -> list[str]:
    notes = [
        f"A = {c.file_a}, B = {c.file_b}: {c.common} common labelled queries; "
        f"{c.resamples} resamples, seed {c.seed}; * p < 0.05"
    ]
    if c.only_in_a:
        notes.append(f"only in A ({len(c.only_in_a)}): {_listed(c.only_in_a)}")
    if c.only_in_b:
        notes.append(f"only in B ({len(c.only_in_b)}): {_listed(c.only_in_b)}")
    if c.unlabelled:
        notes.append(f"unlabelled in A or B, left out ({len(c.unlabelled)}): {_listed(c.unlabelled)}")
    return notes


def render_compare(comparison: Comparison, fmt: str) -> str:
    """Render a comparison in one of ``FORMATS``."""
    if fmt == "json":
        return json.dumps(compare_json(comparison), ensure_ascii=False)
    header = ["metric", "A", "B", "B − A", "p", "95% CI of B − A"]
    rows = [
        [
            m.key, _num(m.mean_a), _num(m.mean_b), _signed(m.diff), _p(m.p_value),
            "—" if m.ci_low is None else f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}]",
        ]
        for m in comparison.metrics
    ]
    notes = _compare_notes(comparison)
    if fmt == "markdown":
        return "\n".join(["### ragmon compare", "", *[f"- {n}" for n in notes], "", _md_table(header, rows)])
    return "\n".join([*notes, "", _text_table(header, rows)])
