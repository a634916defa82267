"""Benchmark ragmon's batch retrieval metrics against pytrec_eval (and ranx, if installed).

Usage::

    python bench/metrics.py [--queries 100000] [--depth 100] [--repeats 5] [--seed 0]
                            [--ranx-repeats 3]

``--queries 2000 --repeats 1`` is a quick smoke run (most of its time is ranx's numba JIT
warm-up; ``--ranx-repeats 0`` leaves ranx out).

What is measured
----------------
One seeded synthetic dataset is generated once: ``--queries`` queries, each with a ranking of
``--depth`` string ids (``doc-0123456``) drawn with replacement from a per-query candidate pool,
so a few ids repeat within a ranking, and 1-30 graded labels (grades 0-3) per query, mostly on
documents near the top of the ranking; a minority of queries have no positive grade at all.
Every implementation computes the same five metrics at k = 1, 3, 5, 10: hit rate (trec_eval
``success``), MRR (``recip_rank``, whole ranking), recall, precision and NDCG (``ndcg_cut``).

Each timed call starts from data already in the implementation's natural input form, built
beforehand and not timed:

* ``ragmon score_queries`` - end to end from Python lists of ids and dicts of grades
  (encoding to arrays included).
* ``ragmon kernel only`` - ``score_encoded`` on arrays pre-encoded by ``encode``; shown to
  split ragmon's time between the Python encoding pass and the numpy kernel.
* ``pytrec_eval`` - building ``RelevanceEvaluator(qrels, measures)`` plus ``evaluate(run)``
  from dict-of-dicts ``qrels``/``run``. The run is the deduplicated ranking with strictly
  decreasing scores, so trec_eval's ordering is the ranking's order.
* ``ranx`` - ``Qrels(qrels)``, ``Run(run)`` and ``evaluate`` from the same dicts. A small
  warm-up call runs first so numba's JIT compilation is not timed. ranx may use several
  threads (numba); the others run on one.

ragmon and pytrec_eval are timed ``--repeats`` times, round-robin (one call of each per round);
ranx is timed afterwards, ``--ranx-repeats`` times (default 3: about 20 s a call at full size),
so that the peak RSS before ranx can be reported on its own. Every call follows a
``gc.collect()``; the dataset is built with the cyclic GC off and then ``gc.freeze()``-d, so
garbage-collection passes during the timed calls do not walk the benchmark's own fixtures. The
table reports the median, min and max wall-clock seconds per call.

How to read the ratio
---------------------
``vs pytrec_eval`` is pytrec_eval's median divided by that row's median: ``12.0x`` means that
row is twelve times faster than pytrec_eval on the same queries, ``0.5x`` that it is twice as
slow. The first call's results are checked once: ragmon's means must equal pytrec_eval's to
1e-9 over the labelled queries (ragmon leaves out a query with no positive grade, trec_eval
scores it 0, so the comparison is made on the queries ragmon scores); the script exits with
status 1 if they disagree. ranx's means are compared with pytrec_eval's over all queries, for
information only.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np
import numpy.typing as npt

from ragmon.metrics.batch import BatchScores, Encoded, encode, score_encoded, score_queries

KS: tuple[int, ...] = (1, 3, 5, 10)
POOL = 1000
"""Candidate pool per query; 100 draws with replacement from 1000 repeat ~5 ids a ranking."""
MAX_LABELS = 30
GRADE_P = (0.4, 0.3, 0.2, 0.1)
"""Probabilities of grades 0, 1, 2, 3 for a labelled document."""
NO_POSITIVE_SHARE = 0.08
"""Share of queries whose labels are all forced to grade 0."""
LABEL_FROM_RUN = 0.6
"""Share of labels placed on a retrieved document (rank ~ geometric, so near the top)."""
TOLERANCE = 1e-9

PYTREC_MEASURES: dict[str, str] = {"hit_rate": "success", "recall": "recall", "precision": "P",
                                   "ndcg": "ndcg_cut"}
RANX_NAMES: dict[str, str] = {"hit_rate": "hit_rate", "recall": "recall",
                              "precision": "precision", "ndcg": "ndcg"}


@dataclass(frozen=True)
class Dataset:
    """Synthetic queries in the natural input form of each implementation."""

    qids: list[str]
    rankings: list[list[str]]
    relevances: list[dict[str, int]]
    qrels: dict[str, dict[str, int]]
    """trec_eval-style ``qid -> doc -> grade``; shares the dicts of ``relevances``."""
    run: dict[str, dict[str, float]]
    """``qid -> doc -> score``: the deduplicated ranking, scores strictly decreasing."""
    duplicates: int


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of each repeat of one implementation."""

    name: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


# --------------------------------------------------------------------------- data


def _id_names(ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.intp]]:
    """One shared ``str`` per distinct document number, and each input's index into them."""
    unique, inverse = np.unique(ids, return_inverse=True)
    names = np.array([f"doc-{d:07d}" for d in unique.tolist()], dtype=object)
    return names, inverse.ravel()


def _split(values: list[Any], counts: npt.NDArray[np.int64]) -> list[list[Any]]:
    ends = np.cumsum(counts).tolist()
    starts = [0, *ends[:-1]]
    return [values[s:e] for s, e in zip(starts, ends)]


def make_dataset(queries: int, depth: int, seed: int) -> Dataset:
    """Generate the seeded synthetic dataset (see the module docstring)."""
    rng = np.random.default_rng(seed)
    corpus = max(4 * POOL, min(2_000_000, 20 * queries))
    base = rng.integers(0, corpus - POOL, queries)
    ranked = base[:, None] + rng.integers(0, POOL, (queries, depth))
    n_labels = rng.integers(1, MAX_LABELS + 1, queries)
    owner = np.repeat(np.arange(queries), n_labels)
    rank = np.minimum(rng.geometric(0.08, owner.size) - 1, depth - 1)
    from_run = rng.random(owner.size) < LABEL_FROM_RUN
    unretrieved = base[owner] + rng.integers(0, POOL, owner.size)
    label_docs = np.where(from_run, ranked[owner, rank], unretrieved)
    grades = rng.choice(len(GRADE_P), size=owner.size, p=GRADE_P)
    grades[(rng.random(queries) < NO_POSITIVE_SHARE)[owner]] = 0

    names, inverse = _id_names(np.concatenate([ranked.ravel(), label_docs]))
    rankings = names[inverse[: ranked.size]].reshape(queries, depth).tolist()
    label_names = _split(names[inverse[ranked.size :]].tolist(), n_labels)
    label_grades = _split(grades.tolist(), n_labels)
    relevances = [dict(zip(d, g)) for d, g in zip(label_names, label_grades)]
    qids = [f"q{i:07d}" for i in range(queries)]
    scores = [float(depth - r) for r in range(depth)]  # strictly decreasing, shared floats
    run = {q: dict(zip(dict.fromkeys(r), scores)) for q, r in zip(qids, rankings)}
    sorted_ids = np.sort(ranked, axis=1)
    duplicates = int((sorted_ids[:, 1:] == sorted_ids[:, :-1]).sum())
    return Dataset(qids, rankings, relevances, dict(zip(qids, relevances)), run, duplicates)


# --------------------------------------------------------------------------- implementations


def pytrec_measures(ks: Sequence[int]) -> set[str]:
    cut = ",".join(map(str, ks))
    return {f"{m}.{cut}" for m in PYTREC_MEASURES.values()} | {"recip_rank"}


def pytrec_key(key: str) -> str:
    """trec_eval's name for a ragmon key: ``ndcg@5`` -> ``ndcg_cut_5``, ``mrr`` -> ``recip_rank``."""
    if key == "mrr":
        return "recip_rank"
    name, k = key.split("@")
    return f"{PYTREC_MEASURES[name]}_{k}"


def ranx_key(key: str) -> str:
    if key == "mrr":
        return "mrr"
    name, k = key.split("@")
    return f"{RANX_NAMES[name]}@{k}"


def run_pytrec(pytrec_eval: Any, data: Dataset, ks: Sequence[int]) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(data.qrels, pytrec_measures(ks))
    return evaluator.evaluate(data.run)  # type: ignore[no-any-return]


def run_ranx(ranx: Any, qrels: Mapping[str, Mapping[str, int]],
             run: Mapping[str, Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's uint64 -> int64 cast notice inside ranx
        result = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), [ranx_key(k) for k in keys])
    return {k: float(result[ranx_key(k)]) for k in keys}


def warm_up_ranx(ranx: Any, data: Dataset, keys: Sequence[str]) -> float:
    """Run ranx once on a few queries so numba compiles before timing; return the seconds."""
    few = data.qids[:50]
    start = time.perf_counter()
    run_ranx(ranx, {q: data.qrels[q] for q in few}, {q: data.run[q] for q in few}, keys)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- checks


def pytrec_means(results: Mapping[str, Mapping[str, float]], qids: Sequence[str],
                 keys: Sequence[str]) -> dict[str, float]:
    return {k: statistics.fmean(results[q][pytrec_key(k)] for q in qids) for k in keys}


def max_difference(a: Mapping[str, float | None], b: Mapping[str, float]) -> tuple[float, str]:
    worst = max(b, key=lambda k: abs((a[k] or 0.0) - b[k]))
    return abs((a[worst] or 0.0) - b[worst]), worst


def check_agreement(scores: BatchScores, results: Mapping[str, Mapping[str, float]],
                    data: Dataset) -> bool:
    """Compare ragmon's means with pytrec_eval's on the queries ragmon scores; print the result."""
    keys = list(scores.values)
    labelled = [q for q, ok in zip(data.qids, scores.labelled.tolist()) if ok]
    diff, worst = max_difference(scores.means(), pytrec_means(results, labelled, keys))
    ok = diff <= TOLERANCE
    verdict = "agree" if ok else "DISAGREE"
    print(f"agreement: ragmon vs pytrec_eval means over {len(labelled):,} labelled queries, "
          f"{len(keys)} metrics: {verdict} (max |diff| {diff:.2e} on {worst}, tolerance "
          f"{TOLERANCE:g})")
    return ok


# --------------------------------------------------------------------------- timing


def time_rounds(calls: Mapping[str, Callable[[], object]],
                repeats: int) -> tuple[list[Timing], dict[str, object]]:
    """Time each call ``repeats`` times, round-robin, after a ``gc.collect()`` each.

    Also return each call's first result, for the agreement checks.
    """
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    first: dict[str, object] = {}
    for round_ in range(repeats):
        for name, call in calls.items():
            gc.collect()
            start = time.perf_counter()
            result = call()
            seconds[name].append(time.perf_counter() - start)
            first.setdefault(name, result)
            del result
        print(f"  round {round_ + 1}/{repeats}: "
              + ", ".join(f"{n} {s[-1]:.3f}s" for n, s in seconds.items()), flush=True)
    return [Timing(name, s) for name, s in seconds.items()], first


def print_table(timings: Sequence[Timing], queries: int, baseline: str | None) -> None:
    base = next((t.median for t in timings if t.name == baseline), None)
    head = (f"{'implementation':<26}{'median s':>10}{'min s':>9}{'max s':>9}"
            f"{'queries/s':>13}{'vs pytrec_eval':>16}")
    print(head)
    print("-" * len(head))
    for t in timings:
        ratio = f"{base / t.median:.2f}x" if base is not None else "n/a"
        print(f"{t.name:<26}{t.median:>10.4f}{min(t.seconds):>9.4f}{max(t.seconds):>9.4f}"
              f"{queries / t.median:>13,.0f}{ratio:>16}")
    print("(vs pytrec_eval = pytrec_eval median / row median; above 1 means faster than "
          "pytrec_eval)")


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB else


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--queries", type=int, default=100_000, help="number of queries")
    parser.add_argument("--depth", type=int, default=100, help="retrieved ids per query")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per implementation")
    parser.add_argument("--ranx-repeats", type=int, default=3,
                        help="timed ranx calls, at most --repeats (ranx is slow: ~20 s a call "
                             "at full size)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed")
    args = parser.parse_args(argv)
    if args.queries < 1 or args.repeats < 1 or args.ranx_repeats < 0:
        parser.error("--queries and --repeats must be at least 1, --ranx-repeats at least 0")
    if args.depth < max(KS):
        parser.error(f"--depth must be at least {max(KS)}")
    args.ranx_repeats = min(args.ranx_repeats, args.repeats)
    return args


def import_optional(name: str) -> tuple[Any, str | None]:
    try:
        return __import__(name), None
    except Exception as exc:  # ImportError, or a broken numba/llvmlite install
        return None, f"{type(exc).__name__}: {exc}"


def build(args: argparse.Namespace) -> Dataset:
    """Build the dataset with the cyclic GC off, then freeze it out of later collections."""
    start = time.perf_counter()
    gc.disable()
    try:
        data = make_dataset(args.queries, args.depth, args.seed)
    finally:
        gc.enable()
    gc.collect()
    gc.freeze()  # the fixture is not the code under test: keep it out of timed GC passes
    positive = sum(any(g > 0 for g in r.values()) for r in data.relevances)
    labels = sum(map(len, data.relevances))
    print(f"dataset: {args.queries:,} queries x {args.depth} ids (seed {args.seed}), "
          f"{data.duplicates:,} repeated ids, {labels:,} labels, "
          f"{args.queries - positive:,} queries with no positive grade; "
          f"ks={','.join(map(str, KS))}; built in {time.perf_counter() - start:.1f}s (not timed)")
    return data


def time_ranx(ranx: Any, data: Dataset, keys: Sequence[str], repeats: int,
              pytrec_results: Mapping[str, Mapping[str, float]] | None) -> list[Timing]:
    """Warm ranx up, time it, and compare its means with pytrec_eval's (information only)."""
    warm = warm_up_ranx(ranx, data, keys)
    print(f"ranx: numba JIT warm-up on 50 queries took {warm:.1f}s, excluded from timings; "
          f"timing {repeats} call(s) ...", flush=True)
    timings, first = time_rounds({"ranx": lambda: run_ranx(ranx, data.qrels, data.run, keys)},
                                 repeats)
    if pytrec_results is not None:
        means: dict[str, float] = first["ranx"]  # type: ignore[assignment]
        diff, worst = max_difference(means, pytrec_means(pytrec_results, data.qids, keys))
        print(f"ranx vs pytrec_eval means over all {len(data.qids):,} queries (information): "
              f"max |diff| {diff:.2e} on {worst}")
    return timings


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"python {platform.python_version()}, numpy {np.__version__}, ragmon "
          f"{version('ragmon')}, pytrec_eval-terrier {version('pytrec-eval-terrier')}, ranx "
          f"{version('ranx')}; {os.cpu_count()} CPUs")
    data = build(args)
    encoded: Encoded = encode(data.rankings, data.relevances, max(KS))
    calls: dict[str, Callable[[], object]] = {
        "ragmon score_queries": lambda: score_queries(data.rankings, data.relevances, KS),
        "ragmon kernel only": lambda: score_encoded(encoded, KS),
    }
    pytrec_eval, pytrec_error = import_optional("pytrec_eval")
    if pytrec_eval is None:
        print(f"pytrec_eval: skipped, import failed ({pytrec_error}); no ratios or agreement check")
    else:
        calls["pytrec_eval"] = lambda: run_pytrec(pytrec_eval, data, KS)

    print(f"timing {args.repeats} round(s) of {', '.join(calls)} ...", flush=True)
    timings, first = time_rounds(calls, args.repeats)
    scores: BatchScores = first["ragmon score_queries"]  # type: ignore[assignment]
    pytrec_results: dict[str, dict[str, float]] | None = first.get("pytrec_eval")  # type: ignore[assignment]
    agree = pytrec_results is None or check_agreement(scores, pytrec_results, data)
    rss_before_ranx = peak_rss_mib()

    if args.ranx_repeats == 0:
        print("ranx: skipped (--ranx-repeats 0)")
    elif (ranx := import_optional("ranx"))[0] is None:
        print(f"ranx: skipped, import failed ({ranx[1]})")
    else:
        timings += time_ranx(ranx[0], data, list(scores.values), args.ranx_repeats,
                             pytrec_results)

    print()
    print(f"{args.queries:,} queries x {args.depth} ids, {len(scores.values)} metric values per "
          f"query, seconds per call:")
    print_table(timings, args.queries, "pytrec_eval" if pytrec_eval is not None else None)
    by_name = {t.name: t.median for t in timings}
    if "pytrec_eval" in by_name:
        speedup = by_name["pytrec_eval"] / by_name["ragmon score_queries"]
        print(f"ragmon score_queries is {speedup:.1f}x faster than pytrec_eval (median / median)")
    if "ranx" in by_name:
        print(f"ranx: numba JIT compilation excluded (warm-up above), numba threads "
              f"{_numba_threads()}; ragmon and pytrec_eval run on one thread")
    print(f"peak RSS: {rss_before_ranx:,.0f} MiB before ranx (dataset, ragmon, pytrec_eval), "
          f"{peak_rss_mib():,.0f} MiB at the end")
    return 0 if agree else 1


def _numba_threads() -> str:
    try:
        import numba

        return str(numba.get_num_threads())
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
