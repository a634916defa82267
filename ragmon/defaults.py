"""Defaults that the configuration and the command line both state, in a module that imports
nothing (the command line builds its help from them without loading ``ragmon.config``)."""

from __future__ import annotations

from typing import Final

__all__ = ["DOCUMENT_ID", "K"]

K: Final[tuple[int, ...]] = (1, 3, 5, 10)
"""``[scoring] k`` and ``--k``: the cut-offs of the retrieval metrics."""
DOCUMENT_ID: Final[tuple[str, ...]] = ("document.id",)
"""``[scoring] document_id`` and ``--document-id``: where a document's id is read, in order."""
