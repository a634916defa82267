"""Benchmark the judge-agreement bootstrap against the same figures one resample at a time.

Usage::

    python bench/agreement.py [--pairs 1000] [--resamples 2000] [--repeats 5] [--seed 0]

``ragmon`` is ``ragmon.offline.agreement.agreement`` (Spearman, Cohen's kappa and accuracy with
percentile intervals over ``--resamples`` resamples, drawn in chunks as arrays). The baseline
figures the same three statistics one resample at a time with scipy and scikit-learn, as a
reader would write it; it runs ``--resamples / 20`` resamples per call and is scaled up (its
cost is linear in resamples). Medians of ``--repeats`` calls, CPU seconds of this process
(``time.process_time``) and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats
from sklearn.metrics import accuracy_score, cohen_kappa_score

from ragmon.offline.agreement import agreement


def _pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    human = (rng.random(n) < 0.5).astype(float)
    judge = np.clip(0.25 + 0.5 * human + rng.normal(0.0, 0.25, n), 0.0, 1.0).round(2)
    return judge, human


def _one_at_a_time(judge: np.ndarray, human: np.ndarray, resamples: int, seed: int) -> None:
    picks = np.random.default_rng(seed).integers(0, len(judge), size=(resamples, len(judge)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in picks:
            verdicts = (judge[row] >= 0.5).astype(float)
            scipy.stats.spearmanr(judge[row], human[row])
            cohen_kappa_score(human[row], verdicts, labels=[0.0, 1.0])
            accuracy_score(human[row], verdicts)


def _cpu(call: Callable[[], object], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        began = time.process_time()
        call()
        seconds.append(time.process_time() - began)
    return statistics.median(seconds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--pairs", type=int, default=1000, help="labelled records")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls each")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    args = parser.parse_args(argv)
    judge, human = _pairs(args.pairs, args.seed)
    listed_judge, listed_human = judge.tolist(), human.tolist()
    ours = _cpu(lambda: agreement(listed_judge, listed_human, binary=True, resamples=args.resamples), args.repeats)
    part = max(1, args.resamples // 20)
    theirs = _cpu(lambda: _one_at_a_time(judge, human, part, args.seed), args.repeats) * args.resamples / part
    print(f"{args.pairs:,} pairs, {args.resamples:,} resamples, median of {args.repeats} calls (CPU seconds)")
    print(f"ragmon agreement        {ours:8.3f}")
    print(f"one resample at a time  {theirs:8.3f}  (scipy + scikit-learn, {part:,} resamples scaled up)")
    print(f"one-at-a-time / ragmon: {theirs / ours:.1f}x (above 1: ragmon spends less)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
