"""``ragmon eval`` from Python, for a team's own tests: score files or records, read the
per-record and aggregate results, and assert thresholds with a message naming the failing
records.

    from ragmon.offline.api import evaluate

    result = evaluate("run.jsonl", qrels="qrels.txt", k=(5,))
    result.check(at_least={"hit_rate@5": 0.8, "mrr": 0.6})

The same code as the command line: the same readers (every schema and container), metrics,
judge, cache and agreement.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ragmon.config import config_from_mapping, load_config
from ragmon.errors import ConfigError, UsageError
from ragmon.offline.agreement import Agreement, read_human_labels
from ragmon.offline.options import DEFAULT_CACHE
from ragmon.offline.details import summary
from ragmon.offline.evaluate import EvalReport, Threshold, evaluate as evaluate_report, parse_ks, parse_threshold
from ragmon.offline.files import read_records, records_from_objects
from ragmon.offline.generation import GenerationReport
from ragmon.offline.per_record import RecordResult, judge_agreement, record_results
from ragmon.offline.records import EvalRecord, read_qrels
from ragmon.offline.scan import scan_run

__all__ = ["Evaluation", "JudgeSettings", "evaluate"]

_SHOWN = 10
"""Failing records named per threshold in ``Evaluation.check``'s message."""


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """How to judge the records (``ragmon eval --judge``): ``None`` fields come from ``config``
    (a TOML file as ``ragmon run`` reads, default ``$RAGMON_CONFIG``, else built-in defaults)
    and the environment (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""

    base_url: str | None = None
    model: str | None = None
    config: str | None = None
    cache: str | None = DEFAULT_CACHE
    """The disk cache of judgements (``None``: none)."""
    max_failures: int = 0
    """Records whose judgement may fail before ``Evaluation.check`` fails."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What ``evaluate`` found: the aggregate report, one result per record, the judge's
    agreement with human labels (when given)."""

    report: EvalReport
    records: list[RecordResult]
    agreement: dict[str, Agreement] | None = None
    max_judge_failures: int = 0
    warnings: tuple[str, ...] = ()
    """What the readers warned of (a key of a record that ragmon ignores…), one line each."""

    @property
    def means(self) -> dict[str, float | None]:
        """Every metric's mean over the records that have a score (``None``: none has)."""
        out = dict(self.report.means)
        generation = self.report.generation
        if generation is not None:
            out.update({m.key: m.mean for m in generation.metrics})
        return out

    @property
    def judge_failures(self) -> int:
        """Records whose judgement failed (0 without a judge)."""
        generation = self.report.generation
        return generation.failed_records if generation is not None and generation.mode == "llm" else 0

    def check(self, at_least: Mapping[str, float] | None = None, at_most: Mapping[str, float] | None = None) -> None:
        """Assert ``mean >= limit`` for every ``at_least`` metric (``hit_rate@5``, ``mrr``,
        ``faithfulness``…) and ``mean <= limit`` for every ``at_most`` one (``toxicity``), and
        that the judge failed no more than allowed; ``AssertionError`` listing every failing
        threshold with the records that fell short, worst first."""
        thresholds = [_threshold(k, v, above=False) for k, v in (at_least or {}).items()]
        thresholds += [_threshold(k, v, above=True) for k, v in (at_most or {}).items()]
        means = self.means
        problems: list[str] = []
        for t in thresholds:
            if t.key not in means:
                raise UsageError(f"{t.key}: not a metric of this evaluation (one of {', '.join(means)})")
            mean = means[t.key]
            if mean is not None and (mean <= t.limit if t.above else mean >= t.limit):
                continue
            problems.append(self._failing(t, mean))
        generation = self.report.generation
        if self.judge_failures > self.max_judge_failures and generation is not None:
            causes = "; ".join(generation.cause_lines())
            problems.append(
                f"the judge failed for {self.judge_failures} record(s), more than {self.max_judge_failures} allowed: {causes}"
            )
        if problems:
            files = ", ".join(self.report.files)
            raise AssertionError(f"ragmon: {len(problems)} check(s) failed over {self.report.records} records of {files}\n"
                                 + "\n".join(f"  {p}" for p in problems))

    def _failing(self, t: Threshold, mean: float | None) -> str:
        """One failing threshold and its records that fell short, worst first."""
        scored = [r for r in self.records if r.scores.get(t.key) is not None]
        if mean is None:
            return f"{t.key}: no record has a score (need {t.holds} {t.limit:g})"
        short = [r for r in scored if ((r.scores[t.key] or 0.0) > t.limit if t.above else (r.scores[t.key] or 0.0) < t.limit)]
        short.sort(key=lambda r: -(r.scores[t.key] or 0.0) if t.above else (r.scores[t.key] or 0.0))
        named = ", ".join(_named(r, t.key) for r in short[:_SHOWN])
        more = f", … ({len(short) - _SHOWN} more)" if len(short) > _SHOWN else ""
        side = "above" if t.above else "below"
        return (f"{t.key} = {mean:.4f} {t.breaks} {t.limit:g} ({len(scored)} scored); "
                f"{len(short)} record(s) {side} {t.limit:g}: {named}{more}")


def _named(result: RecordResult, key: str) -> str:
    detail = result.verdicts.get(key)
    why = f" ({summary(key, detail)})" if detail else ""
    return f"{result.record} {result.scores[key]:.4f}{why}"


def _threshold(key: str, limit: float, above: bool) -> Threshold:
    return parse_threshold(f"{key}={limit!r}", above=above)


def _records(
    files: Sequence[str], records: Iterable[Mapping[str, Any]] | None, schema: str, warn: Any
) -> list[EvalRecord]:
    out: list[EvalRecord] = []
    for path in files:
        out.extend(read_records(os.fspath(path), schema=schema, warn=warn))
    if records is not None:
        out.extend(records_from_objects("<records>", records, schema=schema, warn=warn))
    return out


def _judged(records: Sequence[EvalRecord], judge: JudgeSettings) -> GenerationReport:
    from ragmon.offline.session import judge_endpoint, judge_runs

    try:
        config = load_config(judge.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    given = {k: v for k, v in (("base_url", judge.base_url), ("model", judge.model)) if v is not None}
    try:
        checked = config_from_mapping({"judge": given}, "JudgeSettings").judge
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    overrides: dict[str, Any] = {key: getattr(checked, key) for key in given}
    settings = replace(config.judge, enabled=True, **overrides)
    endpoint = judge_endpoint(settings, os.environ, "judge", "JudgeSettings(base_url=…)")
    _, [part] = judge_runs([records], config, settings, endpoint, cache_path=judge.cache)
    return part


def evaluate(
    *files: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]] | None = None,
    qrels: str | os.PathLike[str] | None = None,
    k: Iterable[int] = (1, 3, 5, 10),
    schema: str = "auto",
    judge: JudgeSettings | bool = False,
    human: str | os.PathLike[str] | None = None,
    human_threshold: float = 0.5,
) -> Evaluation:
    """Score the records of ``files`` (any format ``ragmon eval`` reads) and ``records`` (dicts
    in any schema it reads) as one run, like ``ragmon eval``: retrieval metrics at ``k``
    against ``qrels`` or the records' own labels; with ``judge`` (``True``: the defaults of
    ``JudgeSettings``) the generation metrics are judged, else estimated; ``human`` labels give
    the judge's agreement. ``InputError`` / ``UsageError`` as the CLI's exit 2."""
    warnings: list[str] = []
    paths = [os.fspath(f) for f in files]
    run = _records(paths, records, schema, warnings.append)
    if not run and not paths and records is None:
        raise UsageError("evaluate needs files or records")
    settings = JudgeSettings() if judge is True else judge or None
    if human is not None and settings is None:
        raise UsageError("human labels need a judge (agreement is the judge's with the labels)")
    labels = None if human is None else read_human_labels(os.fspath(human))
    ks = parse_ks(",".join(str(x) for x in k))
    relevance = None if qrels is None else read_qrels(os.fspath(qrels))
    scan = scan_run(run, relevance, ks, lexical=settings is None)
    generation = scan.estimates() if settings is None else _judged(run, settings)
    report = evaluate_report(paths or ["<records>"], scan, (), generation)
    results = list(record_results(report, scan.refs))
    agreement = None if labels is None else judge_agreement(results, labels, human_threshold)[0]
    return Evaluation(report, results, agreement, 0 if settings is None else settings.max_failures, tuple(warnings))

