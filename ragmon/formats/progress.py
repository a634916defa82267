"""The progress bar ``eval`` and ``compare`` show on stderr while they read or judge."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["PROGRESS_MIN_BYTES", "progress_bar"]

PROGRESS_MIN_BYTES = 1 << 20
"""Files at least this large get a progress bar (when progress is on)."""


def progress_bar(total: int, unit: str, desc: str) -> Any:
    """The progress bar of ``eval`` and ``compare`` on stderr (a ``tqdm``; the caller closes it).
    Callers show it only when stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, unit_scale=unit == "B", desc=desc, file=sys.stderr, leave=False, mininterval=0.2)
