"""Rendering ``ragmon eval`` and ``ragmon compare`` results as a table, JSON or markdown."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ragmon.metrics.batch import METRICS
from ragmon.offline.compare import Comparison, MetricComparison
from ragmon.offline.agreement import Agreement, agreement_json
from ragmon.offline.details import summary
from ragmon.offline.evaluate import HIGHER_IS_WORSE, EvalReport
from ragmon.offline.generation import GenerationReport, MetricResults
from ragmon.offline.per_record import RecordResult, worst

__all__ = ["render_eval", "render_compare", "eval_json", "compare_json", "generation_json"]

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


def _md_table(header: list[str], rows: list[list[str]], text_last: bool = False) -> str:
    """A markdown table: the first column (and the last, with ``text_last``) left-aligned, the
    others right-aligned."""
    aligns = [" --- "] + [" ---: "] * (len(header) - 1)
    if text_last:
        aligns[-1] = " --- "
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _summary(report: EvalReport) -> str:
    files = ", ".join(report.files)
    line = (
        f"{report.records} records from {files}: {report.scores.queries} scored, "
        f"{report.scores.unlabelled} unlabelled (excluded)"
    )
    if report.not_applicable:
        line += f", {report.not_applicable} without document ids (retrieval not applicable)"
    return line


def _threshold_lines(report: EvalReport, markdown: bool) -> list[str]:
    lines = []
    for result in report.thresholds:
        t = result.threshold
        if result.value is None:
            verdict, detail = "FAIL", f"{t.key}: {result.why_none} (need {t.holds} {t.limit:g})"
        elif result.passed:
            verdict, detail = "ok", f"{t.key} = {result.value:.4f} {t.holds} {t.limit:g}"
        else:
            verdict, detail = "FAIL", f"{t.key} = {result.value:.4f} {t.breaks} {t.limit:g}"
        if markdown:
            lines.append(f"- {'✅' if result.passed else '❌'} {detail}")
        else:
            lines.append(f"{verdict:<4}  {detail}")
    return lines


def _counts(metric: MetricResults) -> dict[str, Any]:
    return {
        "scored": metric.scored, "failed": metric.failures, "skipped": metric.skips,
        "failures": metric.failed, "skips": metric.skipped,
    }


def generation_json(generation: GenerationReport) -> dict[str, Any]:
    """The generation part of a JSON report: judged metrics go to ``metrics`` with their counts
    in ``judged`` and the judge model in ``judge``; lexical estimates go to ``estimates`` with
    their counts in ``estimated`` (never under a judged metric's name). Nothing that depends on
    what the cache held (calls, cost) is in it, so a re-run prints the same report."""
    means = {m.key: m.mean for m in generation.metrics}
    counts = {m.key: _counts(m) for m in generation.metrics}
    if generation.mode == "lexical":
        return {"estimates": means, "estimated": counts}
    causes = [
        {"failure": failure, "cause": cause, "records": n} for (failure, cause), n in generation.causes().items()
    ]
    judge = {"model": generation.model, "endpoint": generation.endpoint, "failed_records": generation.failed_records, "causes": causes}
    return {"metrics": means, "judged": counts, "judge": judge}


def eval_json(report: EvalReport, agreement: Mapping[str, Agreement] | None = None) -> dict[str, Any]:
    """The ``--format json`` object of SPEC §8a, plus files, records, threshold results and the
    judge's agreement with human labels (``--human``)."""
    out: dict[str, Any] = {
        "queries": report.scores.queries,
        "unlabelled": report.scores.unlabelled,
        "not_applicable": report.not_applicable,
        "records": report.records,
        "files": list(report.files),
        "metrics": dict(report.means),
    }
    if report.generation is not None:
        extra = generation_json(report.generation)
        out["metrics"].update(extra.pop("metrics", {}))
        out.update(extra)
    out["thresholds"] = [
        {"metric": r.threshold.key, "max" if r.threshold.above else "min": r.threshold.limit, "value": r.value, "passed": r.passed}
        | ({} if r.value is not None else {"reason": r.why_none})
        for r in report.thresholds
    ]
    if agreement is not None:
        out["agreement"] = {key: agreement_json(a) for key, a in agreement.items()}
    out["passed"] = report.passed
    return out


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in counts.items())


def _generation_title(generation: GenerationReport) -> str:
    if generation.mode == "lexical":
        return (
            "generation: lexical ESTIMATES (word overlap with the contexts, not judged; "
            "--judge for judged scores)"
        )
    return f"generation: judged by {generation.model}, one call per record"


def _generation_rows(generation: GenerationReport) -> tuple[list[str], list[list[str]]]:
    header = ["metric", "mean", "scored", "failed", "skipped"]
    rows = [
        [m.key, _num(m.mean), str(m.scored), str(m.failures), str(m.skips)] for m in generation.metrics
    ]
    return header, rows


def _generation_notes(generation: GenerationReport) -> list[str]:
    notes = [f"judge failed for {line}" for line in generation.cause_lines()]
    for m in generation.metrics:
        if m.failed:
            notes.append(f"{m.key}: failed {_reasons(m.failed)} (never scored)")
        if m.skipped:
            notes.append(f"{m.key}: skipped {_reasons(m.skipped)}")
    return notes


def _shows_generation(generation: GenerationReport | None) -> bool:
    """Judged runs always show it; estimates only when some record could be estimated."""
    if generation is None:
        return False
    return generation.mode == "llm" or any(
        m.scored or m.skips > m.skipped.get("not_applicable", 0) for m in generation.metrics
    )


def _generation_block(generation: GenerationReport, markdown: bool) -> list[str]:
    header, rows = _generation_rows(generation)
    notes = _generation_notes(generation)
    if markdown:
        return ["", f"**{_generation_title(generation)}**", "", _md_table(header, rows), *(
            ["", *[f"- {n}" for n in notes]] if notes else []
        )]
    return ["", _generation_title(generation), _text_table(header, rows), *notes]


def _worst_block(
    generation: GenerationReport | None, results: Sequence[RecordResult], count: int, markdown: bool
) -> list[str]:
    """The ``count`` worst records per judged metric, each with why (the verdict's summary)."""
    if generation is None or generation.mode != "llm" or not results or count <= 0:
        return []
    lines: list[str] = []
    for metric in generation.metrics:
        listed = worst(results, metric.key, count)
        if not listed:
            continue
        order = "highest" if metric.key in HIGHER_IS_WORSE else "lowest"
        title = f"worst {metric.key} ({order} {len(listed)} of {metric.scored} scored{', the rest perfect' if len(listed) < min(count, metric.scored) else ''})"
        rows = [
            [str(r.record), _num(r.scores[metric.key]), summary(metric.key, r.verdicts.get(metric.key, {}))]
            for r in listed
        ]
        header = ["record", metric.key, "why"]
        if markdown:
            lines += ["", f"**{title}**", "", _md_table(header, [[_md_cell(c) for c in row] for row in rows], text_last=True)]
        else:
            table = _text_table(header[:2], [row[:2] for row in rows]).splitlines()
            width = max(len(line) for line in table)
            lines += ["", title, *(f"{line.ljust(width)}  {why}".rstrip() for line, why in zip(table, [header[2], *(r[2] for r in rows)]))]
    return lines


def _md_cell(text: str) -> str:
    """A markdown table cell: pipes escaped, one line."""
    return " ".join(text.replace("|", "\\|").split())


def _agreement_block(agreement: Mapping[str, Agreement], markdown: bool) -> list[str]:
    """The judge's agreement with the human labels per metric, and each confusion table."""
    if not agreement:
        return []

    def fig(a: Agreement, name: str) -> str:
        value = getattr(a, name)
        ci = a.ci95.get(name)
        return "—" if value is None else f"{value:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    title = "agreement with the human labels (95% bootstrap intervals)"
    header = ["metric", "n", "spearman", "kappa", "accuracy"]
    rows = [[key, str(a.n), fig(a, "spearman"), fig(a, "kappa"), fig(a, "accuracy")] for key, a in agreement.items()]
    lines = ["", f"**{title}**", "", _md_table(header, rows)] if markdown else ["", title, _text_table(header, rows)]
    for key, a in agreement.items():
        c = a.confusion
        if c is None:
            continue
        cut = f"{key}: judge score >= {a.threshold:g} counts as 1"
        grid = [["judge 1", str(c.tp), str(c.fp)], ["judge 0", str(c.fn), str(c.tn)]]
        head = ["", "human 1", "human 0"]
        lines += ["", f"*{cut}*", "", _md_table(head, grid)] if markdown else ["", cut, _text_table(head, grid)]
    return lines


def render_eval(
    report: EvalReport,
    fmt: str,
    *,
    results: Sequence[RecordResult] = (),
    worst_count: int = 5,
    agreement: Mapping[str, Agreement] | None = None,
) -> str:
    """Render an eval report in one of ``ragmon.offline.options.FORMATS``; the table and markdown end with the
    ``worst_count`` worst ``results`` per judged metric, and ``agreement`` when given."""
    if fmt == "json":
        return json.dumps(eval_json(report, agreement), ensure_ascii=False)
    header, rows = _grid(report)
    generation = report.generation
    shown = generation is not None and _shows_generation(generation)
    if fmt == "markdown":
        parts = ["### ragmon eval", "", _summary(report), "", _md_table(header, rows)]
        if shown and generation is not None:
            parts += _generation_block(generation, markdown=True)
        parts += _agreement_block(agreement or {}, markdown=True)
        parts += _worst_block(generation, results, worst_count, markdown=True)
        if report.thresholds:
            parts += ["", *_threshold_lines(report, markdown=True)]
        return "\n".join(parts)
    parts = [_summary(report), "", _text_table(header, rows)]
    if shown and generation is not None:
        parts += _generation_block(generation, markdown=False)
    parts += _agreement_block(agreement or {}, markdown=False)
    parts += _worst_block(generation, results, worst_count, markdown=False)
    if report.thresholds:
        parts += ["", *_threshold_lines(report, markdown=False)]
    return "\n".join(parts)


def compare_json(comparison: Comparison) -> dict[str, Any]:
    """The ``--format json`` object of ``ragmon compare``: judged generation metrics join
    ``metrics`` (each with its ``pairs``: queries scored in both runs), lexical estimates go to
    ``estimates``; ``judged`` / ``estimated`` give each run's counts."""
    out: dict[str, Any] = {
        "a": comparison.file_a,
        "b": comparison.file_b,
        "common_queries": comparison.common,
        "only_in_a": list(comparison.only_in_a),
        "only_in_b": list(comparison.only_in_b),
        "unlabelled": list(comparison.unlabelled),
        "not_applicable": list(comparison.not_applicable),
        "resamples": comparison.resamples,
        "seed": comparison.seed,
        "metrics": {m.key: _comparison_json(m) for m in comparison.metrics},
    }
    a, b = comparison.generation_a, comparison.generation_b
    if a is not None and b is not None:
        generation = {m.key: _comparison_json(m) | {"pairs": m.pairs} for m in comparison.generation}
        json_a, json_b = generation_json(a), generation_json(b)
        if a.mode == "lexical":
            out["estimates"] = generation
            out["estimated"] = {"a": json_a["estimated"], "b": json_b["estimated"]}
        else:
            out["metrics"].update(generation)
            out["judged"] = {"a": json_a["judged"], "b": json_b["judged"]}
            judge_a, judge_b = json_a["judge"], json_b["judge"]
            out["judge"] = {"model": judge_a.pop("model"), "endpoint": judge_a.pop("endpoint"), "a": judge_a, "b": {
                k: v for k, v in judge_b.items() if k not in ("model", "endpoint")
            }}
    return out


def _comparison_json(m: MetricComparison) -> dict[str, Any]:
    return {
        "a": m.mean_a, "b": m.mean_b, "diff": m.diff, "p_value": m.p_value,
        "ci95": None if m.ci_low is None else [m.ci_low, m.ci_high],
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
    if c.not_applicable:
        notes.append(
            f"without document ids in A or B, retrieval not compared ({len(c.not_applicable)}): {_listed(c.not_applicable)}"
        )
    return notes


def render_compare(comparison: Comparison, fmt: str) -> str:
    """Render a comparison in one of ``ragmon.offline.options.FORMATS``."""
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
    gen_header = ["metric", "pairs", "A", "B", "B − A", "p", "95% CI of B − A"]
    gen_rows = [
        [
            m.key, str(m.pairs), _num(m.mean_a), _num(m.mean_b), _signed(m.diff), _p(m.p_value),
            "—" if m.ci_low is None else f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}]",
        ]
        for m in comparison.generation
    ]
    a, b = comparison.generation_a, comparison.generation_b
    gen_notes: list[str] = []
    title = ""
    shown = a is not None and b is not None and (_shows_generation(a) or _shows_generation(b))
    if shown and a is not None and b is not None:
        title = _generation_title(a) + "; pairs: common queries scored in both runs"
        gen_notes = [f"A {n}" for n in _generation_notes(a)] + [f"B {n}" for n in _generation_notes(b)]
    if fmt == "markdown":
        parts = ["### ragmon compare", "", *[f"- {n}" for n in notes], "", _md_table(header, rows)]
        if shown:
            parts += ["", f"**{title}**", "", _md_table(gen_header, gen_rows), *(
                ["", *[f"- {n}" for n in gen_notes]] if gen_notes else []
            )]
        return "\n".join(parts)
    parts = [*notes, "", _text_table(header, rows)]
    if shown:
        parts += ["", title, _text_table(gen_header, gen_rows), *gen_notes]
    return "\n".join(parts)
