"""The compiled pipeline (``ragmon/compiled.py``): built by ``pip install .`` with mypyc, all
modules or none, reported by ``ragmon_build_info{pipeline}``, and switched off at run time by
``RAGMON_PIPELINE=python``. CI builds it and runs the whole suite both ways; locally, the tests
that need the build skip without it (under ``CI=true`` they fail instead)."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragmon import compiled

ROOT = Path(__file__).resolve().parent.parent
ASKED_PYTHON = os.environ.get("RAGMON_PIPELINE", "").lower() == "python"


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


def test_the_build_is_not_older_than_the_source() -> None:
    """A compiled module shadows its source: after an edit, ``pip install -e .`` must run again
    (or the tests would test the old code)."""
    built = _built()
    if not built:
        _need_build()
    oldest = min(path.stat().st_mtime for path in built)
    stale = [
        name
        for name in compiled.MODULES
        if ROOT.joinpath(*name.split(".")).with_suffix(".py").stat().st_mtime > oldest
    ]
    assert not stale, f"edited since the last build, run `pip install -e .` again: {stale}"


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
    cc.write_text('#!/bin/sh\ncase "$*" in *pipeline/assembly*) echo "refused" >&2; exit 1;; esac\nexec gcc "$@"\n')
    cc.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in ("RAGMON_PIPELINE", "RAGMON_BUILD_PYTHON")}
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path, env=environ | {"CC": str(cc)}, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "a compiled module failed to build; the pipeline runs as Python" in done.stderr
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.so") if "_walker" not in p.name)
    assert left == []
    code = "from ragmon import compiled; print(compiled.pipeline(), len(compiled.compiled_modules()))"
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environ | {"PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout.split() == ["python", "0"], ran.stderr


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
