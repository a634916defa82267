"""The shape of /metrics is a promise (docs/reference/metrics.md): dashboards and alert rules depend on
every family's name, HELP text, TYPE, label names, the values of its enumerated labels and its
histogram buckets. One golden file pins them, from the sidecar's own registry with one record
of each kind observed, so that every family has samples.

After an intended change, regenerate the golden file and review its diff::

    RAGMON_UPDATE_GOLDEN=1 python -m pytest -q tests/test_metric_families.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from server_helpers import scrape

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config
from ragmon.judge.prompts import TOXICITY_CATEGORIES
from ragmon.model import RagRecord
from ragmon.scoring.records import PricedCall, RecordScores, RetrievalScore

GOLDEN = Path(__file__).parent / "data" / "metric_families.txt"
TRAFFIC_LABELS = frozenset({"service", "variant", "model", "version", "decoder", "pipeline"})
"""Labels whose values come from traffic (or the release, or the build: ``decoder``, ``pipeline``): only their
names are pinned."""
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _observe_one_of_each(car: Sidecar) -> None:
    """A failed request with every stage, a labelled retrieval and priced, unpriced and
    usage-less model calls; an unlabelled, fully priced one (cost per request); and a judgement
    of the first with every generation score and the judge's retrieval score."""
    metrics, now = car.metrics, 10.0
    ks = car.config.scoring.k
    at_k = {k: 1.0 for k in ks}
    stages = {"retrieval": 0.02, "rerank": 0.01, "generation": 0.3, "embedding": 0.005}
    failed = RagRecord(
        trace_id=(1).to_bytes(16, "big"), service="rag-api", variant="A", start_ns=0, end_ns=4 * 10**8,
        error=True, stage_seconds=stages,  # type: ignore[arg-type]
    )
    calls = (
        PricedCall("gpt-4o-mini", "generation", 100, 20, 1e-5, "table"),
        PricedCall("house-model", "generation", 50, 5, None, "unpriced"),
        PricedCall("streamed", "generation", 0, 0, None, "no_usage"),
    )
    metrics.observe(failed, RecordScores((RetrievalScore("label", 1.0, at_k, at_k, at_k, at_k),), False, calls), now)
    unlabelled = RagRecord(trace_id=(2).to_bytes(16, "big"), service="rag-api", variant="A", start_ns=0, end_ns=10**8)
    metrics.observe(unlabelled, RecordScores((), True, calls[:1]), now)
    judged = RetrievalScore("judge", 0.5, at_k, {}, at_k, {})
    scores = {
        "faithfulness": 1.0, "answer_relevance": 0.5, "context_relevance": 0.5, "answer_correctness": 1.0,
        "coherence": 0.75, "toxicity": 2 / 3,
    }
    toxic = {category: category == "profanity" for category in TOXICITY_CATEGORIES}
    metrics.observe_judged(failed, "judge", "llm", scores, judged, now, toxic)
    feedback = RetrievalScore("feedback", 1.0, at_k, at_k, at_k, at_k)
    metrics.observe_feedback("rag-api", "A", failed.trace_id.hex(), feedback, {"thumbs": 1.0}, now)


def family_shapes(exposition: str) -> str:
    """Every ``# HELP`` and ``# TYPE`` line; per sample name, its label names (in order) and
    the values of its non-traffic labels (``le``, ``quantile``, ``window``, ``stage``, ...; an
    empty value as ``""``). The text format sorts label names, so their order is not pinned."""
    out: list[str] = []
    shapes: dict[str, tuple[list[tuple[str, ...]], dict[str, list[str]]]] = {}
    for line in exposition.splitlines():
        if line.startswith("#"):
            out.append(line)
            continue
        match = _SAMPLE.match(line)
        assert match is not None, line
        name, labels = match.groups()
        pairs = _LABEL.findall(labels or "")
        if name not in shapes:
            shapes[name] = ([], {})
            out.append(name)  # filled in below
        names, values = shapes[name]
        label_names = tuple(k for k, _ in pairs)
        if label_names not in names:
            names.append(label_names)
        for k, v in pairs:
            if k not in TRAFFIC_LABELS and v not in values.setdefault(k, []):
                values[k].append(v)
    lines = []
    for line in out:
        if line.startswith("#"):
            lines.append(line)
            continue
        names, values = shapes[line]
        lines.extend(f"{line}{{{','.join(n)}}}" for n in names)
        lines.extend(f"  {k}: " + " ".join(v or '""' for v in vs) for k, vs in values.items())
    return "\n".join(lines) + "\n"


def test_metric_families_names_help_types_labels_and_buckets_match_the_golden_file() -> None:
    car = Sidecar(Config(), clock=lambda: 10.0, wall=lambda: 1_700_000_000.0)
    _observe_one_of_each(car)
    body, _ = scrape(car.registry)
    got = family_shapes(body.decode())
    if os.environ.get("RAGMON_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "metric families changed; see this module's docstring to regenerate"
