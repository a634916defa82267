"""The TREC run reader's bulk path (``ragmon.offline.trec``: numpy over blocks of lines) gives
exactly the records of its line-at-a-time reference, on the files it takes and on those it
hands back (anything unusual), and names the same first bad line."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragmon.errors import InputError
from ragmon.offline import trec
from ragmon.offline.records import EvalRecord


def _records(path: Path, block: int) -> list[EvalRecord] | str:
    try:
        return list(trec.read_trec_run(str(path), block=block))
    except InputError as exc:
        return str(exc)


def _reference(path: Path) -> list[EvalRecord] | str:
    try:
        return list(trec._read_lines(str(path)))
    except InputError as exc:
        return str(exc)


SCORES = ("1", "0.5", "-2e0", "3.25", "1E3", "+.5", "10", "0.5", "2.5e-1", "7")
ODD_SCORES = ("1_0", "0x1p3", "1e", ".", "nan", "inf", "-Infinity", "1e999", "١")


def _run_file(rng: random.Random, odd: bool) -> str:
    """A random run: interleaved or grouped queries, tied and unsorted scores, tabs, CRLF,
    trailing spaces, blank lines; with ``odd``, now and then a line the bulk path hands back."""
    queries = [f"q{i}" for i in range(rng.randint(1, 12))] + (["q-\u00e9"] if odd and rng.random() < 0.3 else [])
    grouped = rng.random() < 0.5
    lines: list[str] = []
    for qid in (sorted(queries) if grouped else queries):
        docs = rng.sample(range(40), rng.randint(1, 12))
        for rank, doc in enumerate(docs, 1):
            score = rng.choice(ODD_SCORES) if odd and rng.random() < 0.02 else rng.choice(SCORES)
            sep = rng.choice([" ", "\t", "  "])
            lines.append(sep.join([qid, "Q0", f"d{doc}", str(rank), score, "tag"]) + rng.choice(["", " ", "\r"]))
            if rng.random() < 0.03:
                lines.append(rng.choice(["", "   "]))
    if not grouped:
        rng.shuffle(lines)
    if odd and rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["q1 Q0 d1 1 0.5", "q1 Q0 d1 1 0.5 t x", "q1 Q0 \u00fc 1 1 t"]))
    if odd and rng.random() < 0.1 and lines:
        lines.append(lines[rng.randrange(len(lines))])  # a document listed twice, or a blank again
    text = "\n".join(lines)
    return text if rng.random() < 0.3 else text + "\n"


@pytest.mark.parametrize("odd", [False, True])
def test_the_bulk_reader_gives_the_reference_records(tmp_path: Path, odd: bool) -> None:
    rng = random.Random(27 + odd)
    path = tmp_path / "run.trec"
    for _ in range(150):
        path.write_text(_run_file(rng, odd), encoding="utf-8")
        expected = _reference(path)
        for block in (1, 64, 1 << 20):  # a line per block, a few lines, the whole file
            assert _records(path, block) == expected, path.read_text(encoding="utf-8")


def test_a_usual_run_is_read_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run as tools write it (grouped or not, ties, blank lines, no final newline) never
    falls back to the line-at-a-time reader."""
    path = tmp_path / "run.trec"
    path.write_text("q2 Q0 a 1 2 t\nq2 Q0 b 2 2 t\n\nq1 Q0 c 1 1.5 t\r\nq2 Q0 c 3 -1e1 t\nq1 Q0 d 2 3 t", encoding="utf-8")
    expected = _reference(path)
    monkeypatch.setattr(trec, "_read_lines", lambda path: pytest.fail("read a line at a time"))
    got = list(trec.read_trec_run(str(path), block=16))
    assert got == expected
    assert [(r.query_id, r.line, r.retrieved) for r in got] == [("q2", 1, ["b", "a", "c"]), ("q1", 4, ["d", "c"])]


@pytest.mark.parametrize(("text", "error"), [
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0x1p3 t\n", ":2: score must be a finite number, got '0x1p3'"),
    ("q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 1 t\nq1 Q0 d1 2 0.5 t\n", ":3: document 'd1' is listed twice for query 'q1'"),
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2\n", ":2: expected 6 columns"),
    ("q1 Q0 d1 1 1e t\n", ":1: score must be a finite number, got '1e'"),
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 1e999 t\n", ":2: score must be a finite number, got '1e999'"),
    ("q1 Q0 d1 1 nan t\n", ":1: score must be a finite number, got 'nan'"),
])
def test_what_the_bulk_path_hands_back_is_named_by_its_line(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "run.trec"
    path.write_text(text, encoding="utf-8")
    got = _records(path, 1 << 20)
    assert isinstance(got, str) and error in got, got


def test_query_ids_differing_in_length_alone_and_separators_only_python_sees(tmp_path: Path) -> None:
    """``q`` and ``q<NUL>`` are two queries; ``\\x1c`` separates columns for ``str.split`` but
    not for ``bytes.split``, which decides what a column is."""
    path = tmp_path / "run.trec"
    path.write_text("q Q0 a 1 1 t\nq\x00 Q0 b 1 1 t\nq Q0 c 2 0 t\n", encoding="utf-8")
    assert [(r.query_id, r.retrieved) for r in trec.read_trec_run(str(path))] == [("q", ["a", "c"]), ("q\x00", ["b"])]
    path.write_text("q Q0 a 1 1 t\nq Q0 c\x1cd 2 0 t\n", encoding="utf-8")
    assert [(r.query_id, r.retrieved) for r in trec.read_trec_run(str(path))] == [("q", ["a", "c\x1cd"])]


def test_what_only_python_reads_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A NUL byte, a score Python reads and C does not (``1_0``), non-ASCII."""
    path = tmp_path / "run.trec"
    long_id = "q" * 100
    path.write_text(f"{long_id} Q0 d1 1 1 t\n{long_id} Q0 d2 2 2 t\nq\x00 Q0 d 1 1 t\nq Q0 a 1 1_0 t\nq Q0 \u00e9 2 9 t\n",
                    encoding="utf-8")
    assert [(r.query_id, r.retrieved) for r in trec.read_trec_run(str(path))] == [
        (long_id, ["d2", "d1"]), ("q\x00", ["d"]), ("q", ["a", "\u00e9"])]
