"""``ragmon.offline.scan``: one pass over a run gives the scores the batch core gives the whole
run, a reference per record, and the lexical estimate with each record's reason for none."""

from __future__ import annotations

import random

from ragmon.metrics.batch import score_queries
from ragmon.offline.records import EvalRecord, Qrels
from ragmon.offline.scan import scan_run


def _record(i: int, rng: random.Random) -> EvalRecord:
    ids = None if i % 7 == 3 else [f"d{rng.randrange(30)}" for _ in range(rng.randint(0, 12))]
    grades = None if i % 5 == 1 else {f"d{rng.randrange(30)}": rng.randint(0, 3) for _ in range(rng.randint(0, 4))}
    return EvalRecord("run.jsonl", i + 1, None if i % 4 == 0 else f"q{i}", None, ids, grades)


def test_chunks_give_the_whole_run_s_scores_and_a_reference_per_record() -> None:
    rng = random.Random(3)
    records = [_record(i, rng) for i in range(500)]
    qrels = Qrels(by_id={"q2": {"d1": 2}, "q6": {"d0": 1}})
    whole = score_queries(
        [r.retrieved for r in records if r.retrieved is not None],
        [qrels.by_id.get(r.query_id or "", r.grades or {}) for r in records if r.retrieved is not None],
        (1, 3, 10),
    )
    for chunk in (1, 7, 64, 10_000):
        scan = scan_run(iter(records), qrels, (10, 1, 3), chunk=chunk)
        assert scan.scores.ks == (1, 3, 10)
        assert (scan.scores.labelled == whole.labelled).all()
        assert all((scan.scores.values[k] == whole.values[k]).all() for k in whole.values)
        assert [(r.line, r.query_id, r.has_ids) for r in scan.refs] == [(r.line, r.query_id, r.retrieved is not None) for r in records]
        assert scan.not_applicable == sum(r.retrieved is None for r in records)
        assert scan.lexical is None


def test_the_lexical_estimate_says_why_a_record_has_none() -> None:
    records = [
        EvalRecord("r", 1, "a", None, ["d"], None, answer="Paris is the capital of France.", contexts=["Paris is the capital of France."]),
        EvalRecord("r", 2, "b", None, ["d"], None),  # no answer
        EvalRecord("r", 3, "c", None, ["d"], None, answer="...", contexts=["Anything."]),  # no content sentence
    ]
    report = scan_run(records, None, (1,), lexical=True).estimates()
    [metric] = report.metrics
    assert metric.key == "faithfulness_lexical" and report.mode == "lexical"
    assert [o.score for o in metric.outcomes] == [1.0, None, None]
    assert [o.skip for o in metric.outcomes] == [None, "not_applicable", "no_score"]
