"""A result per record (``ragmon eval --records``, the worst records of a report, the Python API):
each record's score per metric, or why it has none, and the judge's verdict details.

A record is named by its ``query_id``, else its 1-based line (or row) in its file. Pure: built
from an ``EvalReport`` and the references of the records it scored (``ragmon.offline.scan``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ragmon.offline.agreement import Agreement, HumanLabels, agreement, pair_scores
from ragmon.offline.evaluate import HIGHER_IS_WORSE, EvalReport
from ragmon.offline.generation import RecordOutcome
from ragmon.offline.records import EvalRecord
from ragmon.offline.scan import RecordRef

__all__ = [
    "RecordResult", "record_id", "record_results", "record_json", "worst", "judge_agreement", "WHY_UNLABELLED", "WHY_NO_IDS",
]

WHY_UNLABELLED: Final = "unlabelled: no document of the record is labelled relevant"
WHY_NO_IDS: Final = "not applicable: the record carries no document ids"


def record_id(record: EvalRecord | RecordRef) -> str | int:
    """The record's name: its ``query_id``, else its 1-based line or row."""
    return record.query_id if record.query_id is not None else record.line


@dataclass(frozen=True, slots=True)
class RecordResult:
    """One record's results: a score per metric (``None``: see ``why``), the judge's details."""

    record: str | int
    file: str
    scores: dict[str, float | None]
    why: dict[str, str] = field(default_factory=dict)
    """Metric -> why it has no score (unlabelled, not applicable, skipped, failed and the cause)."""
    verdicts: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Judged metric -> the verdict behind its score (``ragmon.offline.details``)."""


def _why_generation(outcome: RecordOutcome) -> str:
    if outcome.failure is not None:
        return f"failed ({outcome.failure}): {outcome.cause or outcome.failure}"
    return f"skipped ({outcome.skip})"


def record_results(report: EvalReport, records: Sequence[RecordRef]) -> Iterator[RecordResult]:
    """Every record's results, in input order (made as asked for: a million records are not
    held at once)."""
    scores = report.scores
    keys = list(scores.values)
    applicable = 0  # index among records with document ids (what the batch core scored)
    labelled = 0  # index among those scored (what ``values`` holds)
    generation = report.generation
    for i, record in enumerate(records):
        values: dict[str, float | None] = {}
        why: dict[str, str] = {}
        if not record.has_ids:
            values = dict.fromkeys(keys)
            why = dict.fromkeys(keys, WHY_NO_IDS)
        else:
            if scores.labelled[applicable]:
                values = {key: float(scores.values[key][labelled]) for key in keys}
                labelled += 1
            else:
                values = dict.fromkeys(keys)
                why = dict.fromkeys(keys, WHY_UNLABELLED)
            applicable += 1
        verdicts: dict[str, Mapping[str, Any]] = {}
        if generation is not None:
            for metric in generation.metrics:
                outcome = metric.outcomes[i]
                values[metric.key] = outcome.score
                if outcome.score is None:
                    why[metric.key] = _why_generation(outcome)
                if outcome.detail is not None:
                    verdicts[metric.key] = outcome.detail
        yield RecordResult(record_id(record), record.path, values, why, verdicts)


def record_json(result: RecordResult, human: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One line of ``--records``: record, file, scores, why, verdicts, and the human labels."""
    out: dict[str, Any] = {"record": result.record, "file": result.file, "scores": result.scores}
    if result.why:
        out["why"] = result.why
    if result.verdicts:
        out["verdicts"] = result.verdicts
    if human:
        out["human"] = dict(human)
    return out


def worst(results: Sequence[RecordResult], metric: str, count: int) -> list[RecordResult]:
    """The ``count`` records that scored worst on ``metric`` (lowest; highest where higher is
    worse), in input order among equals; records without a score, or with a perfect one (1, or
    0 where higher is worse), are not listed."""
    perfect = 0.0 if metric in HIGHER_IS_WORSE else 1.0
    scored = [r for r in results if r.scores.get(metric) is not None and r.scores[metric] != perfect]
    sign = -1.0 if metric in HIGHER_IS_WORSE else 1.0
    return sorted(scored, key=lambda r: sign * (r.scores[metric] or 0.0))[:count]


def judge_agreement(
    results: Sequence[RecordResult], labels: HumanLabels, threshold: float = 0.5, *, seed: int = 0
) -> tuple[dict[str, Agreement], dict[str, tuple[int, int]]]:
    """The judge's agreement with ``labels`` per labelled metric, and per metric the labelled
    records left out: (in the run without a judge's score, not in the run at all)."""
    out: dict[str, Agreement] = {}
    left_out: dict[str, tuple[int, int]] = {}
    for metric in labels.metrics:
        judged = {str(r.record): r.scores.get(metric) for r in results}
        pairs = pair_scores(judged, labels, metric)
        out[metric] = agreement(pairs.judge, pairs.human, binary=labels.binary(metric), threshold=threshold, seed=seed)
        left_out[metric] = (pairs.unscored, pairs.unknown)
    return out, left_out
