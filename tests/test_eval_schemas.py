"""Datasets as users hold them (SPEC §8a): Ragas 0.1 and 0.2+, DeepEval test cases and ragmon's
own records, as JSON Lines, a JSON array, CSV and Parquet; TREC run files; records without
document ids (retrieval not applicable, counted); ``--schema``; one warning per file and ignored
key. Run through the real command line (``cli_helpers.ragmon``) with exact expected output.

The Ragas and DeepEval files are built in their documented shapes: Ragas 0.1's evaluation
dataset columns (``question``, ``answer``, ``contexts``, ``ground_truth`` / ``ground_truths``),
Ragas 0.2's ``SingleTurnSample`` fields (``user_input``, ``retrieved_contexts``,
``reference_contexts``, ``response``, ``reference``) and DeepEval's ``LLMTestCase`` fields
(``input``, ``actual_output``, ``expected_output``, ``context``, ``retrieval_context``).
"""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.parquet
import pytest
import pytrec_eval
from cli_helpers import TIMEOUT, ragmon, write_jsonl

from ragmon.metrics.batch import metric_keys
from ragmon.offline import tables
from ragmon.offline.files import container, read_records
from ragmon.offline.records import EvalRecord
from ragmon.offline.schemas import SCHEMAS, detect

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

# --------------------------------------------------------------------------------------------
# the datasets, in each tool's own keys

SUPPORTED = "The first Super Bowl was played on January 15, 1967."
UNSUPPORTED = "Bananas grow quickly in warm weather."
QUERIES = ["When was the first Super Bowl?", "Who won the most Super Bowls?"]
ANSWERS = [SUPPORTED, UNSUPPORTED]  # lexical faithfulness 1 and 0: the estimate's mean is 0.5
CONTEXTS = [
    ["The first Super Bowl was played on January 15, 1967, in Los Angeles."],
    ["The Green Bay Packers won the first two Super Bowls.", "The Patriots and the Steelers have six each."],
]
REFERENCES = ["January 15, 1967", "The Patriots and the Steelers, six each"]
GOLD_CONTEXTS = [["Super Bowl I: January 15, 1967."], ["Super Bowl titles: Patriots 6, Steelers 6."]]

RAGAS_01 = [
    {"question": q, "answer": a, "contexts": c, "ground_truth": r}
    for q, a, c, r in zip(QUERIES, ANSWERS, CONTEXTS, REFERENCES)
]
RAGAS_02 = [
    {"user_input": q, "retrieved_contexts": c, "reference_contexts": g, "response": a, "reference": r}
    for q, a, c, r, g in zip(QUERIES, ANSWERS, CONTEXTS, REFERENCES, GOLD_CONTEXTS)
]
DEEPEVAL = [
    {"input": q, "actual_output": a, "expected_output": r, "context": g, "retrieval_context": c}
    for q, a, c, r, g in zip(QUERIES, ANSWERS, CONTEXTS, REFERENCES, GOLD_CONTEXTS)
]
RAGMON = [
    {"query": q, "answer": a, "contexts": c, "reference_answer": r}
    for q, a, c, r in zip(QUERIES, ANSWERS, CONTEXTS, REFERENCES)
]
DATASETS = {"ragas_0.1": RAGAS_01, "ragas_0.2": RAGAS_02, "deepeval": DEEPEVAL, "ragmon": RAGMON}

REFERENCE_CONTEXTS_WARNING = (
    '"reference_contexts" is ignored: the contexts the reference answer was written from (Ragas\'s '
    "context recall and precision against a reference); ragmon's metrics do not use them"
)
CONTEXT_WARNING = (
    '"context" is ignored: the ideal, ground-truth context (DeepEval\'s contextual recall and '
    "hallucination); ragmon's metrics do not use it"
)
WARNINGS = {"ragas_0.1": [], "ragas_0.2": [REFERENCE_CONTEXTS_WARNING], "deepeval": [CONTEXT_WARNING], "ragmon": []}
"""What each dataset's file gets on stderr (after ``ragmon eval: warning: FILE: ``)."""

CONTAINERS = ("jsonl", "json", "csv", "parquet")
KS = (1, 3, 5, 10)


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` in the container the suffix names: JSON Lines, a JSON array, CSV (lists and
    objects as JSON text, None as an empty cell) or Parquet."""
    suffix = path.suffix
    if suffix == ".jsonl":
        return write_jsonl(path, rows)
    if suffix == ".json":
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    elif suffix == ".csv":
        columns = list(dict.fromkeys(key for row in rows for key in row))
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({
                    k: "" if v is None else json.dumps(v) if isinstance(v, (list, dict)) else v
                    for k, v in row.items()
                })
    else:
        assert suffix == ".parquet"
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def expected_records(path: Path, query_ids: list[str | None] | None = None) -> list[EvalRecord]:
    ids = query_ids or [None, None]
    return [
        EvalRecord(str(path), row, qid, q, None, None, a, c, r)
        for row, (qid, q, a, c, r) in enumerate(zip(ids, QUERIES, ANSWERS, CONTEXTS, REFERENCES), start=1)
    ]


def null_metrics() -> dict[str, None]:
    return dict.fromkeys(metric_keys(KS))


def no_ids_report(path: Path, records: int = 2, thresholds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON report of a file whose records carry no document ids (no --judge)."""
    return {
        "queries": 0, "unlabelled": 0, "not_applicable": records, "records": records,
        "files": [str(path)], "metrics": null_metrics(),
        "estimates": {"faithfulness_lexical": 0.5},
        "estimated": {"faithfulness_lexical": {"scored": 2, "failed": 0, "skipped": 0, "failures": {}, "skips": {}}},
        "thresholds": thresholds or [], "passed": not thresholds,
    }


def warning_lines(command: str, path: Path, warnings: list[str]) -> str:
    return "".join(f"ragmon {command}: warning: {path}: {w}\n" for w in warnings)


def one_line_error(result: subprocess.CompletedProcess[str], text: str, command: str = "eval") -> None:
    """Exit 2, nothing on stdout, exactly this one error line on stderr."""
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"ragmon {command}: error: {text}\n")


# --------------------------------------------------------------------------------------------
# every schema in every container, through the command line


@pytest.mark.parametrize("fmt", CONTAINERS)
@pytest.mark.parametrize("dataset", list(DATASETS))
def test_each_schema_in_each_container_is_read_and_judged(tmp_path: Path, dataset: str, fmt: str) -> None:
    path = write(tmp_path / f"{dataset}.{fmt}", DATASETS[dataset])
    assert list(read_records(str(path))) == expected_records(path)
    result = ragmon("eval", path, "--format", "json")
    assert (result.returncode, json.loads(result.stdout)) == (0, no_ids_report(path))
    assert result.stderr == warning_lines("eval", path, WARNINGS[dataset])


def test_ragas_01_ground_truths_one_or_several(tmp_path: Path) -> None:
    """Early Ragas 0.1 datasets hold a list of reference answers: one is that answer, several
    are joined by a blank line, none is no reference."""
    rows = [
        {"question": "q1", "answer": "a", "contexts": ["c"], "ground_truths": ["only one"]},
        {"question": "q2", "answer": "a", "contexts": ["c"], "ground_truths": ["first", "second"]},
        {"question": "q3", "answer": "a", "contexts": ["c"], "ground_truths": []},
    ]
    for fmt in CONTAINERS:
        path = write(tmp_path / f"truths.{fmt}", rows)
        assert [r.reference_answer for r in read_records(str(path))] == ["only one", "first\n\nsecond", None]


ALIASES = [
    (schema.name, key, target) for schema in SCHEMAS for key, target in schema.fields.items()
]


@pytest.mark.parametrize(("schema", "key", "target"), ALIASES, ids=[f"{s}-{k}" for s, k, _ in ALIASES])
def test_every_key_of_every_schema_gives_its_field(tmp_path: Path, schema: str, key: str, target: str) -> None:
    value: Any = ["text one", "text two"] if target in ("contexts", "reference_answers") else "some text"
    path = write_jsonl(tmp_path / "one.jsonl", [{key: value, "query_id": "q1"}])
    [record] = read_records(str(path), schema=schema)
    field = "reference_answer" if target == "reference_answers" else target
    expected = "text one\n\ntext two" if target == "reference_answers" else value
    assert getattr(record, field) == expected
    assert (record.query_id, record.retrieved, record.grades) == ("q1", None, None)
    detected = detect([key, "query_id"]).name
    # answer and contexts are Ragas 0.1's keys and ragmon's, with the same meaning: read as ragmon's
    assert detected == ("ragmon" if key in ("answer", "contexts") else schema)


@pytest.mark.parametrize("fmt", CONTAINERS)
def test_ragmon_ids_and_labels_are_read_in_any_schema(tmp_path: Path, fmt: str) -> None:
    rows: list[dict[str, Any]] = [
        {"query_id": "q1", "user_input": "q one", "response": "a", "retrieved_contexts": ["c"],
         "retrieved_document_ids": ["d2", "d1"], "relevant_document_ids": ["d1"]},
        {"query_id": 2, "user_input": "q two", "response": "a", "retrieved_contexts": ["c"],
         "retrieved_document_ids": ["d3"], "relevance": {"d3": 2}},
        {"query_id": "q3", "user_input": "q three", "response": "a", "retrieved_contexts": ["c"],
         "retrieved_document_ids": None, "relevant_document_ids": ["d1"]},
    ]
    if fmt == "parquet":  # one type a column
        rows[1]["query_id"] = "2"
        for row in rows:  # a map column of Parquet reads as pairs: relevance stays JSON-only
            row.pop("relevance", None)
        rows[1]["relevant_document_ids"] = ["d3"]
    path = write(tmp_path / f"ids.{fmt}", rows)
    records = list(read_records(str(path)))
    assert [(r.query_id, r.retrieved, r.grades) for r in records] == [
        ("q1", ["d2", "d1"], {"d1": 1}),
        ("2", ["d3"], {"d3": 2} if fmt != "parquet" else {"d3": 1}),
        ("q3", None, {"d1": 1}),
    ]
    result = ragmon("eval", path, "--format", "json")
    out = json.loads(result.stdout)
    assert (result.returncode, result.stderr) == (0, "")
    assert (out["queries"], out["unlabelled"], out["not_applicable"], out["records"]) == (2, 0, 1, 3)
    assert (out["metrics"]["mrr"], out["metrics"]["hit_rate@1"]) == (0.75, 0.5)


# --------------------------------------------------------------------------------------------
# detection, --schema, warnings


def test_ambiguous_first_record_is_refused_naming_the_keys(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", [{"question": "q", "input": "q", "answer": "a"}])
    one_line_error(ragmon("eval", path), (
        f"{path}:1: the keys fit more than one schema: ragas (question), deepeval (input); "
        "say which with --schema ragmon|ragas|deepeval"
    ))
    path = write_jsonl(tmp_path / "mixed2.jsonl", [{"query": "q", "user_input": "q"}])
    one_line_error(ragmon("eval", path), (
        f"{path}:1: the keys fit more than one schema: ragmon (query), ragas (user_input); "
        "say which with --schema ragmon|ragas|deepeval"
    ))


def test_unknown_keys_are_refused_naming_the_keys_and_the_schemas(tmp_path: Path) -> None:
    path = write(tmp_path / "other.csv", [{"prompt": "q", "completion": "a"}])
    one_line_error(ragmon("eval", path), (
        f"{path}: row 1: no key of a known schema (keys found: completion, prompt); the schemas read are "
        "ragmon (answer, contexts, query, query_id, reference_answer, relevance, relevant_document_ids, "
        "retrieved_document_ids); ragas (answer, contexts, ground_truth, ground_truths, multi_responses, "
        "query_id, question, reference, reference_contexts, relevance, relevant_document_ids, response, "
        "retrieved_contexts, retrieved_document_ids, rubrics, user_input); deepeval (actual_output, context, "
        "expected_output, expected_tools, input, query_id, relevance, relevant_document_ids, "
        "retrieval_context, retrieved_document_ids, tools_called); say which with --schema ragmon|ragas|deepeval"
    ))


def test_schema_flag_forces_the_schema_and_warns_of_other_schemas_keys(tmp_path: Path) -> None:
    rows = [{"question": "q", "input": "the query", "actual_output": SUPPORTED, "retrieval_context": CONTEXTS[0]}] * 3
    path = write_jsonl(tmp_path / "forced.jsonl", rows)
    result = ragmon("eval", path, "--schema", "deepeval", "--format", "json")
    assert result.returncode == 0
    # one warning per file and key, not one per record
    assert result.stderr == warning_lines("eval", path, [
        '"question" is ignored: in a ragas file it is the query, and this file is read as deepeval '
        "(--schema to change it)",
    ])
    assert [r.query for r in read_records(str(path), schema="deepeval")] == ["the query"] * 3
    result = ragmon("eval", path, "--schema", "ragas", "--format", "json")
    assert result.returncode == 0
    assert result.stderr == warning_lines("eval", path, [
        '"input" is ignored: in a deepeval file it is the query, and this file is read as ragas (--schema to change it)',
        '"actual_output" is ignored: in a deepeval file it is the generated answer, and this file is read as '
        "ragas (--schema to change it)",
        '"retrieval_context" is ignored: in a deepeval file it is the contexts given to the generator, and this '
        "file is read as ragas (--schema to change it)",
    ])
    assert [r.query for r in read_records(str(path), schema="ragas")] == ["q"] * 3


def test_a_key_of_another_schema_in_a_later_record_warns_once(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"question": "q1", "answer": "a", "contexts": ["c"]},
        {"question": "q2", "answer": "a", "contexts": ["c"], "expected_output": "x"},
        {"question": "q3", "answer": "a", "contexts": ["c"], "expected_output": "y", "id": 7},
        {"question": "q4", "answer": "a", "contexts": ["c"], "expected_output": "z", "id": 8},
    ]
    path = write_jsonl(tmp_path / "later.jsonl", rows)
    result = ragmon("eval", path, "--format", "json")
    assert result.returncode == 0
    assert result.stderr == warning_lines("eval", path, [
        '"expected_output" is ignored: in a deepeval file it is the reference answer, and this file is read as '
        "ragas (--schema to change it)",
        '"id" is ignored: not a key of the ragas schema',
    ])


def test_warnings_are_per_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", RAGAS_02)
    b = write(tmp_path / "b.json", RAGAS_02)
    result = ragmon("eval", a, b, "--format", "json")
    assert result.returncode == 0
    assert result.stderr == warning_lines("eval", a, WARNINGS["ragas_0.2"]) + warning_lines("eval", b, WARNINGS["ragas_0.2"])
    assert json.loads(result.stdout)["not_applicable"] == 4


def test_two_keys_for_one_field_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "both.jsonl", [RAGAS_01[0], {**RAGAS_01[1], "user_input": "again"}])
    one_line_error(ragmon("eval", path), f'{path}:2: "question" and "user_input" both give the query; keep one')
    path = write(tmp_path / "both.csv", [{**RAGAS_01[0], "ground_truths": ["x"]}])
    one_line_error(ragmon("eval", path), (
        f'{path}: row 1: "ground_truth" and "ground_truths" both give the reference answer; keep one'
    ))


@pytest.mark.parametrize(("fmt", "where"), [("jsonl", ":2: "), ("json", ": row 2: "), ("parquet", ": row 2: ")])
def test_a_bad_value_names_its_own_key_and_row(tmp_path: Path, fmt: str, where: str) -> None:
    plain = [{k: v for k, v in r.items() if k != "reference_contexts"} for r in RAGAS_02]  # no warning
    rows: list[dict[str, Any]] = [{**plain[0], "retrieved_contexts": None}, {**plain[1], "retrieved_contexts": [1, 2]}]
    path = write(tmp_path / f"bad.{fmt}", rows)
    one_line_error(ragmon("eval", path), f'{path}{where}"retrieved_contexts" must be a list of strings')


def test_null_ids_are_no_ids(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "nulls.jsonl", [{**r, "retrieved_document_ids": None} for r in RAGMON])
    result = ragmon("eval", path, "--format", "json")
    assert (result.returncode, json.loads(result.stdout), result.stderr) == (0, no_ids_report(path), "")


# --------------------------------------------------------------------------------------------
# records without document ids: not applicable, counted, and a retrieval gate says why


def test_no_ids_and_a_retrieval_threshold_fails_saying_why(tmp_path: Path) -> None:
    path = write(tmp_path / "ragas.json", RAGAS_01)
    result = ragmon("eval", path, "--fail-under", "hit_rate@5=0.8", "--format", "json")
    threshold = {"metric": "hit_rate@5", "min": 0.8, "value": None, "passed": False,
                 "reason": "no record carries document ids"}
    assert (result.returncode, json.loads(result.stdout)) == (1, no_ids_report(path, thresholds=[threshold]))
    assert result.stderr == "ragmon eval: FAIL hit_rate@5: no record carries document ids\n"
    # a generation threshold on the same file passes: the records are estimated
    result = ragmon("eval", path, "--fail-under", "faithfulness_lexical=0.5")
    assert (result.returncode, result.stderr) == (0, "")


def test_no_ids_in_the_table_and_markdown(tmp_path: Path) -> None:
    path = write(tmp_path / "deepeval.jsonl", DEEPEVAL)
    summary = (
        f"2 records from {path}: 0 scored, 0 unlabelled (excluded), "
        "2 without document ids (retrieval not applicable)"
    )
    table = ragmon("eval", path)
    assert table.returncode == 0 and table.stdout.splitlines()[0] == summary
    markdown = ragmon("eval", path, "--format", "markdown")
    assert markdown.returncode == 0 and markdown.stdout.splitlines()[2] == summary
    # a file with ids says nothing about it
    ok = write_jsonl(tmp_path / "ok.jsonl", [{"query_id": "q", "retrieved_document_ids": ["a"], "relevant_document_ids": ["a"]}])
    assert ragmon("eval", ok).stdout.splitlines()[0] == f"1 records from {ok}: 1 scored, 0 unlabelled (excluded)"


def test_some_records_without_ids_are_counted_apart(tmp_path: Path) -> None:
    rows = [
        {"query_id": "q1", "retrieved_document_ids": ["a", "b"], "relevant_document_ids": ["b"]},
        {"query_id": "q2", "retrieved_document_ids": ["c"]},
        {"query_id": "q3", "answer": SUPPORTED, "contexts": CONTEXTS[0]},
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    result = ragmon("eval", path, "--format", "json", "--fail-under", "mrr=0.5")
    out = json.loads(result.stdout)
    assert result.returncode == 0
    assert (out["queries"], out["unlabelled"], out["not_applicable"], out["records"]) == (1, 1, 1, 3)
    assert out["metrics"]["mrr"] == 0.5
    # labels from --qrels do not make a record without ids scorable
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q2 0 c 1\nq3 0 z 1\n", encoding="utf-8")
    out = json.loads(ragmon("eval", path, "--qrels", qrels, "--format", "json").stdout)
    assert (out["queries"], out["unlabelled"], out["not_applicable"], out["metrics"]["mrr"]) == (2, 0, 1, 0.75)
    # ids somewhere, none labelled: the usual reason
    result = ragmon("eval", write_jsonl(tmp_path / "unl.jsonl", rows[1:]), "--fail-under", "mrr=0.5")
    assert (result.returncode, result.stderr) == (1, "ragmon eval: FAIL mrr = no scored query < 0.5\n")


def test_compare_two_ragas_runs_without_ids(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", RAGAS_01)
    b = write(tmp_path / "b.csv", [{**r, "answer": c[0]} for r, c in zip(RAGAS_01, CONTEXTS)])  # both supported
    result = ragmon("compare", a, b, "--format", "json", "--resamples", "100")
    assert (result.returncode, result.stderr) == (0, "")
    out = json.loads(result.stdout)
    assert (out["common_queries"], out["unlabelled"], out["not_applicable"]) == (0, [], [
        "when was the first super bowl?", "who won the most super bowls?",
    ])
    assert {m["a"] for m in out["metrics"].values()} == {None}
    lexical = out["estimates"]["faithfulness_lexical"]
    assert (lexical["a"], lexical["b"], lexical["diff"], lexical["pairs"]) == (0.5, 1.0, 0.5, 2)
    table = ragmon("compare", a, b, "--resamples", "100").stdout.splitlines()
    assert table[1] == ("without document ids in A or B, retrieval not compared (2): "
                        "when was the first super bowl?, who won the most super bowls?")


def test_compare_leaves_out_a_query_without_ids_in_one_run(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [
        {"query_id": "q1", "retrieved_document_ids": ["x", "y"], "relevant_document_ids": ["y"]},
        {"query_id": "q2", "retrieved_document_ids": ["z"], "relevant_document_ids": ["z"]},
        {"query_id": "q3", "retrieved_document_ids": ["w"], "relevant_document_ids": ["w"]},
    ])
    b = write_jsonl(tmp_path / "b.jsonl", [
        {"query_id": "q1", "retrieved_document_ids": ["y"], "relevant_document_ids": ["y"]},
        {"query_id": "q2", "answer": "a", "contexts": ["c"]},
        {"query_id": "q3", "retrieved_document_ids": ["v"], "relevant_document_ids": ["w"]},
    ])
    result = ragmon("compare", a, b, "--format", "json", "--resamples", "100")
    out = json.loads(result.stdout)
    assert (result.returncode, out["common_queries"], out["not_applicable"], out["unlabelled"]) == (0, 2, ["q2"], [])
    assert (out["metrics"]["mrr"]["a"], out["metrics"]["mrr"]["b"]) == (0.75, 0.5)


def test_compare_forces_the_schema_of_both_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", RAGAS_01)
    b = write(tmp_path / "b.jsonl", RAGAS_01)
    result = ragmon("compare", a, b, "--schema", "deepeval", "--resamples", "10")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"ragmon compare: error: {a}:1: needs \"query_id\" or \"query\" to be paired with the other run"
    )
    assert result.stderr.splitlines()[0] == (
        f'ragmon compare: warning: {a}: "question" is ignored: in a ragas file it is the query, and this file '
        "is read as deepeval (--schema to change it)"
    )


# --------------------------------------------------------------------------------------------
# containers


def test_container_is_told_by_extension_and_content(tmp_path: Path) -> None:
    cases = {
        "a.jsonl": b'{"query": "q"}\n', "b.txt": b'\xef\xbb\xbf  \n [{"query": "q"}]',
        "c.csv": b"query\nq\n", "d.PARQUET": b"", "e.bin": b"PAR1....", "f.run": b"\n\nq1 Q0 d1 1 2.5 tag\n",
        "g.txt": b"q1 q0 d1 1 2.5 tag", "h.txt": b"q1 0 d1 1 2.5 tag\n", "i.txt": b"q1 X0 d1 1 2.5 tag\n",
        "j.txt": b"q1 Q0 d1 1 2.5\n", "k.txt": b"",
    }
    kinds = {}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        kinds[name] = container(str(tmp_path / name))
    assert kinds == {
        "a.jsonl": "jsonl", "b.txt": "array", "c.csv": "csv", "d.PARQUET": "parquet", "e.bin": "parquet",
        "f.run": "trec", "g.txt": "trec", "h.txt": "trec", "i.txt": "jsonl", "j.txt": "jsonl", "k.txt": "jsonl",
    }
    assert container(str(tmp_path / "missing.json")) == "jsonl"


def test_csv_cells(tmp_path: Path) -> None:
    """Empty cells are absent; pandas' unnamed index column is not warned about; a cell longer
    than Python's default CSV limit (128 Ki characters) is read."""
    long = "x" * 200_000
    path = tmp_path / "pandas.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["", "question", "answer", "contexts", "ground_truth", "retrieved_document_ids"])
        writer.writerow(["0", "q1", SUPPORTED, json.dumps([long]), "", ""])
        writer.writerow(["1", "q2", "", "[]", "ref", '["d1", 2]'])
    records = list(read_records(str(path)))
    assert [(r.line, r.query, r.answer, r.contexts, r.reference_answer, r.retrieved) for r in records] == [
        (1, "q1", SUPPORTED, [long], None, None),
        (2, "q2", None, [], "ref", ["d1", "2"]),
    ]
    result = ragmon("eval", path, "--format", "json")
    assert (result.returncode, result.stderr) == (0, "")


BAD_CSV = {
    "list_not_json": (
        'question,contexts\nq,"[""a""]"\nq,a|b\n',
        'row 2: "contexts" must be JSON text in a CSV cell, e.g. ["a", "b"], got \'a|b\'',
    ),
    "python_list": (
        "question,contexts\nq,\"['a', 'b']\"\n",
        'row 1: "contexts" must be JSON text in a CSV cell, e.g. ["a", "b"], got "[\'a\', \'b\']"',
    ),
    "more_cells": ("question,answer\nq,a\nq,a,extra\n", "row 2: more cells than the header has columns"),
    "repeated_column": ("question,answer,question\nq,a,q\n", 'column "question" appears twice in the header'),
    "relevance_not_object": ('query,relevance\nq,"[1]"\n', 'row 1: "relevance" must be an object id -> grade, got list'),
    "not_utf8": ("question\n", "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_CSV))
def test_bad_csv(tmp_path: Path, case: str) -> None:
    content, problem = BAD_CSV[case]
    path = tmp_path / f"{case}.csv"
    data = content.encode()
    if case == "not_utf8":
        data += "café\n".encode("latin-1")
    path.write_bytes(data)
    result = ragmon("eval", path)
    assert (result.returncode, result.stdout, result.stderr.count("\n")) == (2, "", 1)
    assert result.stderr.startswith(f"ragmon eval: error: {path}")
    assert problem in result.stderr
    assert "Traceback" not in result.stderr


def test_a_csv_cell_past_the_bound_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "cells.csv", [{"question": "q" * 10}, {"question": "q" * 11}])
    monkeypatch.setattr(tables, "MAX_CELL_CHARS", 10)
    one_line_error(ragmon("eval", path), f"{path}: row 2: invalid CSV: field larger than field limit (10)")
    assert csv.field_size_limit() == 131072  # Python's default, restored


def test_json_array_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"question": "q"},\n  {"question": \n]\n', encoding="utf-8")
    one_line_error(ragmon("eval", path), f"{path}:4: invalid JSON: Expecting value (column 1)")
    path.write_text('[{"question": "q"}, "text"]', encoding="utf-8")
    one_line_error(ragmon("eval", path), f"{path}: row 2: expected a JSON object, got str")
    path.write_text("[]", encoding="utf-8")
    assert json.loads(ragmon("eval", path, "--format", "json").stdout)["records"] == 0
    big = write(tmp_path / "big.json", RAGAS_01)
    monkeypatch.setattr(tables, "MAX_ARRAY_BYTES", big.stat().st_size - 1)
    one_line_error(ragmon("eval", big), (
        f"{big}: a JSON array is read whole: {big.stat().st_size:,} bytes is more than "
        f"{big.stat().st_size - 1:,}; write it as JSON Lines (one object a line), which is read as it streams"
    ))


def test_not_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"question,answer\n")
    result = ragmon("eval", path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"ragmon eval: error: {path}: not a Parquet file (") and result.stderr.count("\n") == 1
    one_line_error(ragmon("eval", tmp_path / "none.parquet"), f"{tmp_path / 'none.parquet'}: cannot read: No such file or directory")


def test_parquet_without_pyarrow_is_one_clear_line(tmp_path: Path) -> None:
    path = write(tmp_path / "ragas.parquet", RAGAS_01)
    code = (
        "import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
        "from ragmon.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    result = subprocess.run([sys.executable, "-c", code, "eval", str(path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"ragmon eval: error: {path}: reading Parquet needs pyarrow: pip install 'ragmon[parquet]'\n",
    )
    # a wrong path is said as such, not as a missing pyarrow
    absent = str(tmp_path / "absent.parquet")
    result = subprocess.run([sys.executable, "-c", code, "eval", absent], capture_output=True, text=True, timeout=TIMEOUT)
    assert (result.returncode, result.stderr) == (2, f"ragmon eval: error: {absent}: cannot read: No such file or directory\n")
    # the same interpreter with pyarrow reads it
    with_pyarrow = "import sys\n" + code.split("\n")[1]
    result = subprocess.run([sys.executable, "-c", with_pyarrow, "eval", str(path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert (result.returncode, result.stderr) == (0, "")


# --------------------------------------------------------------------------------------------
# TREC run files


def test_trec_run_ranks_by_score_then_doc_id_descending(tmp_path: Path) -> None:
    """trec_eval's order: score descending, ties by doc-id descending; the rank column is not used."""
    run = tmp_path / "run.txt"
    run.write_text(
        "q1 Q0 d1 1 0.5 tag\nq1 Q0 d3 2 0.5 tag\nq1 Q0 d2 3 0.9 tag\n"
        "q2 Q0 b 9 1 tag\nq1 Q0 d10 4 0.5 tag\n\nq2 Q0 a 1 -2e0 tag\n",
        encoding="utf-8",
    )
    assert list(read_records(str(run))) == [
        EvalRecord(str(run), 1, "q1", None, ["d2", "d3", "d10", "d1"], None),
        EvalRecord(str(run), 4, "q2", None, ["b", "a"], None),
    ]
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq2 0 a 1\n", encoding="utf-8")
    out = json.loads(ragmon("eval", run, "--qrels", qrels, "--format", "json").stdout)
    assert (out["queries"], out["metrics"]["mrr"]) == (2, (1 / 4 + 1 / 2) / 2)
    assert pytrec_means(run, qrels, {"recip_rank"}) == {"recip_rank": (1 / 4 + 1 / 2) / 2}


def pytrec_means(run: Path, qrels: Path, measures: set[str]) -> dict[str, float]:
    """trec_eval's means over the queries of ``run`` (through pytrec_eval), from the same files."""
    judged: dict[str, dict[str, int]] = {}
    for line in qrels.read_text(encoding="utf-8").splitlines():
        qid, _, doc, grade = line.split()
        judged.setdefault(qid, {})[doc] = int(grade)
    scored: dict[str, dict[str, float]] = {}
    for line in run.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, doc, _, score, _ = line.split()
            scored.setdefault(qid, {})[doc] = float(score)
    per_query = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(scored)
    keys = next(iter(per_query.values())).keys()
    return {k: sum(q[k] for q in per_query.values()) / len(per_query) for k in keys}


def test_trec_run_scored_as_trec_eval_scores_it(tmp_path: Path) -> None:
    """A run with many tied scores, mixed-case and non-ASCII doc ids, written in an order that
    is not the ranking, with a TREC qrels file: every mean equals pytrec_eval's to 1e-9."""
    rng = random.Random(20240611)
    pool = [f"d{i}" for i in range(30)] + ["D7", "doc-é", "doc-z", "Z", "a", "ß"]
    run_lines, qrels_lines = [], []
    for q in range(300):
        docs = rng.sample(pool, rng.randint(1, 25))
        for rank, doc in enumerate(docs, start=1):
            run_lines.append(f"q{q} Q0 {doc} {rank} {rng.choice([0.1, 0.25, 0.5, 1.0, 2.0])!r} run-x")
        relevant = rng.sample(pool, rng.randint(1, 6))
        qrels_lines += [f"q{q} 0 {doc} {rng.randint(1, 3)}" for doc in relevant]
        qrels_lines += [f"q{q} 0 {doc} 0" for doc in rng.sample(pool, 2) if doc not in relevant]
    rng.shuffle(run_lines)
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.trec"
    run.write_text("\n".join(run_lines) + "\n", encoding="utf-8")
    qrels.write_text("\n".join(qrels_lines) + "\n", encoding="utf-8")
    cut = ",".join(map(str, KS))
    reference = pytrec_means(run, qrels, {f"success.{cut}", "recip_rank", f"recall.{cut}", f"P.{cut}", f"ndcg_cut.{cut}"})
    out = json.loads(ragmon("eval", run, "--qrels", qrels, "--format", "json").stdout)
    assert (out["queries"], out["unlabelled"], out["not_applicable"]) == (300, 0, 0)
    names = {"hit_rate": "success", "recall": "recall", "precision": "P", "ndcg": "ndcg_cut"}
    expected = {"mrr": reference["recip_rank"]} | {
        f"{name}@{k}": reference[f"{family}_{k}"] for name, family in names.items() for k in KS
    }
    assert out["metrics"].keys() == expected.keys()
    assert {k: abs(out["metrics"][k] - v) <= 1e-9 for k, v in expected.items()} == dict.fromkeys(expected, True)


def test_trec_runs_compare_and_need_qrels_for_labels(tmp_path: Path) -> None:
    a, b = tmp_path / "a.run", tmp_path / "b.run"
    a.write_text("q1 Q0 x 1 2 a\nq1 Q0 y 2 1 a\nq2 Q0 z 1 1 a\n", encoding="utf-8")
    b.write_text("q1 Q0 y 1 2 b\nq1 Q0 x 2 1 b\nq2 Q0 z 1 1 b\n", encoding="utf-8")
    out = json.loads(ragmon("eval", a, "--format", "json").stdout)
    assert (out["queries"], out["unlabelled"], out["not_applicable"]) == (0, 2, 0)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 y 1\nq2 0 z 1\n", encoding="utf-8")
    result = ragmon("compare", a, b, "--qrels", qrels, "--format", "json", "--resamples", "100")
    out = json.loads(result.stdout)
    assert (result.returncode, out["common_queries"], out["metrics"]["mrr"]["a"], out["metrics"]["mrr"]["b"]) == (0, 2, 0.75, 1.0)


BAD_RUNS = {
    "five_columns": ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", 2, "expected 6 columns (query-id Q0 doc-id rank score run-tag), got 5"),
    "word_score": ("q1 Q0 d1 1 0.5 t\n\nq1 Q0 d2 2 high t\n", 3, "score must be a finite number, got 'high'"),
    "nan_score": ("q1 Q0 d1 1 nan t\n", 1, "score must be a finite number, got 'nan'"),
    "infinite_score": ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 inf t\n", 2, "score must be a finite number, got 'inf'"),
    "repeated_document": ("q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", 3,
                          "document 'd1' is listed twice for query 'q1'"),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_trec_run(tmp_path: Path, case: str) -> None:
    content, line, problem = BAD_RUNS[case]
    run = tmp_path / f"{case}.txt"
    run.write_text(content, encoding="utf-8")
    one_line_error(ragmon("eval", run), f"{run}:{line}: {problem}")


def test_trec_run_not_utf8(tmp_path: Path) -> None:
    run = tmp_path / "latin.txt"
    run.write_bytes(b"q1 Q0 d1 1 0.5 t\nq1 Q0 caf\xe9 2 0.4 t\n")
    one_line_error(ragmon("eval", run), f"{run}:2: not UTF-8")
