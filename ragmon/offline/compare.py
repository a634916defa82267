"""Comparing two runs of the same queries (``ragmon compare``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.errors import InputError
from ragmon.groundtruth.text import normalize_query
from ragmon.offline.evaluate import score_records
from ragmon.offline.records import EvalRecord, Qrels
from ragmon.offline.stats import bootstrap_ci, randomization_p_values

__all__ = ["MetricComparison", "Comparison", "query_key", "index_run", "compare_runs"]


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric of a comparison: means on the common queries, B − A, p-value, 95% CI of B − A."""

    key: str
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """What ``ragmon compare`` reports."""

    file_a: str
    file_b: str
    common: int
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    unlabelled: tuple[str, ...]
    """Common queries left out because one run or both had no relevance for them."""
    resamples: int
    seed: int
    metrics: tuple[MetricComparison, ...]


def query_key(record: EvalRecord) -> str:
    """How a record is matched across runs: its ``query_id``, else its normalized query text."""
    if record.query_id is not None:
        return record.query_id
    if record.query is not None:
        return normalize_query(record.query)
    raise InputError(record.path, 'needs "query_id" or "query" to be paired with the other run', record.line)


def index_run(records: Iterable[EvalRecord]) -> dict[str, EvalRecord]:
    """Records by ``query_key``; ``InputError`` on a query that appears twice."""
    index: dict[str, EvalRecord] = {}
    for record in records:
        key = query_key(record)
        if key in index:
            first = index[key]
            raise InputError(record.path, f"query {key!r} appears twice (first at line {first.line})", record.line)
        index[key] = record
    return index


def compare_runs(
    file_a: str,
    run_a: Sequence[EvalRecord],
    file_b: str,
    run_b: Sequence[EvalRecord],
    qrels: Qrels | None,
    ks: Iterable[int],
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Score both runs, pair them on their common labelled queries and test each metric."""
    index_a, index_b = index_run(run_a), index_run(run_b)
    common = [key for key in index_a if key in index_b]
    scores_a = score_records([index_a[k] for k in common], qrels, ks)
    scores_b = score_records([index_b[k] for k in common], qrels, ks)
    both = scores_a.labelled & scores_b.labelled
    keep_a = both[scores_a.labelled]
    keep_b = both[scores_b.labelled]
    keys = list(scores_a.values)
    a = np.column_stack([scores_a.values[k][keep_a] for k in keys]) if keys else np.zeros((0, 0))
    b = np.column_stack([scores_b.values[k][keep_b] for k in keys]) if keys else np.zeros((0, 0))
    diffs = b - a
    rng = np.random.default_rng(seed)
    p_values = randomization_p_values(diffs, resamples, rng)
    low, high = bootstrap_ci(diffs, resamples, rng)
    paired = int(both.sum())

    def num(x: float) -> float | None:
        return None if paired == 0 else float(x)

    metrics = tuple(
        MetricComparison(
            key,
            num(a[:, j].mean()) if paired else None,
            num(b[:, j].mean()) if paired else None,
            num(diffs[:, j].mean()) if paired else None,
            num(p_values[j]),
            num(low[j]),
            num(high[j]),
        )
        for j, key in enumerate(keys)
    )
    return Comparison(
        file_a=file_a,
        file_b=file_b,
        common=paired,
        only_in_a=tuple(k for k in index_a if k not in index_b),
        only_in_b=tuple(k for k in index_b if k not in index_a),
        unlabelled=tuple(k for k, ok in zip(common, both) if not ok),
        resamples=resamples,
        seed=seed,
        metrics=metrics,
    )
