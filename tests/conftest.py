"""Session hooks: the mutation check's test budget, and each test module's heap kept young.

Each module's tests run with what the process held before the module frozen out of the cycle
collector (``gc.freeze``; thawed, and collectable again, when the module ends). Late in the
suite the test process holds millions of objects from earlier modules; without this, every full
collection, whether a test's own ``gc.collect()`` before a memory measure or one the allocator
starts, walks them all (a second or more each on a slow machine) and stalls the module's
servers' event loops as long. A module's own objects are collected as usual.

(Test kinds: a file whose tests start processes — ``ragmon run``, promtool, Prometheus,
Chromium, a build — or bound wall time is marked ``pytestmark = pytest.mark.system``;
``pytest -m "not system"`` runs the fast unit tests alone. ``tests/test_layout.py`` checks
that every file starting processes carries the mark.)

Hypothesis's per-example deadline is off for every test (the ``ragmon`` profile): tests share
the cores, and no test here promises speed (``bench/`` measures it).

tools/mutation.py sets ``RAGMON_MUTATION_MAX_TEST_SECONDS``; while mutmut runs the tests against
a mutant (its ``MUTANT_UNDER_TEST`` names one), tests whose duration mutmut recorded in
``mutants/mutmut-stats.json`` exceeds that bound are deselected, so a mutant is judged by the
fast tests (the slow ones — big scrapes, thousands of connections, fuzzing — are there for other
promises). A mutant left with no test at all ends "no tests", which the tool reports. Ordinary
test runs are unaffected.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ragmon", deadline=None)
settings.load_profile("ragmon")

BUDGET_VARIABLE = "RAGMON_MUTATION_MAX_TEST_SECONDS"


def _recorded_durations() -> dict[str, float]:
    for place in (Path.cwd() / "mutants", Path.cwd()):
        stats = place / "mutmut-stats.json"
        if stats.exists():
            durations: dict[str, float] = json.loads(stats.read_text())["duration_by_test"]
            return durations
    return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    budget = os.environ.get(BUDGET_VARIABLE)
    if not budget or "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    durations = _recorded_durations()
    slow = [item for item in items if durations.get(item.nodeid, 0.0) > float(budget)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if durations.get(item.nodeid, 0.0) <= float(budget)]


@pytest.fixture(autouse=True, scope="module")
def young_heap() -> Iterator[None]:
    """What earlier modules left frozen while this module runs (the module docstring)."""
    gc.freeze()
    yield
    gc.unfreeze()
