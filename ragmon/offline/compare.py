"""Comparing two runs of the same queries (``ragmon compare``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.errors import InputError
from ragmon.formats.text import normalize_query
from ragmon.offline.scan import score_records
from ragmon.offline.generation import GenerationReport
from ragmon.offline.records import EvalRecord, Qrels
from ragmon.offline.stats import bootstrap_ci, randomization_p_values

__all__ = ["MetricComparison", "Comparison", "query_key", "index_run", "compare_runs", "compare_generation"]


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
    pairs: int = 0
    """Queries the metric was compared on (scored in both runs)."""


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
    generation: tuple[MetricComparison, ...] = ()
    """Generation metrics (judged, or the lexical estimates), each on the common queries
    scored in both runs."""
    generation_a: GenerationReport | None = None
    generation_b: GenerationReport | None = None
    not_applicable: tuple[str, ...] = ()
    """Common queries left out of the retrieval metrics because one run or both carry no
    document ids for them (still compared on generation metrics)."""


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


def _test(diffs: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float | None, float | None, float | None]:
    """p-value and CI of one column of differences (``None`` for no pairs)."""
    if diffs.shape[0] == 0:
        return None, None, None
    p_value = randomization_p_values(diffs, resamples, rng)
    low, high = bootstrap_ci(diffs, resamples, rng)
    return float(p_value[0]), float(low[0]), float(high[0])


def compare_generation(
    positions_a: Sequence[int],
    positions_b: Sequence[int],
    generation_a: GenerationReport,
    generation_b: GenerationReport,
    resamples: int,
    seed: int,
) -> tuple[MetricComparison, ...]:
    """Per generation metric of both reports: the common queries (``positions_a[i]`` and
    ``positions_b[i]`` are one query's records in each run) scored in both runs, their means, B − A, the paired
    randomization-test p-value and the bootstrap CI. Each metric has its own random stream
    (seeded by ``seed`` and its position), so one metric's pairs do not move another's draws."""
    out: list[MetricComparison] = []
    for j, metric_a in enumerate(generation_a.metrics):
        metric_b = generation_b.get(metric_a.key)
        if metric_b is None:
            continue
        pairs = [
            (sa, sb)
            for ia, ib in zip(positions_a, positions_b)
            if (sa := metric_a.scores[ia]) is not None and (sb := metric_b.scores[ib]) is not None
        ]
        a = np.array([p[0] for p in pairs], dtype=np.float64)
        b = np.array([p[1] for p in pairs], dtype=np.float64)
        rng = np.random.default_rng([seed, j])
        p_value, low, high = _test((b - a).reshape(-1, 1), resamples, rng)
        n = len(pairs)
        out.append(MetricComparison(
            metric_a.key,
            float(a.mean()) if n else None,
            float(b.mean()) if n else None,
            float((b - a).mean()) if n else None,
            p_value, low, high, n,
        ))
    return tuple(out)


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
    generation_a: GenerationReport | None = None,
    generation_b: GenerationReport | None = None,
) -> Comparison:
    """Score both runs, pair them on their common labelled queries (those without document ids
    in either run are ``not_applicable``) and test each metric; with
    both runs' generation reports (aligned with ``run_a`` / ``run_b``), each generation metric
    too, on the common queries scored in both runs."""
    index_a, index_b = index_run(run_a), index_run(run_b)
    common = [key for key in index_a if key in index_b]
    with_ids = [k for k in common if index_a[k].retrieved is not None and index_b[k].retrieved is not None]
    scores_a = score_records([index_a[k] for k in with_ids], qrels, ks)
    scores_b = score_records([index_b[k] for k in with_ids], qrels, ks)
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
            paired,
        )
        for j, key in enumerate(keys)
    )
    generation: tuple[MetricComparison, ...] = ()
    if generation_a is not None and generation_b is not None:
        position_a = {query_key(r): i for i, r in enumerate(run_a)}
        position_b = {query_key(r): i for i, r in enumerate(run_b)}
        generation = compare_generation(
            [position_a[k] for k in common], [position_b[k] for k in common],
            generation_a, generation_b, resamples, seed,
        )
    return Comparison(
        file_a=file_a,
        file_b=file_b,
        common=paired,
        only_in_a=tuple(k for k in index_a if k not in index_b),
        only_in_b=tuple(k for k in index_b if k not in index_a),
        unlabelled=tuple(k for k, ok in zip(with_ids, both) if not ok),
        resamples=resamples,
        seed=seed,
        metrics=metrics,
        generation=generation,
        not_applicable=tuple(k for k in common if index_a[k].retrieved is None or index_b[k].retrieved is None),
        generation_a=generation_a,
        generation_b=generation_b,
    )
