"""Edges of the rolling windows, as small exact examples (each a few milliseconds).

The property tests in tests/test_windows.py compare whole event streams with a recomputation;
these pin the places a stream rarely reaches: the extreme finite values, the numpy path of
``observe_many`` with invalid, late and dropped batches, slot 0, sketches shared with a
snapshot, fold series coming and going, when a full store sweeps, and configuration limits.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from ragmon.export.sketch import QuantileSketch
from ragmon.export.windows import (
    Outcome,
    RollingMean,
    RollingQuantiles,
    WindowReading,
    WindowStore,
)

LARGEST = sys.float_info.max
QS = (0.5, 0.95, 0.99)
BULK = 40
"""Values per batch: past both stores' one-at-a-time threshold, so ``observe_many`` uses numpy."""


def close(estimate: float | None, exact: float) -> bool:
    """Within the default relative accuracy (1 %) of ``exact``."""
    return estimate is not None and abs(estimate - exact) <= 0.01 * exact * (1 + 1e-9)


def fold_service(key: tuple[str, str]) -> tuple[str, str]:
    return ("other", key[1])


def test_rolling_mean_add_many_counts_and_sums_as_add_does() -> None:
    """``RollingMean.add_many`` gives each bucket the count and (sequentially rounded) sum of
    ``add`` on each value in turn, accepts the extreme finite values and rejects the rest."""
    one, many = RollingMean(10.0, 5), RollingMean(10.0, 5)  # w = 2 s
    script = [
        (0.0, [0.1, 0.2, 0.3]),
        (0.5, [1e16, 1.0, -1e16, 0.7]),
        (3.0, [2.5]),
        (3.0, []),
        (12.0, [4.0, 5.0, 6.0]),
    ]
    for now, values in script:
        for value in values:
            assert one.add(value, now)
        assert many.add_many(values, now)
    assert many.summary(12.0) == (3, 15.0)
    for now in (12.0, 13.9, 19.9, 40.0):
        assert many.summary(now) == one.summary(now)
    extremes = RollingMean(10.0, 5)
    assert extremes.add_many([LARGEST], 1.0) and extremes.add_many(np.array([-LARGEST]), 3.0)
    assert extremes.summary(3.0) == (2, 0.0)
    for bad in ([1.0, math.inf], [math.nan], np.array([-math.inf, 2.0])):
        with pytest.raises(ValueError):
            extremes.add_many(bad, 3.0)
    assert extremes.summary(3.0) == (2, 0.0)


def test_every_finite_value_is_accepted() -> None:
    """Means take any finite value, ±the largest float included; latency takes 0."""
    for value in (LARGEST, -LARGEST):
        ring = RollingMean(10.0, 5)
        assert ring.add(value, 1.0) and ring.mean(1.0) == value
        store: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5)
        assert store.observe(("a",), value, 1.0) is Outcome.ACCEPTED
        [reading] = store.read(1.0)
        assert (reading.samples, reading.mean) == (1, value)
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError):
            RollingMean(10.0, 5).add(bad, 1.0)
    latency: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5, quantiles=QS)
    assert latency.observe(("a",), 0.0, 1.0) is Outcome.ACCEPTED
    [reading] = latency.read(1.0)
    assert (reading.samples, reading.mean, dict(reading.quantiles)) == (1, 0.0, {q: 0.0 for q in QS})
    assert latency.discards()["invalid"] == 0


def test_observe_many_skips_and_counts_invalid_values_in_a_batch() -> None:
    """A numpy-sized batch: invalid values are counted and skipped, the valid ones (the extreme
    finite ones and, for quantiles, 0) all count, and running totals add up across batches."""
    means: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5)
    invalid = [math.nan, math.inf, -math.inf]
    extremes = [LARGEST, -LARGEST] + [1.0] * (BULK - 5) + invalid  # sums to BULK - 5
    ones = [1.0] * (BULK - 1) + [math.inf]  # the smallest value is valid
    for batch in (extremes, ones):
        assert means.observe_many(("a",), np.array(batch), 1.0) is Outcome.ACCEPTED
    assert means.discards()["invalid"] == 4
    [reading] = means.read(1.0)
    n = 2 * BULK - 4
    assert (reading.samples, reading.mean) == (n, (2 * BULK - 6) / n)

    latency: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5, quantiles=QS)
    zeros = [0.0] * 10 + [2.0] * (BULK - 14) + [math.nan, math.inf, -1.0, -math.inf]
    twos = [-1.0] + [2.0] * (BULK - 1)  # the largest value is valid
    for batch in (zeros, twos):
        assert latency.observe_many(("a",), batch, 1.0) is Outcome.ACCEPTED
    assert latency.discards()["invalid"] == 5
    [reading] = latency.read(1.0)
    n = 2 * BULK - 5
    assert (reading.samples, reading.mean) == (n, 2.0 * (2 * BULK - 15) / n)
    assert close(reading.quantiles[0.5], 2.0)

    for store in (means, latency):
        assert store.observe_many(("b",), np.full(BULK, math.nan), 1.0) is Outcome.INVALID
        assert store.observe_many(("b",), [], 1.0) is Outcome.ACCEPTED  # nothing to reject
        assert store.observe_many(("b",), np.array([]), 1.0) is Outcome.ACCEPTED
        assert [r.key for r in store.read(1.0)] == [("a",)]  # no series for "b"
    assert (means.discards()["invalid"], latency.discards()["invalid"]) == (4 + BULK, 5 + BULK)


@pytest.mark.parametrize("quantiles", [(), QS])
def test_batches_land_in_slot_zero_and_late_or_dropped_batches_are_counted(
    quantiles: tuple[float, ...],
) -> None:
    """Batches into bucket 0 (slot 0) add up; a batch for a bucket the ring no longer holds is
    LATE and a batch for a key a full store cannot take is DROPPED, each counted per value."""
    store: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5, quantiles=quantiles, max_series=1)
    values = np.arange(1.0, BULK + 1.0)
    assert store.observe_many(("a",), values, 0.0) is Outcome.ACCEPTED  # bucket 0: slot 0
    assert store.observe_many(("a",), values, 1.5) is Outcome.ACCEPTED
    [reading] = store.read(1.5)
    assert (reading.samples, reading.mean) == (2 * BULK, (BULK + 1) / 2)
    assert store.observe_many(("a",), values, 11.0) is Outcome.ACCEPTED  # bucket 5: slot 0
    for _ in range(2):
        assert store.observe_many(("a",), values, 1.0) is Outcome.LATE  # bucket 0: slot 0 holds 5
    assert store.observe(("a",), 1.0, 1.0) is Outcome.LATE
    for _ in range(2):
        assert store.observe_many(("b",), values, 11.0) is Outcome.DROPPED
    discards = store.discards()
    assert (discards["late"], discards["dropped"]) == (2 * BULK + 1, 2 * BULK)
    assert [(r.key, r.samples) for r in store.read(11.0)] == [(("a",), BULK)]


def test_a_late_value_into_a_closed_bucket_counts() -> None:
    """A value for a closed (compacted) bucket still in the ring is added to that bucket."""
    ring = RollingQuantiles(10.0, 5)  # w = 2 s
    assert ring.add(1.0, 0.0)
    assert ring.add(2.0, 2.0)  # opens bucket 1: bucket 0 is closed and compacted
    assert ring.add(3.0, 0.5) and ring.add_many([4.0, 5.0], 1.0)
    assert ring.samples(2.0) == 5
    low, high = ring.quantiles([0.0, 1.0], 2.0)
    assert close(low, 1.0) and close(high, 5.0)


def test_a_value_older_than_the_ring_is_late_even_when_its_slot_was_freed() -> None:
    """Bucket 0 after bucket 6 (ring of 5): its slot was freed when bucket 6 opened, but the
    bucket is out of the window, so the value is LATE and counted, never held."""
    store: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5)
    assert store.observe(("k",), 1.0, 0.0) is Outcome.ACCEPTED
    assert store.observe(("k",), 2.0, 12.0) is Outcome.ACCEPTED  # bucket 6 frees bucket 0
    assert store.observe(("k",), 50.0, 0.0) is Outcome.LATE
    assert store.observe_many(("k",), [50.0] * BULK, 0.0) is Outcome.LATE
    assert store.discards()["late"] == 1 + BULK
    [reading] = store.read(12.0)
    assert reading.samples == 1 and close(reading.mean, 2.0)


def test_a_snapshot_is_unchanged_by_adds_after_a_late_bucket_opened() -> None:
    """A late value opening an older bucket compacts the open one; adds after a snapshot, to
    the open bucket or to the late one, leave the snapshot's quantiles as they were."""
    taken: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5, quantiles=(0.0, 0.5, 1.0))
    frozen: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=5, quantiles=(0.0, 0.5, 1.0))
    for store in (taken, frozen):
        store.observe(("k",), 3.0, 4.0)  # bucket 2, the newest
        store.observe(("k",), 5.0, 0.0)  # bucket 0, late: bucket 2 is compacted
        store.observe(("k",), 6.0, 0.5)
    snapshot = taken.snapshot(4.0)
    for t in (4.0, 0.5):
        taken.observe(("k",), 100.0, t)
        taken.observe_many(("k",), [200.0] * BULK, t)
    assert snapshot.read() == frozen.read(4.0)
    assert taken.read(4.0) != frozen.read(4.0)


def test_fold_series_are_counted_and_their_room_comes_back_after_eviction() -> None:
    """Each fold series counts once against ``max_folded``; evicting them frees that room."""
    store: WindowStore[tuple[str, str]] = WindowStore(
        (10.0,), buckets=5, max_series=1, fold=fold_service, max_folded=2
    )
    assert store.observe(("a", "m"), 1.0, 0.0) is Outcome.ACCEPTED
    assert store.observe(("b", "m"), 1.0, 0.0) is Outcome.FOLDED
    assert store.observe(("c", "n"), 1.0, 0.0) is Outcome.FOLDED
    assert store.observe(("d", "p"), 1.0, 0.0) is Outcome.DROPPED  # a third fold series: no room
    assert (store.stats().series, store.stats().folded_series) == (3, 2)
    assert store.read(20.0) == []
    assert (store.stats().series, store.stats().folded_series, store.stats().evicted) == (0, 0, 3)
    assert store.observe(("e", "m"), 1.0, 20.0) is Outcome.ACCEPTED
    assert store.observe(("f", "m"), 1.0, 20.0) is Outcome.FOLDED
    assert store.observe(("g", "q"), 1.0, 20.0) is Outcome.FOLDED
    assert store.observe(("h", "r"), 1.0, 20.0) is Outcome.DROPPED
    assert store.stats().folded_series == 2


def test_a_store_holds_64_fold_series_by_default() -> None:
    """``max_folded`` defaults to 64 (the docstring's bound): the 65th fold series is dropped."""
    store: WindowStore[tuple[str, str]] = WindowStore(
        (10.0,), buckets=5, max_series=1, fold=fold_service
    )
    assert store.observe(("a", "m"), 1.0, 0.0) is Outcome.ACCEPTED
    for i in range(64):
        assert store.observe((f"s{i}", f"m{i}"), 1.0, 0.0) is Outcome.FOLDED
    assert store.observe(("z", "m64"), 1.0, 0.0) is Outcome.DROPPED
    assert store.stats().folded_series == 64


def test_fold_series_do_not_take_room_from_own_series_and_dead_series_wait_for_a_sweep() -> None:
    """``max_series`` counts a store's own series only; a dead series is evicted on a read or
    when a new key meets a full store, not when there is room anyway."""
    store: WindowStore[tuple[str, str]] = WindowStore(
        (10.0,), buckets=5, max_series=3, fold=fold_service
    )
    store.observe(("a", "m"), 1.0, 0.0)
    store.observe(("b", "m"), 1.0, 9.0)
    store.observe(("c", "m"), 1.0, 9.0)
    assert store.observe(("x", "m"), 1.0, 9.0) is Outcome.FOLDED  # full: a still counts at 9 s
    assert {r.key for r in store.read(10.0)} == {("b", "m"), ("c", "m"), ("other", "m")}
    # two own series and one fold series: room for a third own series, no sweep needed
    assert store.observe(("e", "m"), 1.0, 20.0) is Outcome.ACCEPTED
    stats = store.stats()
    assert (stats.series, stats.folded_series, stats.evicted) == (4, 1, 1)
    assert {r.key for r in store.read(20.0)} == {("e", "m")}


def test_a_full_store_sweeps_at_most_once_per_bucket_of_the_finest_window() -> None:
    """Widths 1 s and 1.5 s: a series observed at 0 leaves the 7.5 s window at 7.5 s, inside the
    finest bucket [7, 8) already swept at 7.2 s; the next sweep, at 8 s, evicts it."""
    store: WindowStore[tuple[str]] = WindowStore((5.0, 7.5), buckets=5, max_series=1)
    assert store.observe(("a",), 1.0, 0.0) is Outcome.ACCEPTED
    assert store.observe(("b",), 1.0, 7.2) is Outcome.DROPPED  # sweeps: a still counts
    assert store.observe(("b",), 1.0, 7.6) is Outcome.DROPPED  # a is dead, but no second sweep
    assert store.stats().evicted == 0
    assert store.observe(("b",), 1.0, 8.0) is Outcome.ACCEPTED
    assert store.stats().evicted == 1


def test_a_quantile_series_reads_empty_in_a_window_it_left() -> None:
    """A series still live in the long window reads 0 samples, no mean and no quantiles in the
    short one."""
    store: WindowStore[tuple[str]] = WindowStore((5.0, 60.0), buckets=5, quantiles=QS)
    store.observe(("k",), 2.0, 0.0)
    short, long = store.read(30.0)
    assert short == WindowReading(("k",), 5.0, 0, None)
    assert (long.key, long.window, long.samples, long.mean) == (("k",), 60.0, 1, 2.0)


def test_quantiles_use_the_configured_relative_accuracy() -> None:
    """Every window's quantiles come from sketches of the store's ``relative_accuracy``."""
    for accuracy in (0.01, 0.05):
        store: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=5, quantiles=(0.5,), relative_accuracy=accuracy)
        store.observe(("k",), 1.5, 1.0)
        sketch = QuantileSketch(accuracy)
        sketch.add(1.5)
        assert [r.quantiles[0.5] for r in store.read(1.0)] == sketch.quantiles([0.5]) * 2
    coarse, fine = QuantileSketch(0.05), QuantileSketch(0.01)
    coarse.add(1.5)
    fine.add(1.5)
    assert coarse.quantiles([0.5]) != fine.quantiles([0.5])  # so the loop tells them apart


def test_configuration_limits() -> None:
    """Windows: any positive finite length, each one checked; quantiles: 0 and 1 included; caps:
    integers >= 0, where 0 own series sends every key to its fold series."""
    assert WindowStore((0.5,)).windows == (0.5,)
    for windows in ((5.0, 0.0), (5.0, -1.0), (5.0, math.inf), (5.0, math.nan)):
        with pytest.raises(ValueError):
            WindowStore(windows)
    for window in (0.0, math.inf):
        for ring in (RollingMean, RollingQuantiles):
            with pytest.raises(ValueError):
                ring(window, 5)
    extremes: WindowStore[tuple[str]] = WindowStore((10.0,), quantiles=(0.0, 1.0))
    extremes.observe_many(("k",), [1.0, 100.0], 1.0)
    [reading] = extremes.read(1.0)
    assert sorted(reading.quantiles) == [0.0, 1.0]
    assert close(reading.quantiles[0.0], 1.0) and close(reading.quantiles[1.0], 100.0)
    for caps in ({"max_series": 2.5}, {"max_series": True}, {"max_folded": False}, {"max_folded": -1}):
        with pytest.raises(ValueError):
            WindowStore((10.0,), **caps)  # type: ignore[arg-type]
    store: WindowStore[tuple[str, str]] = WindowStore((10.0,), max_series=0, fold=fold_service, max_folded=0)
    assert store.observe(("a", "m"), 1.0, 1.0) is Outcome.DROPPED
    store = WindowStore((10.0,), max_series=0, fold=fold_service)
    assert store.observe(("a", "m"), 1.0, 1.0) is Outcome.FOLDED
    assert [r.key for r in store.read(1.0)] == [("other", "m")]
