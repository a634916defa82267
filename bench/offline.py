"""Benchmark: ``ragmon eval`` from files, as a user runs it, against pytrec_eval and ranx.

Usage::

    python bench/offline.py [--queries 100000] [--docs 50] [--repeats 3] [--tools ragmon-trec,ragmon-jsonl,pytrec_eval,ranx]

Writes one run of ``--queries`` queries × ``--docs`` retrieved documents in a temporary
directory, the same run twice: a TREC run file with a TREC qrels file (what trec_eval,
pytrec_eval and ranx read) and a JSON Lines file of ragmon records whose labels are in each
record (``relevance``: what a RAG team's eval set holds). About five labels a query, graded 1-3,
half of them retrieved. Then each tool scores it in its own process, as a user runs it, the
same metrics at k = 1, 3, 5, 10 (hit rate, MRR, recall, precision, NDCG):

* ``ragmon-trec``: ``ragmon eval RUN.trec --qrels QRELS --format json``;
* ``ragmon-jsonl``: ``ragmon eval RUN.jsonl --format json``;
* ``pytrec_eval``: ``parse_qrel`` and ``parse_run`` on the TREC files, ``RelevanceEvaluator``
  (``success``, ``recip_rank``, ``recall``, ``P``, ``ndcg_cut``), the means over queries;
* ``ranx``: ``Qrels.from_file`` and ``Run.from_file``, ``evaluate`` (numba: its kernels are
  compiled once, in an untimed run on a small file, and cached, as a user's second run finds them).

Each figure is the median of ``--repeats`` runs in rotating order: CPU seconds (user + system,
from the child's rusage) and peak RSS (``ru_maxrss``), with ratios to pytrec_eval, and the
input files' sizes. The means of every tool are checked against pytrec_eval's to 1e-9 (a
mismatch exits 1). Goals (issue 27): ragmon ≥ 2x less CPU than pytrec_eval end to end at 100k
and 1M queries; peak RSS at 1M within 3x the input file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KS = (1, 3, 5, 10)
TOOLS = ("ragmon-trec", "ragmon-jsonl", "pytrec_eval", "ranx")

_PYTREC = """\
import json, sys
import pytrec_eval
with open(sys.argv[1]) as f:
    qrel = pytrec_eval.parse_qrel(f)
with open(sys.argv[2]) as f:
    run = pytrec_eval.parse_run(f)
ks = ",".join(map(str, {ks}))
measures = {{"success." + ks, "recip_rank", "recall." + ks, "P." + ks, "ndcg_cut." + ks}}
per_query = pytrec_eval.RelevanceEvaluator(qrel, measures).evaluate(run)
names = {{"success": "hit_rate", "recip_rank": "mrr", "recall": "recall", "P": "precision", "ndcg_cut": "ndcg"}}
sums = {{}}
for scores in per_query.values():
    for measure, value in scores.items():
        sums[measure] = sums.get(measure, 0.0) + value
means = {{}}
for measure, total in sums.items():
    name, _, k = measure.partition("_") if measure != "recip_rank" else (measure, "", "")
    if measure.startswith("ndcg_cut_"):
        name, k = "ndcg_cut", measure.removeprefix("ndcg_cut_")
    means[names[name] + ("@" + k if k else "")] = total / len(per_query)
print(json.dumps({{"metrics": means}}))
"""

_RANX = """\
import json, sys
from ranx import Qrels, Run, evaluate
qrels = Qrels.from_file(sys.argv[1], kind="trec")
run = Run.from_file(sys.argv[2], kind="trec")
ks = {ks}
metrics = [f"{{m}}@{{k}}" for m in ("hit_rate", "recall", "precision", "ndcg") for k in ks] + ["mrr"]
means = evaluate(qrels, run, metrics)
print(json.dumps({{"metrics": {{k: float(v) for k, v in means.items()}}}}))
"""


@dataclass(frozen=True)
class Files:
    trec_run: Path
    trec_qrels: Path
    jsonl: Path


def write_files(directory: Path, queries: int, docs: int, seed: int = 7) -> Files:
    """The same run as TREC run + qrels and as JSON Lines records with their labels."""
    rng = random.Random(seed)
    files = Files(directory / "run.trec", directory / "qrels.txt", directory / "run.jsonl")
    with open(files.trec_run, "w") as run, open(files.trec_qrels, "w") as qrels, open(files.jsonl, "w") as records:
        for q in range(queries):
            qid = f"q{q}"
            ranked = [f"d{rng.randrange(1_000_000)}" for _ in range(docs)]
            ranked = list(dict.fromkeys(ranked))  # a document once per query, as TREC requires
            labels = {doc: rng.randint(1, 3) for doc in rng.sample(ranked, min(3, len(ranked)))}
            while len(labels) < 5:
                labels.setdefault(f"d{rng.randrange(1_000_000)}", rng.randint(1, 3))
            run.writelines(f"{qid} Q0 {doc} {rank} {len(ranked) - rank}.5 bench\n" for rank, doc in enumerate(ranked, 1))
            qrels.writelines(f"{qid} 0 {doc} {grade}\n" for doc, grade in labels.items())
            records.write(json.dumps({"query_id": qid, "retrieved_document_ids": ranked, "relevance": labels}) + "\n")
    return files


def argv_for(tool: str, files: Files, work: Path) -> list[str]:
    if tool == "ragmon-trec":
        return [*ragmon_script(), "eval", str(files.trec_run), "--qrels", str(files.trec_qrels), "--format", "json"]
    if tool == "ragmon-jsonl":
        return [*ragmon_script(), "eval", str(files.jsonl), "--format", "json"]
    script = work / f"score_{tool}.py"  # not named as the module it imports
    script.write_text((_PYTREC if tool == "pytrec_eval" else _RANX).format(ks=KS))
    return [sys.executable, str(script), str(files.trec_qrels), str(files.trec_run)]


def ragmon_script() -> list[str]:
    script = Path(sys.executable).with_name("ragmon")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ragmon"]


@dataclass(frozen=True)
class Measured:
    cpu_s: float
    wall_s: float
    peak_mb: float
    means: dict[str, float]


def measure(argv: Sequence[str]) -> Measured:
    """Run ``argv`` to its end: its CPU (user + system), wall time, peak RSS and printed means."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0), err.seek(0)
        text, problems = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {problems[-1000:]}")
    metrics = json.loads(text)["metrics"]
    return Measured(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024 / 1e6,
                    {k: v for k, v in metrics.items() if v is not None})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    args = parser.parse_args(argv)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        parser.error(f"unknown tools: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(prefix="ragmon-offline-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        files = write_files(work, args.queries, args.docs)
        sizes = {name: os.path.getsize(path) / 1e6 for name, path in
                 (("TREC run", files.trec_run), ("TREC qrels", files.trec_qrels), ("JSONL", files.jsonl))}
        print(f"{args.queries:,} queries x {args.docs} documents written in {time.perf_counter() - started:.1f} s: "
              + ", ".join(f"{name} {mb:,.1f} MB" for name, mb in sizes.items()))
        results: dict[str, list[Measured]] = {tool: [] for tool in tools}
        if "ranx" in tools:  # numba compiles ranx's kernels on first use and caches them: warm it
            small = work / "small"
            small.mkdir()
            measure(argv_for("ranx", write_files(small, 100, args.docs), small))
        for i in range(args.repeats):
            for tool in tools[i % len(tools):] + tools[: i % len(tools)]:
                results[tool].append(measure(argv_for(tool, files, work)))
    med = statistics.median
    reference = results.get("pytrec_eval")
    base_cpu = med(m.cpu_s for m in reference) if reference else None
    print(f"median of {args.repeats}; CPU = user + system of the process, RSS = its peak")
    print(f"  {'tool':14} {'CPU s':>8} {'wall s':>8} {'peak MB':>9}  {'CPU vs pytrec_eval':>18}  {'RSS / input':>11}")
    input_of = {"ragmon-trec": sizes["TREC run"] + sizes["TREC qrels"], "ragmon-jsonl": sizes["JSONL"],
                "pytrec_eval": sizes["TREC run"] + sizes["TREC qrels"], "ranx": sizes["TREC run"] + sizes["TREC qrels"]}
    for tool, runs in results.items():
        cpu, wall, peak = med(m.cpu_s for m in runs), med(m.wall_s for m in runs), med(m.peak_mb for m in runs)
        ratio = f"{base_cpu / cpu:5.2f}x less" if base_cpu else "-"
        print(f"  {tool:14} {cpu:8.2f} {wall:8.2f} {peak:9.0f}  {ratio:>18}  {peak / input_of[tool]:10.2f}x")
    failed = False
    if reference:
        expected = reference[0].means
        for tool, runs in results.items():
            got = runs[0].means
            wrong = [k for k in expected if k not in got or abs(got[k] - expected[k]) > 1e-9]
            if wrong:
                failed = True
                print(f"  {tool}: means differ from pytrec_eval's on {', '.join(wrong[:5])}"
                      + "".join(f" ({k}: {got.get(k)} vs {expected[k]})" for k in wrong[:2]))
        if not failed:
            print(f"  means: every tool agrees with pytrec_eval to 1e-9 on {len(expected)} metrics")
    print(f"  (this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB peak)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
