"""The one check numbers from outside pass (``ragmon.numbers``): exact answers at the edges."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon import numbers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-1, None), (0, 0), (7, 7), (2.0, 2), (2.5, None), ("12", 12), ("x", None),
        (True, None), (False, None), (None, None), (math.nan, None), (math.inf, None),
        (-0.0, 0), ("0.5", None), ("1e400", None), ("", None), (3.0, 3), (1e12, 10**12),
        (("d1", 2), None), (b"d1", None), ("d1", None), (10**12, 10**12), (10**12 + 1, None),
        (1e20, None), (1e308, None), (2**63 - 1, None), ("1000000000000", 10**12),
        ("1000000000001", None), ("0" * 13, 0), ("0" * 14, None), ("9" * 5000, None), ("²", None),
        ("١٢", None), (" 12", None), (10**400, None), (-(10**400), None),
    ],
)
def test_as_count(value: Any, expected: int | None) -> None:
    """Whole, non-negative counts up to MAX_COUNT only (a larger one would poison a counter for
    good); booleans are not counts; only ASCII digits (``int("²")`` raises)."""
    assert numbers.as_count(value) == expected
    assert numbers.as_grade(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0), (-3, -3.0), (2.5, 2.5), ("1.5", 1.5), ("-2", -2.0), (10**400, None), (-(10**400), None),
        (2**1023, float(2**1023)), ("1e400", None), ("nan", None), ("inf", None), (math.nan, None),
        (-math.inf, None), (True, None), (None, None), ("x", None), (b"1", None), ((1,), None),
    ],
)
def test_as_finite(value: Any, expected: float | None) -> None:
    """Finite floats only: a huge int (``float()`` raises on it) or a NaN text is not reported."""
    assert numbers.as_finite(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0), (1, 1.0), (0.25, 0.25), (1.0, 1.0), (-0.0, -0.0), (1.0000001, None), (-1e-300, None),
        (2, None), (10**400, None), (math.nan, None), (math.inf, None), (True, None), ("0.5", None), (None, None),
    ],
)
def test_as_unit(value: Any, expected: float | None) -> None:
    """Scores in [0, 1] given as numbers; anything else (a bool, a string, NaN) is no score."""
    assert numbers.as_unit(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, 0.0), (1e6, 1e6), (1e6 + 1, None), (-0.01, None), ("2.5", 2.5), (1e308, None), (math.inf, None)],
)
def test_as_cost(value: Any, expected: float | None) -> None:
    assert numbers.as_cost(value) == expected


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 0, 0.0), (10, 10 + 86_400 * 10**9, 86_400.0), (10, 11 + 86_400 * 10**9, None),
        (5, 4, None), (0, 1_765_000_000 * 10**9, None), (1_765_000_000 * 10**9, 2**64 - 1, None),
        (1_765_000_000 * 10**9, 1_765_000_000 * 10**9 + 1_500_000_000, 1.5),
    ],
)
def test_span_seconds(start: int, end: int, expected: float | None) -> None:
    """A duration in [0, max] seconds, else None: a span starting at 0 ns (1.8e9 s) or ending in
    the far future never becomes a latency."""
    assert numbers.span_seconds(start, end, 86_400.0) == expected


@given(st.integers() | st.floats(allow_nan=True) | st.text(max_size=30))
def test_a_number_that_passes_sums_finitely(value: Any) -> None:
    """Whatever passes as a count sums to a finite float over a million of them; as a finite
    number it is finite."""
    count = numbers.as_count(value)
    if count is not None:
        assert math.isfinite(float(count) * 1e6)
    finite = numbers.as_finite(value)
    assert finite is None or math.isfinite(finite)
