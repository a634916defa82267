"""What the offline commands' flags may say, kept apart from the code that acts on it so the
command line builds its parser without loading that code (``ragmon --version`` imports this,
not the readers, the judge or numpy)."""

from __future__ import annotations

import os
from typing import Final

__all__ = ["DEFAULT_CACHE", "FORMATS", "SCHEMA_CHOICES"]

FORMATS: Final = ("table", "json", "markdown")
"""``--format``: the report's forms."""
SCHEMA_CHOICES: Final = ("auto", "ragmon", "ragas", "deepeval")
"""``--schema``: told from each file's first record (``auto``), or forced."""
DEFAULT_CACHE: Final = os.path.join(".ragmon-cache", "judge.sqlite3")
"""Where ``ragmon eval --judge`` keeps judgements unless ``--cache`` says otherwise."""
