"""QuantileSketch: relative accuracy against exact quantiles, exact merges, bounded bins.

Reference quantile (DDSketch's rank convention): for values x and q in [0, 1],
``np.sort(x)[floor(q * (n - 1))]`` (numpy's ``method="lower"``). The sketch must be within
α·x of it, plus ``MIN_VALUE`` absolute for values that count as 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.export.sketch import MAX_VALUE, MIN_VALUE, QuantileSketch
from strategies import SETTINGS

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
ALPHA = 0.01


def lower_quantile(values: list[float], q: float) -> float:
    """Exact reference: the floor(q·(n − 1))-th smallest value (0-based)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(ordered[math.floor(q * (len(values) - 1))])


def assert_within(estimate: float | None, exact: float, alpha: float = ALPHA) -> None:
    assert estimate is not None
    assert abs(estimate - exact) <= alpha * exact * (1 + 1e-9) + MIN_VALUE, (estimate, exact)


values_st = st.one_of(
    st.just(0.0),
    st.floats(-9, 9).map(lambda e: 10.0**e),
    st.floats(0.0, 100.0),
)
value_lists = st.lists(values_st, min_size=1, max_size=300)


@SETTINGS
@given(value_lists, st.sampled_from([0.01, 0.005, 0.02]))
def test_quantiles_within_relative_accuracy(values: list[float], alpha: float) -> None:
    sketch = QuantileSketch(alpha)
    for v in values:
        sketch.add(v)
    assert sketch.count == len(values)
    assert math.isclose(sketch.sum, math.fsum(values), rel_tol=1e-12, abs_tol=1e-12)
    for q, estimate in zip(QS, sketch.quantiles(QS)):
        assert_within(estimate, lower_quantile(values, q), alpha)
        assert sketch.quantile(q) == estimate


@SETTINGS
@given(value_lists, value_lists)
def test_merge_equals_sketch_of_concatenation(a: list[float], b: list[float]) -> None:
    left, right, whole = QuantileSketch(), QuantileSketch(), QuantileSketch()
    for v in a:
        left.add(v)
    for v in b:
        right.add(v)
    for v in a + b:
        whole.add(v)
    combined = QuantileSketch.merged([left, right], ALPHA)
    assert combined.bins() == whole.bins() and combined.count == whole.count
    left.merge(right)
    assert left.bins() == whole.bins()
    assert left.count == whole.count
    assert left.quantiles(QS) == whole.quantiles(QS)
    assert math.isclose(left.sum, whole.sum, rel_tol=1e-12, abs_tol=1e-12)
    assert right.count == len(b)  # the argument is not modified


def _edge_values() -> list[float]:
    """Values on and one ulp around bin edges γ^k, where np.log and math.log may disagree."""
    gamma_log = math.log1p(2 * ALPHA / (1 - ALPHA))
    out: list[float] = []
    for k in range(-1000, 1001, 7):
        edge = math.exp(k * gamma_log)
        out += [math.nextafter(edge, 0.0), edge, math.nextafter(edge, math.inf)]
    return out


@SETTINGS
@given(st.lists(st.one_of(values_st, st.sampled_from(_edge_values())), max_size=300))
def test_add_many_equals_add(values: list[float]) -> None:
    one, many = QuantileSketch(), QuantileSketch()
    for v in values:
        one.add(v)
    many.add_many(values)
    assert many.bins() == one.bins()
    assert many.count == one.count
    assert many.quantiles(QS) == one.quantiles(QS)


def test_edge_values_batch_and_scalar_agree() -> None:
    values = _edge_values()
    one, many = QuantileSketch(), QuantileSketch()
    for v in values:
        one.add(v)
    many.add_many(values)
    assert many.bins() == one.bins()
    for q, estimate in zip(QS, many.quantiles(QS)):
        assert_within(estimate, lower_quantile(values, q))


def test_bins_are_bounded_whatever_the_range() -> None:
    rng = np.random.default_rng(7)
    values = 10.0 ** rng.uniform(-300, 300, 50_000)
    sketch = QuantileSketch()
    sketch.add_many(values)
    sketch.add(0.0)
    sketch.add(1e308)
    assert sketch.bin_count <= sketch.max_bins
    assert sketch.max_bins < 2100  # α = 1%, [1e-9, 1e9]: ~2074 bins
    top = sketch.quantile(1.0)
    assert top is not None and math.isclose(top, MAX_VALUE, rel_tol=ALPHA)  # clamped
    assert sketch.quantile(0.0) == 0.0


def test_empty_and_invalid() -> None:
    sketch = QuantileSketch()
    assert sketch.quantile(0.5) is None
    assert sketch.quantiles((0.5, 0.99)) == [None, None]
    assert sketch.count == 0 and sketch.sum == 0.0 and sketch.bins() == []
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            sketch.add(bad)
        with pytest.raises(ValueError):
            sketch.add_many([1.0, bad])
    assert sketch.count == 0
    sketch.add(1.0)
    for q in (-0.1, 1.1, math.nan):
        with pytest.raises(ValueError):
            sketch.quantile(q)
    with pytest.raises(ValueError):
        sketch.merge(QuantileSketch(0.02))
    for alpha in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError):
            QuantileSketch(alpha)


@SETTINGS
@given(value_lists, st.lists(st.integers(0, 300), max_size=5))
def test_compaction_does_not_change_content(values: list[float], cuts: list[int]) -> None:
    plain, compacted = QuantileSketch(), QuantileSketch()
    for i, v in enumerate(values):
        plain.add(v)
        compacted.add(v)
        if i in cuts:
            compacted.compact()
            assert compacted.quantiles(QS) == plain.quantiles(QS)
    assert compacted.bins() == plain.bins()
    assert compacted.quantiles(QS) == plain.quantiles(QS)


def test_copy_is_independent() -> None:
    sketch = QuantileSketch()
    sketch.add_many([1.0, 2.0, 3.0])
    clone = sketch.copy()
    clone.add(100.0)
    assert sketch.count == 3 and clone.count == 4
    assert sketch.bins() != clone.bins()


def test_matches_ddsketch_package() -> None:
    """Same mapping and rank convention as DataDog's ``ddsketch`` (up to float rounding)."""
    import ddsketch

    rng = np.random.default_rng(3)
    values = rng.lognormal(-2.0, 1.5, 20_000).tolist()
    ours, theirs = QuantileSketch(ALPHA), ddsketch.DDSketch(ALPHA)
    for v in values:
        ours.add(v)
        theirs.add(v)
    for q in QS:
        estimate = ours.quantile(q)
        assert estimate is not None
        assert math.isclose(estimate, theirs.get_quantile_value(q), rel_tol=1e-9)
