"""How far the judge agrees with people: human labels (``--human``) and agreement figures.

A labels file is JSON Lines, one labelled record a line::

    {"record": "q7", "faithfulness": 1, "answer_relevance": 0, "answer_correctness": 0.5}

``record`` names a record as ``--records`` does: its ``query_id``, else its 1-based line or
row number (a string or an integer; matched as a string, so ``7`` and ``"7"`` are the same
record). Every other key is a judged metric with a label in [0, 1]: ``0``/``1`` (``false`` /
``true`` read as 0/1) for a yes/no judgement, any number in between for a graded one; ``null``
leaves the metric unlabelled for that record.

Per metric, :func:`agreement` compares the judge's scores with the labels: Spearman's rank
correlation always; for 0/1 labels also accuracy and Cohen's kappa with the judge's score cut
at a threshold (``score >= threshold`` counts as 1); each with a percentile bootstrap 95%
interval. Orientation never matters: for ``toxicity`` (higher is worse) a label of 1 means
toxic and a judge's score at or above the threshold counts as toxic, so nothing is flipped.

Pure except :func:`read_human_labels`, which reads the file.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from ragmon.errors import InputError
from ragmon.formats.jsonl import iter_jsonl
from ragmon.formats.relevance import as_id
from ragmon.numbers import as_unit
from ragmon.offline.generation import ESTIMATES, GENERATION_METRICS

__all__ = [
    "FIGURES",
    "LABELLED_METRICS",
    "Agreement",
    "Confusion",
    "HumanLabels",
    "Pairs",
    "agreement",
    "agreement_json",
    "pair_scores",
    "read_human_labels",
]

LABELLED_METRICS: Final[tuple[str, ...]] = tuple(m for m in GENERATION_METRICS if m not in ESTIMATES)
"""The metrics a labels file may label: the judged ones (not the lexical estimate)."""
FIGURES: Final = ("spearman", "kappa", "accuracy")
"""The agreement figures, each with a 95% interval."""
_KEYS: Final = ("record", *LABELLED_METRICS)
_CHUNK_CELLS: Final = 1 << 16
"""Bootstrap resamples are drawn in chunks of about this many pairs: a few MB at the peak."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class HumanLabels:
    """The labels of a ``--human`` file: record id -> {metric: label in [0, 1]}, in file order."""

    path: str
    records: Mapping[str, Mapping[str, float]]
    lines: Mapping[str, int]
    """Record id -> the line that labels it."""

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics labelled at least once, in ``LABELLED_METRICS`` order."""
        seen = {m for labels in self.records.values() for m in labels}
        return tuple(m for m in LABELLED_METRICS if m in seen)

    def labels(self, metric: str) -> dict[str, float]:
        """Record id -> label, for the records that label ``metric``."""
        return {r: labels[metric] for r, labels in self.records.items() if metric in labels}

    def binary(self, metric: str) -> bool:
        """Whether every label of ``metric`` is 0 or 1 (and there is at least one)."""
        values = self.labels(metric).values()
        return bool(values) and all(v in (0.0, 1.0) for v in values)


def _label(value: Any) -> float | None:
    """A label: ``true``/``false`` as 1/0, else a number in [0, 1] (``as_unit``); else None."""
    return float(value) if isinstance(value, bool) else as_unit(value)


def read_human_labels(path: str) -> HumanLabels:
    """Read a labels file; ``InputError`` naming the line on an unknown key, a record labelled
    twice, a missing or bad ``record``, a label that is not a number in [0, 1], or no label at all."""
    records: dict[str, dict[str, float]] = {}
    lines: dict[str, int] = {}
    for number, obj in iter_jsonl(path):
        for key in obj:
            if key not in _KEYS:
                close = difflib.get_close_matches(key, _KEYS, n=1)
                hint = f"did you mean {close[0]}?" if close else f"expected record, {', '.join(LABELLED_METRICS)}"
                raise InputError(path, f"unknown key {key!r} ({hint})", number)
        if obj.get("record") is None:
            raise InputError(path, 'missing "record" (the query_id, else the 1-based line or row)', number)
        try:
            record = as_id(obj["record"], '"record"')
        except ValueError as exc:
            raise InputError(path, str(exc), number) from None
        if record in lines:
            raise InputError(path, f"record {record!r} labelled twice (first on line {lines[record]})", number)
        labels: dict[str, float] = {}
        for metric in LABELLED_METRICS:
            value = obj.get(metric)
            if value is None:
                continue
            label = _label(value)
            if label is None:
                raise InputError(path, f"{metric}: expected 0, 1 or a number in [0, 1], got {value!r}", number)
            labels[metric] = label
        records[record] = labels
        lines[record] = number
    if not any(records.values()):
        raise InputError(path, "no labels (expected JSON lines with record and at least one of "
                               f"{', '.join(LABELLED_METRICS)})")
    return HumanLabels(path, records, lines)


class Pairs(NamedTuple):
    """One metric's (judge, human) pairs, in the labels file's order, and the labelled records
    left out: ``unscored`` are in the run without a judge's score (failed or skipped),
    ``unknown`` are not in the run at all."""

    judge: list[float]
    human: list[float]
    unscored: int
    unknown: int


def pair_scores(judged: Mapping[str, float | None], labels: HumanLabels, metric: str) -> Pairs:
    """Pair ``metric``'s labels with the judge's scores; ``judged`` maps every record id of the
    run (as in ``--records``) to its score of ``metric``, ``None`` when it has none."""
    judge: list[float] = []
    human: list[float] = []
    unscored = unknown = 0
    for record, label in labels.labels(metric).items():
        if record not in judged:
            unknown += 1
            continue
        score = judged[record]
        if score is None:
            unscored += 1
            continue
        judge.append(score)
        human.append(label)
    return Pairs(judge, human, unscored, unknown)


@dataclass(frozen=True, slots=True)
class Confusion:
    """The judge's verdict (score >= threshold: 1) against the human label, counted."""

    tp: int
    """judge 1, human 1"""
    fp: int
    """judge 1, human 0"""
    fn: int
    """judge 0, human 1"""
    tn: int
    """judge 0, human 0"""


@dataclass(frozen=True, slots=True)
class Agreement:
    """One metric's agreement between the judge and the human labels over ``n`` pairs.

    ``kappa``, ``accuracy`` and ``confusion`` are set for 0/1 labels only. A figure is ``None``
    where undefined; ``ci95[figure]`` is its percentile bootstrap interval, ``None`` when the
    figure is undefined or no resample defines it.
    """

    n: int
    spearman: float | None
    kappa: float | None
    accuracy: float | None
    threshold: float
    ci95: Mapping[str, tuple[float, float] | None]
    confusion: Confusion | None


def _spearman(jx: IntArray, hx: IntArray, picks: IntArray) -> FloatArray:
    """Spearman's rho of each row of ``picks`` (indices into the pairs): Pearson's r of the
    average ranks (ties share the mean of their ranks, as ``scipy.stats.spearmanr``); NaN where
    a side is constant. ``jx``/``hx`` code each pair's value by its rank among the distinct
    values, so a row's ranks come from counts alone."""
    rows, n = picks.shape
    centred = []
    for codes in (jx, hx):
        width = int(codes.max()) + 1
        cells = codes[picks] + (np.arange(rows, dtype=np.int64) * width)[:, None]
        counts = np.bincount(cells.ravel(), minlength=rows * width).reshape(rows, width)
        below = np.cumsum(counts, axis=1) - counts
        mean_rank = below + (counts + 1) / 2.0
        # ranks are multiples of 1/2 and so is their mean (n + 1) / 2: exact, so is a constant side's 0
        centred.append(mean_rank.ravel()[cells] - (n + 1) / 2.0)
    x, y = centred
    sxx = np.einsum("ij,ij->i", x, x)
    syy = np.einsum("ij,ij->i", y, y)
    sxy = np.einsum("ij,ij->i", x, y)
    defined = (sxx > 0) & (syy > 0)
    rho = np.full(rows, np.nan)
    rho[defined] = np.clip(sxy[defined] / np.sqrt(sxx[defined] * syy[defined]), -1.0, 1.0)
    return rho


def _binary_figures(cell: IntArray, picks: IntArray) -> tuple[IntArray, FloatArray, FloatArray]:
    """Per row of ``picks``: the confusion counts ``(rows, 4)`` (tp, fp, fn, tn), accuracy and
    Cohen's kappa (NaN where chance agreement is 1: both sides all one same class)."""
    rows, n = picks.shape
    cells = cell[picks] + (np.arange(rows, dtype=np.int64) * 4)[:, None]
    counts = np.bincount(cells.ravel(), minlength=rows * 4).reshape(rows, 4)
    tp, fp, fn, tn = counts.T
    accuracy = (tp + tn) / n
    # kappa = (p_o - p_e) / (1 - p_e), times n^2 on both sides: whole numbers until the division
    chance = (tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)
    spread = n * n - chance
    kappa = np.full(rows, np.nan)
    ok = spread != 0
    kappa[ok] = (n * (tp + tn) - chance)[ok] / spread[ok]
    return counts, accuracy, kappa


def _codes(values: FloatArray) -> IntArray:
    """Each value's index among the sorted distinct values."""
    return np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _interval(values: FloatArray) -> tuple[float, float] | None:
    """The central 95% of the defined values (numpy's linear interpolation), None if none is."""
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return None
    low, high = np.quantile(defined, [0.025, 0.975])
    return float(low), float(high)


def _point(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def agreement(
    judge: Sequence[float],
    human: Sequence[float],
    *,
    binary: bool,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
) -> Agreement:
    """The judge's agreement with people over paired scores (``judge[i]`` and ``human[i]`` are
    one record's).

    - ``spearman``: Pearson's r of the average ranks, in [-1, 1]; ``None`` when n < 2 or a side
      is constant.
    - ``accuracy`` (``binary`` only): (tp + tn) / n with the judge's verdict ``score >=
      threshold``; ``None`` when n = 0.
    - ``kappa`` (``binary`` only): Cohen's kappa (p_o - p_e) / (1 - p_e), p_o the accuracy and
      p_e the agreement expected by chance from each side's share of 1s, in [-1, 1]; ``None``
      when p_e = 1 (judge and people give one and the same class throughout: no disagreement
      was possible, so agreement says nothing).
    - ``ci95``: percentile bootstrap intervals over ``resamples`` resamples of the pairs with
      replacement (``numpy.random.default_rng(seed)``: the same figures every run), leaving out
      resamples where the figure is undefined.

    ``ValueError`` when the lengths differ, a value is not finite, ``binary`` labels are not 0/1,
    ``threshold`` is outside [0, 1] or ``resamples`` < 1.
    """
    j = np.asarray(judge, dtype=np.float64).reshape(-1)
    h = np.asarray(human, dtype=np.float64).reshape(-1)
    if j.shape != h.shape:
        raise ValueError(f"{j.size} judge scores against {h.size} human labels")
    if not (np.isfinite(j).all() and np.isfinite(h).all()):
        raise ValueError("scores and labels must be finite")
    if binary and not np.isin(h, (0.0, 1.0)).all():
        raise ValueError("binary labels must be 0 or 1")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    n = int(j.size)
    if n == 0:
        empty: dict[str, tuple[float, float] | None] = {f: None for f in FIGURES}
        return Agreement(0, None, None, None, threshold, empty, Confusion(0, 0, 0, 0) if binary else None)
    jx, hx = _codes(j), _codes(h)
    cell = (2 * (j < threshold) + (h == 0.0)).astype(np.int64)  # 0 tp, 1 fp, 2 fn, 3 tn
    whole = np.arange(n, dtype=np.int64)[None, :]
    rho = _spearman(jx, hx, whole)[0]
    counts, accuracy, kappa = _binary_figures(cell, whole)
    # resamples, all figures from the same draws
    rng = np.random.default_rng(seed)
    size = max(1, _CHUNK_CELLS // n)
    drawn: dict[str, list[FloatArray]] = {f: [] for f in FIGURES}
    for start in range(0, resamples, size):
        picks = rng.integers(0, n, size=(min(size, resamples - start), n), dtype=np.int64)
        drawn["spearman"].append(_spearman(jx, hx, picks))
        if binary:
            _, acc, kap = _binary_figures(cell, picks)
            drawn["accuracy"].append(acc)
            drawn["kappa"].append(kap)
    points = {"spearman": _point(rho), "kappa": _point(kappa[0]), "accuracy": float(accuracy[0])}
    # a figure undefined on the pairs is undefined on every resample of them: its interval is None
    ci95 = {f: _interval(np.concatenate(drawn[f])) if drawn[f] else None for f in FIGURES}
    if not binary:
        return Agreement(n, points["spearman"], None, None, threshold, ci95, None)
    tp, fp, fn, tn = (int(c) for c in counts[0])
    return Agreement(n, points["spearman"], points["kappa"], points["accuracy"], threshold, ci95,
                     Confusion(tp, fp, fn, tn))


def agreement_json(a: Agreement) -> dict[str, Any]:
    """The ``agreement`` object of one metric in the JSON report."""
    return {
        "n": a.n,
        "spearman": a.spearman,
        "kappa": a.kappa,
        "accuracy": a.accuracy,
        "threshold": a.threshold,
        "ci95": {f: None if (ci := a.ci95.get(f)) is None else [ci[0], ci[1]] for f in FIGURES},
        "confusion": None if a.confusion is None else {
            "tp": a.confusion.tp, "fp": a.confusion.fp, "fn": a.confusion.fn, "tn": a.confusion.tn
        },
    }
