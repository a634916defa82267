"""Shared hypothesis strategies for the retrieval-metric tests.

Document ids come from a small alphabet so that rankings repeat ids, rankings and labels
overlap, and some labelled documents are never retrieved. ``SETTINGS`` is the profile every
property test uses: derandomized (the same examples on every run), no example database and no
deadline, so results do not depend on the machine's speed or on earlier runs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = [
    "DOC_IDS",
    "SETTINGS",
    "binary_relevance",
    "cutoffs",
    "doc_ids",
    "graded_relevance",
    "labelled_relevance",
    "queries",
    "rankings",
    "relevant_count",
    "unlabelled_relevance",
]

DOC_IDS: tuple[str, ...] = tuple(f"d{i}" for i in range(12))
"""The whole id alphabet: small enough that collisions and duplicates are common."""

MAX_RANKING = 20
MAX_LABELS = len(DOC_IDS)
MAX_GRADE = 4


def _settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


SETTINGS = _settings(150)
"""Default profile for the property tests."""

FEW = _settings(40)
"""Profile for the costlier tests (batch calls over many queries)."""

doc_ids: st.SearchStrategy[str] = st.sampled_from(DOC_IDS)
"""A single document id."""

rankings: st.SearchStrategy[list[str]] = st.lists(doc_ids, max_size=MAX_RANKING)
"""A ranking, best first: possibly empty, possibly with repeated ids."""

grades: st.SearchStrategy[int] = st.integers(min_value=0, max_value=MAX_GRADE)
"""An integer relevance grade, 0 (not relevant) .. 4."""

graded_relevance: st.SearchStrategy[dict[str, int]] = st.dictionaries(
    doc_ids, grades, max_size=MAX_LABELS
)
"""``id -> grade`` with grades 0..4: possibly empty, possibly all zero."""

labelled_relevance: st.SearchStrategy[dict[str, int]] = st.tuples(
    st.dictionaries(doc_ids, grades, max_size=MAX_LABELS),
    doc_ids,
    st.integers(min_value=1, max_value=MAX_GRADE),
).map(lambda t: {**t[0], t[1]: t[2]})
"""``id -> grade`` with at least one grade above 0 (the query can be scored)."""

unlabelled_relevance: st.SearchStrategy[dict[str, int]] = st.dictionaries(
    doc_ids, st.just(0), max_size=MAX_LABELS
)
"""``id -> 0`` only, possibly empty: no document is relevant."""

binary_relevance: st.SearchStrategy[frozenset[str]] = st.frozensets(doc_ids, max_size=MAX_LABELS)
"""A set of relevant ids (grade 1 each); possibly empty."""

cutoffs: st.SearchStrategy[int] = st.integers(min_value=1, max_value=MAX_RANKING + 5)
"""A cut-off k, sometimes larger than any ranking."""

queries: st.SearchStrategy[tuple[list[str], dict[str, int]]] = st.tuples(rankings, graded_relevance)
"""One query: its ranking and graded relevance (labelled or not)."""


def relevant_count(relevance: Any) -> int:
    """Number of documents with a grade above 0 (a plain collection counts every id)."""
    if isinstance(relevance, dict):
        return sum(1 for g in relevance.values() if g > 0)
    return len(set(relevance))
