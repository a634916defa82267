"""Paired significance statistics for comparing two runs over the same queries (pure numpy).

Both functions take ``diffs``, an ``(n, m)`` matrix: one row per query, one column per metric,
each cell the score of run B minus run A. All columns share the same random draws, so one
pass answers every metric. Draws are made in chunks to keep memory bounded.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["randomization_p_values", "bootstrap_ci"]

FloatArray = npt.NDArray[np.float64]
_CHUNK_CELLS = 1 << 22


def _chunks(total: int, n: int) -> list[int]:
    size = max(1, _CHUNK_CELLS // max(n, 1))
    return [min(size, total - start) for start in range(0, total, size)]


def randomization_p_values(diffs: FloatArray, resamples: int, rng: np.random.Generator) -> FloatArray:
    """Two-sided paired randomization (sign-flip) test of mean difference = 0, per column.

    Each resample flips the sign of every query's difference with probability 1/2 (swapping
    which run produced it). p = (1 + #{|resampled mean| >= |observed mean|}) / (1 + resamples),
    which never reports 0 for a finite number of resamples. Returns ``(m,)`` p-values.
    """
    n, m = diffs.shape
    if n == 0:
        return np.full(m, np.nan)
    observed = np.abs(diffs.mean(axis=0))
    tolerance = 1e-12 * np.maximum(1.0, observed)
    extreme = np.zeros(m, dtype=np.int64)
    for size in _chunks(resamples, n):
        # int32, not int8: numpy buffers int8 draws per call, so chunking would change the stream
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int32).astype(np.float64) * 2.0 - 1.0
        means = np.abs(signs @ diffs) / n
        extreme += np.count_nonzero(means >= observed - tolerance, axis=0)
    return np.asarray((extreme + 1) / (resamples + 1), dtype=np.float64)


def bootstrap_ci(
    diffs: FloatArray, resamples: int, rng: np.random.Generator, level: float = 0.95
) -> tuple[FloatArray, FloatArray]:
    """Percentile bootstrap confidence interval of the mean difference, per column.

    Each resample draws n queries with replacement; the interval spans the central ``level``
    share of the resampled means. Returns ``(low, high)``, each ``(m,)``.
    """
    n, m = diffs.shape
    if n == 0:
        return np.full(m, np.nan), np.full(m, np.nan)
    means = np.empty((resamples, m), dtype=np.float64)
    done = 0
    for size in _chunks(resamples, n):
        picks = rng.integers(0, n, size=(size, n))
        picks += (np.arange(size) * n)[:, None]
        counts = np.bincount(picks.ravel(), minlength=size * n).reshape(size, n)
        means[done : done + size] = (counts @ diffs) / n
        done += size
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
