"""Which of ragmon's modules run compiled, and the switches that choose.

``pip install .`` compiles the per-request path (assembly, convention extraction, scoring,
metric updates) with mypyc: the same typed source, made a C extension where a C compiler works
(the image always has one); elsewhere, or when the build fails, every module runs as Python,
with the same behaviour (CI runs the whole test suite both ways). ``ragmon_build_info``'s
``pipeline`` label says which runs; ``RAGMON_PIPELINE=python`` runs the Python source even
where the extensions are built (``ragmon/__init__.py`` asks ``prefer_source`` before anything
else is imported). ``setup.py`` reads ``MODULES`` and ``switch`` from this file, so it imports
nothing but the standard library.

The three switches, read by ``switch`` alone and spelt the same way (the value stripped and
lower-cased; ``python``, ``1``, ``true``, ``yes`` or ``on`` turn it on; unset, empty,
``compiled``, ``0``, ``false``, ``no`` or ``off`` leave it off; anything else leaves it off
with a one-line warning naming the variable):

- ``RAGMON_PIPELINE``: the modules of ``MODULES`` run from their Python source;
- ``RAGMON_DECODER``: the pure-Python protobuf decoder runs (``use_compiled_decoder``);
- ``RAGMON_BUILD_PYTHON``: ``pip install`` builds neither (e.g. for mutation testing).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
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
    "ragmon.export.calls",
    "ragmon.export.exporter",
    "ragmon.export.feedback",
    "ragmon.export.judgements",
    "ragmon.export.labels",
    "ragmon.export.recording",
    "ragmon.export.requests",
    "ragmon.export.retrieval",
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


_LOGGER = "ragmon.compiled"
"""One line per misspelt switch (logging's last-resort handler prints it bare before logging is
set up; ``logging`` is imported only then, as this module loads with every command)."""

PIPELINE_SWITCH = "RAGMON_PIPELINE"
DECODER_SWITCH = "RAGMON_DECODER"
BUILD_SWITCH = "RAGMON_BUILD_PYTHON"
ON_WORDS = frozenset({"python", "1", "true", "yes", "on"})
OFF_WORDS = frozenset({"", "compiled", "0", "false", "no", "off"})


def switch(variable: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the switch ``variable`` is on in ``environ`` (the rules in the module's docstring)."""
    value = environ.get(variable, "").strip().lower()
    if value in ON_WORDS:
        return True
    if value not in OFF_WORDS:
        import logging

        logging.getLogger(_LOGGER).warning(
            "ragmon: %s=%r is not one of %s (on) or %s (off): taken as off",
            variable, environ[variable], ", ".join(sorted(ON_WORDS)), ", ".join(sorted(OFF_WORDS - {""})),
        )
    return False


def use_compiled_decoder(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``ragmon.otlp.decode`` takes the compiled decoder when it is built (unless
    ``RAGMON_DECODER`` is on)."""
    return not switch(DECODER_SWITCH, environ)


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


class _SourceFinder:
    """Finds the modules of ``MODULES`` as their ``.py`` source, before the compiled ones."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in MODULES:
            return None
        import importlib.util

        package = os.path.dirname(os.path.realpath(__file__))
        source = os.path.join(package, *fullname.split(".")[1:]) + ".py"
        return importlib.util.spec_from_file_location(fullname, source)


def prefer_source(environ: Mapping[str, str] = os.environ) -> bool:
    """With ``RAGMON_PIPELINE`` on in ``environ``, make the modules of ``MODULES`` load from
    source from now on; whether it did."""
    if not switch(PIPELINE_SWITCH, environ):
        return False
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
    return True
