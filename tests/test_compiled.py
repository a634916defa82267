"""The compiled pipeline (``ragmon/compiled.py``): built by ``pip install .`` with mypyc, all
modules or none, reported by ``ragmon_build_info{pipeline}``, and switched off at run time by
``RAGMON_PIPELINE=python``. CI builds it and runs the whole suite both ways; locally, the tests
that need the build skip without it (under ``CI=true`` they fail instead)."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragmon import compiled

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parent.parent
ASKED_PYTHON = compiled.switch(compiled.PIPELINE_SWITCH)


def _built() -> list[Path]:
    """The compiled extension of each module of ``MODULES`` found next to its source."""
    found = []
    for name in compiled.MODULES:
        source = ROOT.joinpath(*name.split(".")).with_suffix(".py")
        found += [path for path in source.parent.glob(source.stem + ".*") if path.suffix in (".so", ".pyd")]
    return found


def _need_build() -> None:
    if len(_built()) < len(compiled.MODULES):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise RuntimeError("the compiled pipeline is not built (CI builds it: pip install -e .)")
        pytest.skip("the compiled pipeline is not built (pip install -e . builds it)")


def _in_subprocess(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "RAGMON_PIPELINE"} | env
    done = subprocess.run([sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_compiled_pipeline_runs_unless_python_is_asked_for() -> None:
    if ASKED_PYTHON:
        assert compiled.pipeline() == "python" and compiled.compiled_modules() == []
        return
    _need_build()
    assert compiled.pipeline() == "compiled"
    assert compiled.compiled_modules() == list(compiled.MODULES)


def test_ragmon_pipeline_python_loads_every_module_from_source() -> None:
    _need_build()
    code = "from ragmon import compiled; print(compiled.pipeline(), len(compiled.compiled_modules()))"
    assert _in_subprocess(code, RAGMON_PIPELINE="python") == "python 0"
    assert _in_subprocess(code, RAGMON_PIPELINE="Python") == "python 0"
    assert _in_subprocess(code) == f"compiled {len(compiled.MODULES)}"
    assert _in_subprocess(code, RAGMON_PIPELINE="compiled") == f"compiled {len(compiled.MODULES)}"


def test_build_info_says_which_pipeline_runs() -> None:
    _need_build()
    code = (
        "from prometheus_client import CollectorRegistry, generate_latest\n"
        "from ragmon.export.exporter import RagMetrics\n"
        "r = CollectorRegistry(); RagMetrics(r, ks=(1,), windows=(60.0,), max_label_values=10, clock=lambda: 0.0)\n"
        "print([l for l in generate_latest(r).decode().splitlines() if l.startswith('ragmon_build_info')][0])"
    )
    assert 'pipeline="python"' in _in_subprocess(code, RAGMON_PIPELINE="python")
    assert 'pipeline="compiled"' in _in_subprocess(code)


def test_prefer_source_only_acts_when_asked() -> None:
    before = list(sys.meta_path)
    assert compiled.prefer_source({}) is False and compiled.prefer_source({"RAGMON_PIPELINE": "compiled"}) is False
    assert sys.meta_path == before


def test_the_source_finder_finds_exactly_the_listed_modules() -> None:
    finder = compiled._SourceFinder()
    for name in compiled.MODULES:
        spec = finder.find_spec(name, None)
        assert spec is not None and spec.origin == str(ROOT.joinpath(*name.split(".")).with_suffix(".py"))
    assert finder.find_spec("ragmon.metrics.retrieval", None) is None
    assert finder.find_spec("json", None) is None


def test_every_listed_module_exists_and_imports() -> None:
    for name in compiled.MODULES:
        assert importlib.import_module(name).__name__ == name


def stale_builds(root: Path) -> list[str]:
    """The compiled modules under ``root`` (a checkout) whose source is newer than the oldest
    built extension of ``MODULES``, and ``ragmon.otlp._walker`` when ``_walker.pyx`` is newer
    than its extension."""
    built = [p for name in compiled.MODULES for p in _extensions(root, name)]
    oldest = min(path.stat().st_mtime for path in built)
    stale = [
        name
        for name in compiled.MODULES
        if root.joinpath(*name.split(".")).with_suffix(".py").stat().st_mtime > oldest
    ]
    walker = root / "ragmon" / "otlp" / "_walker.pyx"
    decoders = _extensions(root, "ragmon.otlp._walker")
    assert decoders, "the compiled decoder is not built (pip install -e . builds it)"
    if walker.stat().st_mtime > min(p.stat().st_mtime for p in decoders):
        stale.append("ragmon.otlp._walker")
    return stale


def _extensions(root: Path, name: str) -> list[Path]:
    source = root.joinpath(*name.split(".")).with_suffix(".py")
    return [path for path in source.parent.glob(source.stem + ".*") if path.suffix in (".so", ".pyd")]


def test_the_build_is_not_older_than_the_source() -> None:
    """A compiled module shadows its source: after an edit, ``pip install -e .`` must run again
    (or the tests would test the old code). The Cython decoder too: ``_walker.pyx`` against
    its built extension."""
    if not _built():
        _need_build()
    stale = stale_builds(ROOT)
    assert not stale, f"edited since the last build, run `pip install -e .` again: {stale}"


def test_the_stale_build_check_names_each_edited_source(tmp_path: Path) -> None:
    """The check itself, on a made-up checkout: an edited compiled module and an edited
    ``_walker.pyx`` are each named; sources older than their builds are not."""
    names = [*compiled.MODULES, "ragmon.otlp._walker"]
    for name in names:
        source = tmp_path.joinpath(*name.split(".")).with_suffix(".pyx" if name.endswith("_walker") else ".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        os.utime(source, (1000, 1000))
        built = source.with_name(source.stem + ".cpython-311-x86_64-linux-gnu.so")
        built.write_text("")
        os.utime(built, (2000, 2000))
    assert stale_builds(tmp_path) == []
    os.utime(tmp_path / "ragmon" / "otlp" / "_walker.pyx", (3000, 3000))
    edited = compiled.MODULES[3]
    os.utime(tmp_path.joinpath(*edited.split(".")).with_suffix(".py"), (3000, 3000))
    assert stale_builds(tmp_path) == [edited, "ragmon.otlp._walker"]


@pytest.mark.parametrize(("value", "on"), [
    ("python", True), (" Python\n", True), ("1", True), ("TRUE", True), ("yes", True), ("on", True),
    ("", False), ("compiled", False), ("0", False), (" false ", False), ("no", False), ("OFF", False),
])
def test_every_switch_is_read_by_one_rule(value: str, on: bool) -> None:
    """``RAGMON_PIPELINE``, ``RAGMON_DECODER`` and ``RAGMON_BUILD_PYTHON``: one spelling rule."""
    for variable in (compiled.PIPELINE_SWITCH, compiled.DECODER_SWITCH, compiled.BUILD_SWITCH):
        assert compiled.switch(variable, {variable: value}) is on
    assert compiled.use_compiled_decoder({compiled.DECODER_SWITCH: value}) is not on
    assert compiled.switch(compiled.PIPELINE_SWITCH, {}) is False


def test_a_misspelt_switch_is_off_with_one_line_naming_it() -> None:
    """In-process (the log record) and from a command: one line on stderr, before logging is set up."""
    assert compiled.switch(compiled.DECODER_SWITCH, {"RAGMON_DECODER": "pyhton"}) is False
    runs = {
        value: subprocess.run(
            [sys.executable, "-c", "from ragmon.otlp.decode import DECODER; print(DECODER)"],
            env={**os.environ, "RAGMON_DECODER": value}, capture_output=True, text=True, timeout=60, check=True,
        )
        for value in ("pyhton", "")
    }
    done = runs["pyhton"]
    assert done.stdout == runs[""].stdout  # off, as if unset
    assert re.fullmatch(
        r"ragmon: RAGMON_DECODER='pyhton' is not one of 1, on, python, true, yes \(on\) or 0, compiled, false, no, off \(off\): taken as off\n",
        done.stderr,
    ), done.stderr


@pytest.mark.same_in_both_builds  # builds a copy of the package itself
def test_a_module_that_fails_to_compile_leaves_every_module_python(tmp_path: Path) -> None:
    """setup.py builds mypyc's extensions all or none: when one fails (here the C compiler
    refuses the assembler's file), the ones already built are removed, the build still
    succeeds, and every module runs from source (a module without its shared library could not
    be imported at all)."""
    if shutil.which("gcc") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise RuntimeError("no gcc (CI installs it)")
        pytest.skip("no C compiler")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "ragmon", tmp_path / "ragmon", ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    cc = tmp_path / "cc"
    cc.write_text('#!/bin/sh\ncase "$*" in *pipeline/assembly*|*_walker*) echo "refused" >&2; exit 1;; esac\nexec gcc "$@"\n')
    cc.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in ("RAGMON_PIPELINE", "RAGMON_BUILD_PYTHON")}
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path, env=environ | {"CC": str(cc)}, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = [re.sub(r"\d+", "{}", line) if "compiled nothing" in line else line
            for line in done.stderr.splitlines() if line.startswith("ragmon: ")]
    assert said == [
        "ragmon: compiling ragmon.otlp._walker failed (CompileError: the C compiler exited with 1, "
        "its message above); the protobuf decoder runs as Python",
        "ragmon: compiling ragmon.pipeline.assembly failed (CompileError: the C compiler exited with 1, "
        "its message above); the pipeline runs as Python",
        "ragmon: compiled nothing in {}s with {} job(s); the protobuf decoder and the pipeline ({} modules) run as Python",
    ], done.stderr[-2000:]
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.so"))
    assert left == []
    code = "from ragmon import compiled; print(compiled.pipeline(), len(compiled.compiled_modules()))"
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environ | {"PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout.split() == ["python", "0"], ran.stderr


@pytest.mark.same_in_both_builds  # builds a copy of the package itself
def test_ragmon_build_python_builds_nothing(tmp_path: Path) -> None:
    """``RAGMON_BUILD_PYTHON=1`` at build time: neither the decoder nor the pipeline is compiled
    (mutation testing edits the source, which a compiled module would shadow)."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "ragmon", tmp_path / "ragmon", ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    environ = {k: v for k, v in os.environ.items() if k != "RAGMON_PIPELINE"} | {"RAGMON_BUILD_PYTHON": "1"}
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(tmp_path.rglob("*.so")) == [] and not (tmp_path / "build").exists()


@pytest.mark.same_in_both_builds  # builds a copy of the package itself
def test_a_type_error_in_a_compiled_module_is_named_in_one_line(tmp_path: Path) -> None:
    """mypyc refuses source with a type error: the build goes on without the pipeline and says
    which file and line, and what mypy said (not only ``SystemExit(2)``)."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "ragmon", tmp_path / "ragmon", ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    numbers = tmp_path / "ragmon" / "numbers.py"
    lines = numbers.read_text().splitlines()
    numbers.write_text("\n".join([*lines, "", 'WRONG: int = "not a number"', ""]))
    environ = {k: v for k, v in os.environ.items() if k not in ("RAGMON_PIPELINE", "RAGMON_BUILD_PYTHON")}
    done = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("ragmon: ")]
    assert said == [
        f"ragmon: not compiling the pipeline, mypyc refused it: ragmon/numbers.py:{len(lines) + 2}: error: "
        'Incompatible types in assignment (expression has type "str", variable has type "int")  '
        "[assignment]; the pipeline runs as Python"
    ], done.stderr[-2000:]
