"""Session hooks. One only: the mutation check's test budget.

(Test kinds: a file whose tests start processes — ``ragmon run``, promtool, Prometheus,
Chromium, a build — or bound wall time is marked ``pytestmark = pytest.mark.system``;
``pytest -m "not system"`` runs the fast unit tests alone. ``tests/test_layout.py`` checks
that every file starting processes carries the mark.)

tools/mutation.py sets ``RAGMON_MUTATION_MAX_TEST_SECONDS``; while mutmut runs the tests against
a mutant (its ``MUTANT_UNDER_TEST`` names one), tests whose duration mutmut recorded in
``mutants/mutmut-stats.json`` exceeds that bound are deselected, so a mutant is judged by the
fast tests (the slow ones — big scrapes, thousands of connections, fuzzing — are there for other
promises). A mutant left with no test at all ends "no tests", which the tool reports. Ordinary
test runs are unaffected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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
