"""A small JSON path: ``"documents[*].id"`` parsed once, then the values it selects.

Used by the prober to read ids and answers from a service's response, and by the
configuration check to refuse a path it cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeAlias

__all__ = ["PathStep", "parse_path", "select"]

PathStep: TypeAlias = "str | int | None"
"""A key, a list index, or ``None`` for every element of a list (``[*]``)."""

_PATH = re.compile(r"(?:[^.\[\]]+|\[(?:\*|\d+)\])(?:\.[^.\[\]]+|\[(?:\*|\d+)\])*")
_STEP = re.compile(r"([^.\[\]]+)|\[(\*|\d+)\]")


def parse_path(text: str) -> tuple[PathStep, ...]:
    """``"documents[*].id"`` -> ``("documents", None, "id")``: keys joined by ``.``, ``[N]`` a
    list index, ``[*]`` every element of a list; ``ValueError`` for anything else."""
    if not isinstance(text, str) or not _PATH.fullmatch(text):
        raise ValueError(f'{text!r} is not a path such as "answer" or "documents[*].id"')
    return tuple(key or (None if index == "*" else int(index)) for key, index in _STEP.findall(text))


def _children(value: Any, step: PathStep) -> list[Any] | None:
    if step is None:
        return list(value) if isinstance(value, list) else None
    if isinstance(step, int):
        return [value[step]] if isinstance(value, list) and step < len(value) else None
    return [value[step]] if isinstance(value, dict) and step in value else None


def select(value: Any, path: Sequence[PathStep]) -> list[Any] | None:
    """The values at ``path`` in parsed JSON. ``None`` when a step before the first ``[*]``
    finds nothing; after it, elements lacking a step are skipped (``[*]`` of ``[]`` is ``[]``)."""
    current = [value]
    fanned = False
    for step in path:
        found: list[Any] = []
        for item in current:
            children = _children(item, step)
            if children is None and not fanned:
                return None
            found.extend(children or ())
        current = found
        fanned = fanned or step is None
    return current
