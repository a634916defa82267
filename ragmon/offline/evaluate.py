"""Scoring a run of offline records and checking thresholds (``ragmon eval``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from ragmon.errors import UsageError
from ragmon.metrics.batch import METRICS, BatchScores
from ragmon.offline.generation import ESTIMATES, GENERATION_METRICS, GenerationReport
from ragmon.offline.scan import Scan

__all__ = [
    "HIGHER_IS_WORSE",
    "NO_IDS",
    "Threshold",
    "ThresholdResult",
    "EvalReport",
    "check_generation",
    "cutoffs",
    "evaluate",
    "parse_ks",
    "parse_threshold",
]


HIGHER_IS_WORSE: Final = frozenset({"toxicity"})
"""Metrics gated with ``--fail-over`` only (an evaluator of the judge where 0 is best)."""
NO_IDS: Final = "no record carries document ids"
"""Why a retrieval metric has no value when every record lacks document ids."""


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,3,5,10"`` -> ``(1, 3, 5, 10)``; ``UsageError`` unless every item is an integer >= 1."""
    ks: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item.isdecimal() or int(item) < 1:
            raise UsageError(f"--k takes integers >= 1 separated by commas, got {text!r}")
        ks.add(int(item))
    return tuple(sorted(ks))


@dataclass(frozen=True, slots=True)
class Threshold:
    """``--fail-under``: the mean of ``key`` (e.g. ``hit_rate@5``, ``mrr``) must be >= ``limit``;
    ``--fail-over`` (``above``): it must be <= ``limit`` (a metric where higher is worse)."""

    key: str
    limit: float
    above: bool = False

    @property
    def holds(self) -> str:
        """The relation the mean must have to the limit, as printed."""
        return "<=" if self.above else ">="

    @property
    def breaks(self) -> str:
        """The relation of a failing mean to the limit, as printed."""
        return ">" if self.above else "<"

    @property
    def k(self) -> int | None:
        """The cut-off the threshold needs, if any."""
        return int(self.key.split("@")[1]) if "@" in self.key else None


def parse_threshold(text: str, above: bool = False) -> Threshold:
    """Parse ``METRIC@K=VALUE`` (``mrr=VALUE`` for MRR, ``faithfulness=VALUE`` etc. for the
    generation metrics, which have no k) of ``--fail-under`` (``--fail-over`` when ``above``);
    ``UsageError`` naming the problem. A metric where higher is worse (``HIGHER_IS_WORSE``)
    takes only ``--fail-over``."""
    flag = "--fail-over" if above else "--fail-under"
    spec, sep, value = text.partition("=")
    if not sep:
        raise UsageError(f"{flag} takes METRIC@K=VALUE, got {text!r}")
    name, at, k = spec.strip().lower().partition("@")
    known = (*METRICS, *GENERATION_METRICS)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f" (one of {', '.join(known)})"
        raise UsageError(f"{flag}: unknown metric {name!r}{hint}")
    if name in HIGHER_IS_WORSE and not above:
        raise UsageError(f"--fail-under: higher {name} is worse; gate it with --fail-over {name}=VALUE")
    no_k = name == "mrr" or name in GENERATION_METRICS
    if no_k and at:
        raise UsageError(f"{flag}: {name} takes no @K, got {text!r}")
    if not no_k and (not at or not k.isdecimal() or int(k) < 1):
        raise UsageError(f"{flag}: {name} needs a cut-off, e.g. {name}@5=0.8, got {text!r}")
    try:
        limit = float(value)
    except ValueError:
        raise UsageError(f"{flag}: {value!r} is not a number in {text!r}") from None
    if not 0.0 <= limit <= 1.0:
        raise UsageError(f"{flag}: the value must be between 0 and 1, got {text!r}")
    return Threshold(name if no_k else f"{name}@{int(k)}", limit, above)


@dataclass(frozen=True, slots=True)
class ThresholdResult:
    """A threshold and the mean it was checked against (``None``: no query was scored)."""

    threshold: Threshold
    value: float | None
    why_none: str = "no query was scored"
    """Why there is no value (when ``value`` is ``None``)."""

    @property
    def passed(self) -> bool:
        """True when the mean exists and is on the right side of the limit."""
        if self.value is None:
            return False
        t = self.threshold
        return self.value <= t.limit if t.above else self.value >= t.limit


@dataclass(frozen=True, slots=True)
class EvalReport:
    """What ``ragmon eval`` reports."""

    files: tuple[str, ...]
    records: int
    scores: BatchScores
    means: dict[str, float | None]
    thresholds: tuple[ThresholdResult, ...]
    generation: GenerationReport | None = None
    """Judged generation metrics (``--judge``) or the lexical estimates."""
    not_applicable: int = 0
    """Records without document ids: their retrieval metrics are not applicable (not scored)."""

    @property
    def passed(self) -> bool:
        """True when every threshold passed."""
        return all(t.passed for t in self.thresholds)


def check_generation(threshold: Threshold, generation: GenerationReport | None) -> ThresholdResult:
    """A threshold on a generation metric, against the run's judged or estimated metrics."""
    key = threshold.key
    found = generation.get(key) if generation is not None else None
    if found is None:
        if key in ESTIMATES:
            why = f"{key} is the estimate made without --judge; with --judge, gate on {key.split('_')[0]}"
        elif generation is not None and generation.mode == "llm":
            why = f"{key} is not one of the judge's evaluators ([judge] evaluators, send_documents)"
        else:
            why = f"{key} is judged only with --judge" + (
                f" (the lexical estimate is {key}_lexical)" if f"{key}_lexical" in ESTIMATES else ""
            )
        return ThresholdResult(threshold, None, why)
    why = f"no record was scored for {key} ({found.failures} failed, {found.skips} skipped)"
    return ThresholdResult(threshold, found.mean, why)


def cutoffs(ks: Iterable[int], thresholds: Sequence[Threshold] = ()) -> tuple[int, ...]:
    """The cut-offs to score: ``ks`` and any a threshold needs."""
    return tuple(sorted(set(ks) | {t.k for t in thresholds if t.k is not None}))


def evaluate(
    files: Sequence[str],
    scan: Scan,
    thresholds: Sequence[Threshold] = (),
    generation: GenerationReport | None = None,
) -> EvalReport:
    """The report of a run read by ``scan_run`` (at ``cutoffs(ks, thresholds)``): the means,
    and the thresholds checked, those on generation metrics against ``generation``. Records
    without document ids count as ``not_applicable``; when no record has them, a retrieval
    threshold fails with ``NO_IDS``."""
    scores = scan.scores
    means = scores.means()
    records = len(scan.refs)
    not_applicable = scan.not_applicable
    why = NO_IDS if records and not_applicable == records else "no query was scored"
    results = tuple(
        check_generation(t, generation) if t.key in GENERATION_METRICS else ThresholdResult(t, means[t.key], why)
        for t in thresholds
    )
    return EvalReport(tuple(files), records, scores, means, results, generation, not_applicable=not_applicable)
