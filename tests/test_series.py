"""ragmon.export.series against prometheus_client: the same values, in batches, give the same scrape."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import prometheus_client
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector
from strategies import SETTINGS

from ragmon.export.series import (
    BULK_MIN,
    Buckets,
    CounterCell,
    CounterFamily,
    FoldedCell,
    FoldedSeries,
    HistogramFamily,
    HistogramSeries,
    SeriesCollector,
    running_sum,
)

BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5)

values_st = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=-1.0, max_value=3.0),
        st.sampled_from([*BOUNDS, 0.0, -0.0, math.inf, -math.inf, math.nan]),
    ),
    max_size=3 * BULK_MIN,
)
"""Both paths (Python below ``BULK_MIN`` values, numpy above), bucket edges, NaN and ±inf."""

chunks_st = st.lists(st.integers(min_value=1, max_value=2 * BULK_MIN), max_size=6)
"""Batch sizes to split a list of values into (the rest is one last batch)."""


def _batches(values: Sequence[float], sizes: Sequence[int]) -> Iterator[tuple[int, int]]:
    start = 0
    for size in sizes:
        yield start, min(start + size, len(values))
        start = min(start + size, len(values))
    yield start, len(values)


def _masked(text: bytes) -> str:
    """Exposition with ``_created`` values and exemplar timestamps blanked."""
    out = re.sub(r"^(\S+_created(\{[^}]*\})?) \S+$", r"\1 <t>", text.decode(), flags=re.MULTILINE)
    return re.sub(r'(# \{trace_id="[^"]*"\} \S+) \S+$', r"\1 <t>", out, flags=re.MULTILINE)


def _scrapes(registry: CollectorRegistry) -> tuple[str, str]:
    return _masked(generate_latest(registry)), _masked(generate_openmetrics(registry))


def _registry(*collectors: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)
    return registry


@SETTINGS
@given(values_st)
def test_buckets_count_per_the_le_rule(values: list[float]) -> None:
    bounds = (*BOUNDS, math.inf)
    counts, last = Buckets(BOUNDS).count(values, last=True)
    want_counts, want_last = [0] * len(bounds), [-1] * len(bounds)
    for i, v in enumerate(values):
        if not math.isnan(v):
            b = min(j for j, le in enumerate(bounds) if v <= le)
            want_counts[b] += 1
            want_last[b] = i
    assert (counts, last) == (want_counts, want_last)
    assert Buckets(BOUNDS).count(values) == (want_counts, [])


def test_buckets_labels_and_validation() -> None:
    assert Buckets((0.005, 1, 60)).labels == ("0.005", "1.0", "60.0", "+Inf")
    assert Buckets((1.0, math.inf)).bounds == (1.0, math.inf)
    assert Buckets((0.5,)).bounds == (0.5, math.inf)  # one bound: +Inf still appended
    with pytest.raises(ValueError):
        Buckets((1.0, 0.5))
    with pytest.raises(ValueError):
        Buckets(())


def test_bulk_counts_have_an_entry_for_every_bucket() -> None:
    """A numpy-sized batch that fills only the low buckets still reports every bucket."""
    buckets = Buckets(BOUNDS)
    assert buckets.count([0.05] * BULK_MIN) == ([BULK_MIN, 0, 0, 0, 0, 0], [])
    assert buckets.count([0.05] * BULK_MIN, last=True) == ([BULK_MIN, 0, 0, 0, 0, 0], [BULK_MIN - 1, -1, -1, -1, -1, -1])


@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False), values_st)
def test_running_sum_adds_left_to_right(start: float, values: list[float]) -> None:
    want = start
    for v in values:
        want += v
    got = running_sum(start, values)
    assert got == want or (math.isnan(got) and math.isnan(want))


@SETTINGS
@given(values_st, chunks_st, st.sampled_from(["a", "b"]))
def test_histogram_scrapes_like_prometheus_client(values: list[float], sizes: list[int], label: str) -> None:
    reference = CollectorRegistry(auto_describe=True)
    histogram = Histogram("h", "Doc.", ["x", "y"], buckets=BOUNDS, registry=reference)
    plain = Histogram("p", "Plain.", ["x"], buckets=BOUNDS, registry=reference)
    ids = [f"{i:032x}" for i in range(len(values))]
    for value, trace_id in zip(values, ids):
        histogram.labels(label, "1").observe(value, {"trace_id": trace_id})
        plain.labels(label).observe(value)
    family = HistogramFamily("h", "Doc.", ["x", "y"], BOUNDS, lambda: 1.0)
    plain_family = HistogramFamily("p", "Plain.", ["x"], BOUNDS, lambda: 1.0)
    ours = _registry(SeriesCollector([family, plain_family], before=lambda: None))
    if not values:  # a series is made on its first value, like the reference's child
        assert _scrapes(ours) == _scrapes(reference)
        return
    series, plain_series = family.series((label, "1")), plain_family.series((label,))
    for start, end in _batches(values, sizes):
        family.add(series, values[start:end], ids[start:end], 2.0)
        plain_family.add(plain_series, values[start:end], None, 2.0)
    assert _scrapes(ours) == _scrapes(reference)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(min_value=0.0, allow_infinity=False)), max_size=20))
def test_counter_scrapes_like_prometheus_client(increments: list[tuple[str, float]]) -> None:
    reference = CollectorRegistry(auto_describe=True)
    counter = Counter("c", "Doc.", ["x"], registry=reference)
    empty = Counter("e", "Never incremented.", ["x"], registry=reference)
    family = CounterFamily("c", "Doc.", ["x"], lambda: 1.0)
    ours = _registry(SeriesCollector([family, CounterFamily("e", "Never incremented.", ["x"], lambda: 1.0)], lambda: None))
    for label, amount in increments:
        counter.labels(label).inc(amount)
        family.cell((label,)).inc(amount)
    assert empty.describe()  # keeps the reference's empty family registered
    assert _scrapes(ours) == _scrapes(reference)


def test_counter_refuses_negative_amounts_like_prometheus_client() -> None:
    cell = CounterFamily("c", "Doc.", [], lambda: 1.0).cell(())
    with pytest.raises(ValueError) as ours:
        cell.inc(-1)
    with pytest.raises(ValueError) as reference:
        Counter("c", "Doc.", registry=None).inc(-1)
    assert str(ours.value) == str(reference.value)
    assert cell.value == 0.0


@contextmanager
def _created_disabled() -> Iterator[None]:
    was = bool(getattr(prometheus_client.metrics, "_use_created", True))
    prometheus_client.disable_created_metrics()
    try:
        yield
    finally:
        if was:
            prometheus_client.enable_created_metrics()


def test_created_samples_follow_prometheus_clients_switch() -> None:
    family = HistogramFamily("h", "Doc.", ["x"], BOUNDS, lambda: 1.0)
    counter = CounterFamily("c", "Doc.", ["x"], lambda: 1.0)
    family.add(family.series(("a",)), [0.3], ["t"], 2.0)
    counter.cell(("a",)).inc()
    registry = _registry(SeriesCollector([family, counter], lambda: None))
    with _created_disabled():
        assert "_created" not in generate_latest(registry).decode()
    if getattr(prometheus_client.metrics, "_use_created", True):
        assert 'h_created{x="a"} 1.0' in generate_latest(registry).decode()


def test_collector_runs_before_on_collect_only() -> None:
    calls: list[str] = []
    before: Callable[[], None] = lambda: calls.append("before")
    registry = _registry(SeriesCollector([CounterFamily("c", "Doc.", [], lambda: 1.0)], before))
    assert calls == []  # registration describes, it does not collect
    generate_latest(registry)
    assert calls == ["before"]


def test_series_are_made_once_and_stamped_by_the_wall_clock() -> None:
    times = iter([10.0, 20.0])
    family = HistogramFamily("h", "Doc.", ["x"], BOUNDS, lambda: next(times))
    series = family.series(("a",))
    assert family.series(("a",)) is series
    assert series.created == 10.0
    family.add(series, [0.2, 0.2, 5.0], ["t1", "t2", "t3"], 30.0)
    assert series.counts == [0, 2, 0, 0, 0, 1]
    assert series.exemplars[1] == ("t2", 0.2, 30.0)  # the latest wins
    assert series.exemplars[5] == ("t3", 5.0, 30.0)
    assert series.sum == 5.4


# -- series budget -----------------------------------------------------------------------------


def test_counter_budget_folds_new_label_sets_into_other_and_counts_each_increment() -> None:
    family = CounterFamily("c", "Doc.", ["service", "k"], lambda: 1.0, max_series=2, fold_labels={"service"})
    family.cell(("a", "1")).inc(2)
    family.cell(("b", "1")).inc()
    folded = family.cell(("c", "1"))
    folded.inc(5)
    folded.inc(1)
    family.cell(("d", "3")).inc()
    assert family.cell(("a", "1")).inc() is None  # an own series stays own
    values = {labels: cell.value for labels, cell in family._made.items()}
    assert values == {("a", "1"): 3.0, ("b", "1"): 1.0, ("other", "1"): 6.0, ("other", "3"): 1.0}
    assert family.folded == 3  # increments, not amounts
    assert len(family) == 4 and sum(values.values()) == 11.0


def test_a_group_of_label_sets_is_made_together_or_folds_together() -> None:
    family = CounterFamily("c", "Doc.", ["service", "k"], lambda: 1.0, max_series=3, fold_labels={"service"})
    first = family.cells([("a", "1"), ("a", "3")])
    second = family.cells([("b", "1"), ("b", "3")])  # one place left: both fold
    assert all(isinstance(cell, CounterCell) for cell in first)
    assert all(isinstance(cell, FoldedCell) for cell in second)
    assert family.cells([("a", "3")]) == [first[1]]  # known label sets need no room
    assert family.cells([("c", "1")])[0] is not second[0]  # one place left: taken
    histogram = HistogramFamily("h", "Doc.", ["service", "k"], BOUNDS, lambda: 1.0, max_series=1, fold_labels={"service"})
    own, *folded = histogram.series_group([("a", "1")]) + histogram.series_group([("b", "1"), ("b", "3")])
    assert isinstance(own, HistogramSeries) and all(isinstance(s, FoldedSeries) for s in folded)


def test_histogram_budget_adds_folded_values_to_other_exactly() -> None:
    family = HistogramFamily("h", "Doc.", ["service", "stage"], BOUNDS, lambda: 1.0, max_series=1, fold_labels={"service"})
    family.add(family.series(("a", "total")), [0.2, 3.0], ["t1", "t2"], 2.0)
    folded = family.series(("b", "total"))
    family.add(folded, [0.2, 0.3, 0.4], ["t3", "t4", "t5"], 2.0)
    family.add(family.series(("c", "total")), [0.05], None, 2.0)
    other = family._made[("other", "total")]
    assert (other.counts, other.sum) == ([1, 1, 2, 0, 0, 0], 0.2 + 0.3 + 0.4 + 0.05)
    assert family.folded == 4
    assert sum(sum(s.counts) for s in family._made.values()) == 6
    text = generate_latest(_registry(SeriesCollector([family], lambda: None))).decode()
    assert 'h_count{service="other",stage="total"} 4.0' in text and 'h_count{service="a",stage="total"} 2.0' in text


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["x", "y"]), st.floats(0, 10)), max_size=60), st.integers(0, 6))
def test_budget_keeps_totals_exact_and_series_bounded(increments: list[tuple[int, str, float]], budget: int) -> None:
    family = CounterFamily("c", "Doc.", ["service", "kind"], lambda: 1.0, max_series=budget, fold_labels={"service"})
    for service, kind, amount in increments:
        family.cell((f"s{service}", kind)).inc(amount)
    values = {labels: cell.value for labels, cell in family._made.items()}
    own = [labels for labels in values if labels[0] != "other"]
    assert len(own) <= budget and len(values) <= budget + 2
    for kind in ("x", "y"):
        want = running_sum(0.0, [a for _, k, a in increments if k == kind])
        assert math.isclose(sum(v for labels, v in values.items() if labels[1] == kind), want, rel_tol=1e-9, abs_tol=1e-9)
    first_seen = list(dict.fromkeys((f"s{s}", k) for s, k, _ in increments))
    assert family.folded == sum(1 for s, k, _ in increments if (f"s{s}", k) not in first_seen[:budget])


def test_collected_families_are_copies_built_on_first_read() -> None:
    family = HistogramFamily("h", "Doc.", ["x"], BOUNDS, lambda: 1.0)
    counter = CounterFamily("c", "Doc.", ["x"], lambda: 1.0)
    series = family.series(("a",))
    family.add(series, [0.3], ["t1"], 2.0)
    counter.cell(("a",)).inc()
    collected = [family.collect(), counter.collect()]
    family.add(series, [0.3, 0.3], ["t2", "t3"], 2.0)  # after the collect: not in it
    counter.cell(("a",)).inc()
    assert [s.value for s in collected[0].samples if s.name == "h_count"] == [1.0]
    assert [s.value for s in collected[1].samples if s.name == "c_total"] == [1.0]


@pytest.mark.parametrize("max_series", [-1, True, 1.5])
def test_a_series_budget_must_be_a_whole_number_of_series(max_series: object) -> None:
    with pytest.raises(ValueError):
        CounterFamily("c", "Doc.", ["x"], lambda: 1.0, max_series=max_series)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        HistogramFamily("h", "Doc.", ["x"], BOUNDS, lambda: 1.0, max_series=max_series)  # type: ignore[arg-type]


def test_known_label_sets_stay_own_when_their_group_folds() -> None:
    """A group with a new label set past the budget folds only the new ones."""
    family = CounterFamily("c", "Doc.", ["service", "k"], lambda: 1.0, max_series=1, fold_labels={"service"})
    own = family.cell(("a", "1"))
    known, new = family.cells([("a", "1"), ("b", "1")])
    assert known is own and isinstance(new, FoldedCell)
    histogram = HistogramFamily("h", "Doc.", ["service", "k"], BOUNDS, lambda: 1.0, max_series=1, fold_labels={"service"})
    own_series = histogram.series(("a", "1"))
    known_series, new_series = histogram.series_group([("a", "1"), ("b", "1")])
    assert known_series is own_series and isinstance(new_series, FoldedSeries)


def test_folding_into_an_own_other_series_keeps_its_values() -> None:
    """Traffic may name a service ``other`` (e.g. folded by the label limiter) before the budget
    fills: later folded label sets add to that series, never restart it."""
    family = CounterFamily("c", "Doc.", ["service", "k"], lambda: 1.0, max_series=1, fold_labels={"service"})
    family.cell(("other", "1")).inc(2)
    family.cell(("b", "1")).inc(3)
    assert {labels: cell.value for labels, cell in family._made.items()} == {("other", "1"): 5.0}
    histogram = HistogramFamily("h", "Doc.", ["service", "k"], BOUNDS, lambda: 1.0, max_series=1, fold_labels={"service"})
    histogram.add(histogram.series(("other", "1")), [0.2], None, 2.0)
    histogram.add(histogram.series(("b", "1")), [0.3], None, 2.0)
    other = histogram._made[("other", "1")]
    assert (list(histogram._made), other.counts, other.sum) == ([("other", "1")], [0, 1, 1, 0, 0, 0], 0.5)


def test_a_fold_series_is_stamped_created_like_any_other() -> None:
    family = CounterFamily("c", "Doc.", ["service"], lambda: 7.0, max_series=0, fold_labels={"service"})
    family.cell(("a",)).inc()
    text = generate_latest(_registry(SeriesCollector([family], lambda: None))).decode()
    assert 'c_total{service="other"} 1.0' in text
    if getattr(prometheus_client.metrics, "_use_created", True):
        assert 'c_created{service="other"} 7.0' in text
