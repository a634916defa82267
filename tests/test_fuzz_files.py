"""Fuzzing the files ragmon reads: the TOML configuration, golden sets and qrels, offline records.

Invariants: a bad file is one clear problem (``ConfigError`` / ``InputError``, exit 2 from the
command line with one line per problem, never a traceback); a configuration that
``check-config`` accepts is one the sidecar can be built from.
"""

from __future__ import annotations

import datetime
import math
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragmon.sidecar.wiring import Sidecar
from ragmon.cli import file_problems, main
from ragmon.config import Config, config_from_mapping, load_config, toml_defaults
from ragmon.errors import ConfigError, InputError
from ragmon.formats.relevance import read_golden_queries, read_qrels

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SECTIONS: dict[str, list[str]] = {
    section: [f.name for f in cls.__dataclass_fields__.values()]  # type: ignore[attr-defined]
    for section, cls in (
        ("receiver", type(Config().receiver)), ("metrics", type(Config().metrics)),
        ("traces", type(Config().traces)), ("scoring", type(Config().scoring)),
        ("judge", type(Config().judge)), ("feedback", type(Config().feedback)),
    )
}
PROBE_KEYS = ["name", "url", "method", "headers", "body", "interval", "timeout", "concurrency",
              "dataset", "response_ids", "response_answer"]

_durations = st.builds(
    lambda n, unit: f"{n}{unit}",
    st.one_of(st.integers(0, 10**30), st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:.3f}")),
    st.sampled_from(["ms", "s", "m", "h", "d", "", "x"]),
)
_listens = st.one_of(
    st.just(""), st.just("127.0.0.1:0"), st.builds(lambda p: f"127.0.0.1:{p}", st.integers(-5, 70000)),
    st.text(max_size=20),
)
_scalars = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=30), _durations, _listens,
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
    st.dates(), st.times(),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)


def _typed(default: Any) -> st.SearchStrategy[Any]:
    """Values of a key's own type, mostly plausible, with edge cases, sometimes any TOML value."""
    if isinstance(default, bool) or default is None:
        plausible: st.SearchStrategy[Any] = st.booleans()
        edge: st.SearchStrategy[Any] = st.integers(0, 1)
    elif isinstance(default, int):
        plausible = st.one_of(st.just(1), st.integers(1, 10**6))
        edge = st.one_of(st.integers(-2, 0), st.integers(2**62, 2**63 - 1))
    elif isinstance(default, float):
        plausible = st.floats(0, 1)
        edge = st.floats(allow_nan=True, allow_infinity=True)
    elif isinstance(default, str):
        plausible = st.sampled_from([default, "", "1ms", "2s", "5m", "1h", "127.0.0.1:0", "metadata.doc_id", "0s"])
        edge = st.one_of(_durations, _listens, st.text(max_size=12))
    elif isinstance(default, tuple):
        plausible = st.lists(_typed(default[0] if default else ""), max_size=4)
        edge = st.just([])
    else:
        plausible = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2)
        edge = st.dictionaries(st.text(max_size=6), st.integers(), max_size=2)
    return st.one_of(plausible, plausible, plausible, plausible, plausible, plausible, edge, _values)


_DEFAULTS = {
    section: toml_defaults(type(getattr(Config(), section))) for section in SECTIONS
}
"""Each key's default as written in TOML (durations as text): the type its values are drawn from."""


@st.composite
def _configs(draw: st.DrawFn) -> dict[str, Any]:
    """TOML-shaped documents: mostly known sections and keys with values of their type."""
    data: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "probe", "pricing", *SECTIONS, "bogus"]), max_size=5, unique=True)):
        if section == "probe":
            probe = {"url": st.sampled_from(["http://127.0.0.1:1/ask", "ftp://x", ""]), "dataset": st.just("")}
            tables = draw(st.lists(st.fixed_dictionaries(probe, optional={k: _values for k in PROBE_KEYS if k not in probe}), max_size=2))
            data[section] = draw(st.one_of(st.just(tables), _values))
        elif section == "pricing":
            data[section] = draw(st.dictionaries(
                st.text(max_size=10),
                st.one_of(st.dictionaries(st.sampled_from(["input", "output"]), _typed(0.0), max_size=2), _values),
                max_size=2,
            ))
        elif section == "bogus":
            data[draw(st.text(max_size=10))] = draw(_values)
        else:
            defaults = _DEFAULTS[section]
            keys = draw(st.lists(st.sampled_from(SECTIONS[section]), max_size=4, unique=True))
            table = {key: draw(_typed(defaults[key])) for key in keys}
            if draw(st.integers(0, 9)) == 9:
                table["typo"] = 1
            data[section] = table
    return data


@settings(FUZZ, max_examples=400)
@given(_configs())
def test_any_config_is_valid_or_a_list_of_problems_and_valid_ones_build_the_sidecar(data: dict[str, Any]) -> None:
    try:
        config = config_from_mapping(data)
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) and ": " in p for p in exc.problems)
        return
    if file_problems(config):
        return
    Sidecar(config, environ={})  # what check-config accepts, the sidecar can be built from


@FUZZ
@given(st.binary(max_size=300) | st.text(alphabet=string.printable + "[]=\"'.\x00é", max_size=300).map(str.encode))
def test_check_config_answers_any_file_with_ok_or_problems(tmp_path_factory: pytest.TempPathFactory, body: bytes) -> None:
    path = tmp_path_factory.mktemp("cfg") / "ragmon.toml"
    path.write_bytes(body)
    try:
        load_config(str(path))
    except ConfigError as exc:
        assert exc.problems
    assert main(["check-config", str(path)]) in (0, 2)


def test_check_config_prints_one_line_per_problem_and_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[receiver]\nmax_connections = -1\nheader_timeout = "soon"\n[metrics]\nlinger = 5\nmax_series = 0\n')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert sorted(line.split(": ")[1] for line in err.splitlines()) == [
        "metrics.linger", "metrics.max_series", "receiver.header_timeout", "receiver.max_connections",
    ]


_json_values = st.recursive(
    st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
_label_lines = st.one_of(
    st.binary(max_size=80),
    st.builds(
        lambda obj: __import__("json").dumps(obj).encode(),
        st.dictionaries(
            st.sampled_from(["query", "query_id", "relevant_document_ids", "relevance", "reference_answer", "x"]),
            _json_values, max_size=4,
        ),
    ),
    st.builds(lambda a, b, c, d: f"{a} {b} {c} {d}".encode(), st.text(max_size=5), st.integers(), st.text(max_size=5),
              st.one_of(st.integers(-3, 10**30), st.text(max_size=4), st.floats().map(lambda f: "nan" if math.isnan(f) else f))),
)


@FUZZ
@given(st.lists(_label_lines, max_size=6))
def test_golden_and_qrels_files_load_or_name_the_line(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    path = tmp_path_factory.mktemp("labels") / "labels.jsonl"
    path.write_bytes(b"\n".join(lines))
    for read in (read_qrels, read_golden_queries):
        try:
            read(str(path))  # type: ignore[operator]
        except InputError as exc:
            assert str(exc).startswith(str(path))


@FUZZ
@given(st.lists(_label_lines, max_size=6))
def test_eval_answers_any_records_file_with_an_exit_code(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    path = tmp_path_factory.mktemp("run") / "run.jsonl"
    path.write_bytes(b"\n".join(lines))
    assert main(["eval", str(path), "--format", "json"]) in (0, 1, 2)


def test_check_config_reads_the_files_the_configuration_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"query": "q", "relevant_document_ids": ["d1"]}\n{"query": 3}\n')
    path = tmp_path / "ragmon.toml"
    path.write_text(f'[scoring]\ngolden = "{golden}"\n[[probe]]\nurl = "http://127.0.0.1:1/"\ndataset = "{tmp_path / "missing.jsonl"}"\n')
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "Traceback" not in "".join(err)
    assert err[0].startswith(f"{path}: scoring.golden: {golden}:2: ") and err[1].startswith(f"{path}: probe[0].dataset: ")
    golden.write_text('{"query": "q", "relevant_document_ids": ["d1"]}\n')
    path.write_text(f'[scoring]\ngolden = "{golden}"\n')
    assert main(["check-config", str(path)]) == 0

