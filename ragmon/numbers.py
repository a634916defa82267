"""The one check numbers from outside pass before any maths: span attributes, feedback bodies,
label files, span timestamps. Finite, in range, whole where a count; anything else is "not
reported" (``None``), which the caller refuses or skips and counts.

A number that passes can be summed over any traffic ragmon bounds without reaching infinity
or losing every digit of precision: ``1e308`` tokens, a grade of ``10**400`` (``math.isfinite``
raises ``OverflowError`` on it) or a span that starts at 0 ns never reach a metric.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "MAX_COUNT",
    "MAX_COST_USD",
    "as_cost",
    "as_count",
    "as_finite",
    "as_grade",
    "as_unit",
    "span_seconds",
]

MAX_COUNT: Final = 10**12
"""The largest count read (tokens, relevance grades): no call reports more, and a larger one
(``1e308``, an ``INT64_MAX`` placeholder) would leave a counter infinite or useless for good."""
_MAX_COUNT_DIGITS: Final = len(str(MAX_COUNT))
MAX_COST_USD: Final = 1e6
"""The largest cost of one model call read: more is a placeholder or a bug, not a price."""


def as_count(value: object) -> int | None:
    """A whole number in [0, ``MAX_COUNT``] (from an int, an integral float or a string of ASCII
    digits), else None. A bool is no count."""
    if type(value) is int:  # the common case first
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and 0 <= value <= MAX_COUNT and value.is_integer() else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= _MAX_COUNT_DIGITS:
        number = int(value)  # isascii: "²" is a digit to isdigit, not to int()
        return number if number <= MAX_COUNT else None
    return None


def as_grade(value: object) -> int | None:
    """A relevance grade: a count (``as_count``; 0 is "not relevant"), so that a ranking's DCG,
    summed over at most millions of grades, stays finite and exact to the unit."""
    return as_count(value)


def as_finite(value: object) -> float | None:
    """A finite float (from an int, a float or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # past 1.8e308
            return None
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def as_cost(value: object) -> float | None:
    """A call's cost in USD: finite, in [0, ``MAX_COST_USD``], else None."""
    number = as_finite(value)
    return number if number is not None and 0 <= number <= MAX_COST_USD else None


def as_unit(value: object) -> float | None:
    """A score in [0, 1] (an int or a float; not a bool, not a string), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return float(value) if 0 <= value <= 1 else None
    return value if 0.0 <= value <= 1.0 else None  # False for NaN


def span_seconds(start_ns: int, end_ns: int, max_seconds: float) -> float | None:
    """A span's duration in seconds when it is in [0, ``max_seconds``]; None otherwise (a span
    that ends before it starts, starts at 0 ns, or ends in the far future)."""
    nanos = end_ns - start_ns
    if nanos < 0:
        return None
    seconds = nanos / 1e9
    return seconds if seconds <= max_seconds else None
