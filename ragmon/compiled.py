"""Which of ragmon's modules run compiled.

``pip install .`` compiles the per-request path (assembly, convention extraction, scoring,
metric updates) with mypyc: the same typed source, made a C extension where a C compiler works
(the image always has one); elsewhere, or when the build fails, every module runs as Python,
with the same behaviour (CI runs the whole test suite both ways). ``ragmon_build_info``'s
``pipeline`` label says which runs; ``RAGMON_PIPELINE=python`` runs the Python source even
where the extensions are built (``ragmon/__init__.py`` asks ``prefer_source`` before anything
else is imported). ``setup.py`` reads ``MODULES`` from this file, so it imports nothing but the
standard library.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

MODULES: tuple[str, ...] = (
    "ragmon.model",
    "ragmon.numbers",
    "ragmon.conventions._common",
    "ragmon.conventions._extract",
    "ragmon.conventions.content",
    "ragmon.conventions.genai",
    "ragmon.conventions.openinference",
    "ragmon.conventions.openllmetry",
    "ragmon.pipeline.assembly",
    "ragmon.pipeline.queue",
    "ragmon.scoring.records",
    "ragmon.export.exporter",
    "ragmon.export.labels",
    "ragmon.export.series",
    "ragmon.judge.lexical",
    "ragmon.judge.sampling",
    "ragmon.groundtruth.feedback",
    "ragmon.metrics.kernels",
)
"""Compiled by mypyc, all or none. Not here: modules whose public functions check argument
types themselves (``ragmon.metrics.retrieval``: mypyc would check them first, with another
error; its kernels are here) and modules whose tests replace their functions
(``ragmon.scoring.pricing``)."""


def compiled_modules() -> list[str]:
    """The modules of ``MODULES`` that were loaded from a compiled extension."""
    return [
        name
        for name in MODULES
        if str(getattr(importlib.import_module(name), "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))
    ]


def pipeline() -> str:
    """``compiled`` if every module of ``MODULES`` runs compiled, else ``python``."""
    return "compiled" if len(compiled_modules()) == len(MODULES) else "python"


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``MODULES`` as their ``.py`` source, before the compiled ones."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in MODULES:
            return None
        source = Path(__file__).resolve().parent.joinpath(*fullname.split(".")[1:]).with_suffix(".py")
        return importlib.util.spec_from_file_location(fullname, source)


def prefer_source(environ: Mapping[str, str] = os.environ) -> bool:
    """With ``RAGMON_PIPELINE=python`` in ``environ``, make the modules of ``MODULES`` load from
    source from now on; whether it did."""
    if environ.get("RAGMON_PIPELINE", "").lower() != "python":
        return False
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
    return True
