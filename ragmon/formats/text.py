"""Text helpers shared by the offline evaluator and the golden-set matcher."""

from __future__ import annotations

import unicodedata

__all__ = ["normalize_query"]


def normalize_query(text: str) -> str:
    """Key for matching a query by its text: NFKC, case-folded, whitespace collapsed.

    ``"  What is  RAG?\\n"`` and ``"what is rag?"`` give the same key.
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
