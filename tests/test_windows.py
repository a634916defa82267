"""Rolling windows against recomputation from the raw events, expiry, caps and memory bounds.

Reference (the rule of ``ragmon.export.windows``): with bucket width w = W / R, an event
(t, x) counts at a read at ``now`` iff ⌊now / w⌋ − R < ⌊t / w⌋ ≤ ⌊now / w⌋. Means and counts
must match the recomputation exactly (means to 1e-12); quantiles within α of the lower quantile
``np.sort(x)[floor(q·(n − 1))]`` (see tests/test_sketch.py). The clock is injected and reads
happen at a ``now`` no earlier than any event; events may arrive late (t below the newest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.export.sketch import MIN_VALUE, QuantileSketch
from ragmon.export.windows import (
    Outcome,
    RollingMean,
    RollingQuantiles,
    WindowReading,
    WindowStore,
    bucket_index,
)
from strategies import SETTINGS

QS = (0.5, 0.95, 0.99)
ALPHA = 0.01


def in_window(t: float, now: float, width: float, buckets: int) -> bool:
    b_now = math.floor(now / width)
    return b_now - buckets < math.floor(t / width) <= b_now


def counted(
    events: list[tuple[float, float]], now: float, width: float, buckets: int
) -> list[float]:
    return [x for t, x in events if in_window(t, now, width, buckets)]


def assert_mean(mean: float | None, xs: list[float]) -> None:
    if not xs:
        assert mean is None
    else:
        assert mean is not None
        assert math.isclose(mean, math.fsum(xs) / len(xs), rel_tol=1e-12, abs_tol=1e-12)


def assert_quantiles(estimates: list[float | None], xs: list[float]) -> None:
    ordered = np.sort(np.asarray(xs, dtype=np.float64))
    for q, estimate in zip(QS, estimates):
        if not xs:
            assert estimate is None
            continue
        exact = float(ordered[math.floor(q * (len(xs) - 1))])
        assert estimate is not None
        assert abs(estimate - exact) <= ALPHA * exact * (1 + 1e-9) + MIN_VALUE


@dataclass(frozen=True)
class Step:
    """Move the clock by ``gap`` bucket widths (negative: a late event), then observe or read."""

    gap: float
    value: float
    read: bool


def steps(values: st.SearchStrategy[float]) -> st.SearchStrategy[list[Step]]:
    gaps = st.one_of(
        st.integers(0, 3).map(float),  # exact bucket edges
        st.floats(0.0, 3.0),
        st.floats(-4.0, 0.0),  # late events
        st.floats(0.0, 80.0),  # long idle: whole windows expire
    )
    return st.lists(st.builds(Step, gaps, values, st.booleans()), min_size=1, max_size=120)


windows_st = st.sampled_from([1.0, 7.5, 10.0, 300.0])
buckets_st = st.one_of(st.integers(1, 3), st.integers(1, 12))
starts = st.sampled_from([0.0, 12345.0, 1.7e9 + 0.25])
unit = st.floats(0.0, 1.0)
wide = st.one_of(st.just(0.0), st.floats(-6, 6).map(lambda e: 10.0**e))


class Clock:
    """Event times: the newest time so far plus a gap; reads never go below the newest."""

    def __init__(self, start: float, width: float) -> None:
        self.newest = start
        self.width = width

    def event(self, gap: float) -> float:
        t = self.newest + gap * self.width
        self.newest = max(self.newest, t)
        return t

    def read(self, gap: float) -> float:
        self.newest += max(gap, 0.0) * self.width  # a negative gap reads at the newest time
        return self.newest


@SETTINGS
@given(windows_st, buckets_st, starts, steps(st.one_of(unit, st.floats(0.0, 100.0))))
def test_rolling_mean_matches_recomputation(
    window: float, buckets: int, start: float, script: list[Step]
) -> None:
    rolling = RollingMean(window, buckets)
    clock = Clock(start, rolling.width)
    events: list[tuple[float, float]] = []
    for step in script:
        if step.read:
            now = clock.read(step.gap)
            xs = counted(events, now, rolling.width, buckets)
            assert rolling.samples(now) == len(xs)
            assert_mean(rolling.mean(now), xs)
            continue
        newest = bucket_index(clock.newest, rolling.width)
        t = clock.event(step.gap)
        stored = rolling.add(step.value, t)
        assert stored or bucket_index(t, rolling.width) <= newest - buckets
        events.append((t, step.value))
        assert rolling.buckets_in_use() <= buckets
    now = clock.read(0.0)
    assert rolling.samples(now) == len(counted(events, now, rolling.width, buckets))


@SETTINGS
@given(windows_st, buckets_st, starts, steps(wide))
def test_rolling_quantiles_match_recomputation(
    window: float, buckets: int, start: float, script: list[Step]
) -> None:
    rolling = RollingQuantiles(window, buckets, ALPHA)
    clock = Clock(start, rolling.width)
    events: list[tuple[float, float]] = []
    for step in script:
        if step.read:
            now = clock.read(step.gap)
            xs = counted(events, now, rolling.width, buckets)
            sketch = rolling.sketch(now)
            assert sketch.count == rolling.samples(now) == len(xs)
            assert math.isclose(sketch.sum, math.fsum(xs), rel_tol=1e-12, abs_tol=1e-12)
            assert_quantiles(rolling.quantiles(QS, now), xs)
            continue
        t = clock.event(step.gap)
        rolling.add(step.value, t)
        events.append((t, step.value))
        assert rolling.buckets_in_use() <= buckets


KEYS = [
    ("svc", "a", "label", "hit_rate", 5),
    ("svc", "b", "label", "hit_rate", 5),
    ("x", "a", "probe", "mrr", 0),
]


@SETTINGS
@given(
    st.sampled_from([(5.0, 60.0), (300.0, 3600.0), (1.0,), (2.0, 3.0, 10.0)]),
    buckets_st,
    starts,
    st.booleans(),
    steps(st.one_of(unit, wide.filter(lambda v: v >= 0))),
    st.lists(st.sampled_from(range(len(KEYS))), min_size=120, max_size=120),
    st.lists(st.integers(1, 4), min_size=120, max_size=120),
)
def test_window_store_matches_recomputation(
    windows: tuple[float, ...],
    buckets: int,
    start: float,
    quantile_store: bool,
    script: list[Step],
    keys: list[int],
    batch: list[int],
) -> None:
    store: WindowStore[tuple[object, ...]] = WindowStore(
        windows, buckets=buckets, quantiles=QS if quantile_store else ()
    )
    finest = min(windows) / buckets
    clock = Clock(start, finest)
    events: dict[tuple[object, ...], list[tuple[float, float]]] = {}
    for step, i, n in zip(script, keys, batch):
        if step.read:
            now = clock.read(step.gap)
            check_readings(store.read(now), events, now, windows, buckets, quantile_store)
            continue
        t = clock.event(step.gap)
        key = KEYS[i]
        if n == 1:
            outcome = store.observe(key, step.value, t)
        else:
            outcome = store.observe_many(key, [step.value] * n, t)
        assert outcome in (Outcome.ACCEPTED, Outcome.LATE)
        events.setdefault(key, []).extend([(t, step.value)] * n)
    now = clock.read(0.0)
    check_readings(store.read(now), events, now, windows, buckets, quantile_store)


def check_readings(
    readings: list[WindowReading[tuple[object, ...]]],
    events: dict[tuple[object, ...], list[tuple[float, float]]],
    now: float,
    windows: tuple[float, ...],
    buckets: int,
    quantile_store: bool,
) -> None:
    got = {(r.key, r.window): r for r in readings}
    for key, key_events in events.items():
        live = any(counted(key_events, now, w / buckets, buckets) for w in windows)
        for window in windows:
            xs = counted(key_events, now, window / buckets, buckets)
            if not live:
                assert (key, window) not in got  # evicted: nothing left in any window
                continue
            reading = got[(key, window)]
            assert reading.samples == len(xs)
            assert_mean(reading.mean, xs)
            if quantile_store and xs:
                assert_quantiles([reading.quantiles[q] for q in QS], xs)
            else:
                assert reading.quantiles == {}
    assert len(got) == len(readings)


def test_bucket_rule_at_edges() -> None:
    rolling = RollingMean(10.0, 5)  # w = 2 s
    for t in (0.0, 1.999, 2.0, 9.999, 10.0):
        rolling.add(t, t)
    assert rolling.samples(10.0) == 3  # buckets 1..5: t >= 2
    assert rolling.samples(11.999) == 3
    assert rolling.samples(12.0) == 2  # buckets 2..6: t >= 4
    assert rolling.mean(12.0) == pytest.approx((9.999 + 10.0) / 2, rel=1e-15)
    assert rolling.samples(21.999) == 0  # buckets 6..10: t >= 12
    assert rolling.mean(21.999) is None


def test_same_buckets_means_every_window() -> None:
    store: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=5)  # widths 2 s and 12 s
    assert store.same_buckets(2.0, 3.999)
    assert not store.same_buckets(3.999, 4.0)  # the 2 s buckets differ
    assert not store.same_buckets(-math.inf, 1.0) and not store.same_buckets(1.0, math.nan)
    # folding a value observed at 3.5 at time 2.0 instead changes no reading
    early, exact = WindowStore((10.0, 60.0), buckets=5), WindowStore((10.0, 60.0), buckets=5)
    early.observe(("a",), 1.0, 2.0)
    exact.observe(("a",), 1.0, 3.5)
    for now in (3.5, 11.0, 12.0, 59.0, 70.0):
        assert early.read(now) == exact.read(now)


def test_old_buckets_expire_and_are_freed() -> None:
    means, quantiles = RollingMean(60.0, 6), RollingQuantiles(60.0, 6)
    for i in range(600):
        means.add(1.0, i * 0.1)
        quantiles.add(0.5, i * 0.1)
    assert means.buckets_in_use() == quantiles.buckets_in_use() == 6
    assert means.samples(59.9) == quantiles.samples(59.9) == 600
    assert means.samples(69.999) == 500  # buckets 1..6: [0, 10) left the window
    assert means.samples(70.0) == 400  # buckets 2..7: the window is [20, 70]
    assert quantiles.quantiles(QS, 70.0) == [pytest.approx(0.5, rel=ALPHA)] * 3
    assert means.samples(120.0) == quantiles.samples(120.0) == 0
    assert means.buckets_in_use() == quantiles.buckets_in_use() == 0  # freed on read
    assert quantiles.quantiles(QS, 120.0) == [None, None, None]
    assert means.add(2.0, 125.0) and means.mean(125.0) == 2.0


def test_late_observations_are_counted_not_stored() -> None:
    store: WindowStore[tuple[str]] = WindowStore((10.0,), buckets=2)  # w = 5 s
    assert store.observe(("a",), 1.0, 100.0) is Outcome.ACCEPTED
    assert store.observe(("a",), 7.0, 96.0) is Outcome.ACCEPTED  # bucket 19: still in the ring
    assert store.observe(("a",), 9.0, 89.0) is Outcome.LATE  # bucket 17: its slot holds 19
    assert store.stats().late == 1
    [reading] = store.read(100.0)
    assert (reading.samples, reading.mean) == (2, 4.0)


def test_invalid_values_are_counted() -> None:
    means: WindowStore[tuple[str]] = WindowStore((10.0,))
    quantiles: WindowStore[tuple[str]] = WindowStore((10.0,), quantiles=QS)
    for bad in (math.nan, math.inf, -math.inf):
        assert means.observe(("a",), bad, 1.0) is Outcome.INVALID
        assert quantiles.observe(("a",), bad, 1.0) is Outcome.INVALID
    assert quantiles.observe(("a",), -1.0, 1.0) is Outcome.INVALID
    assert means.observe(("a",), -1.0, 1.0) is Outcome.ACCEPTED  # a mean may be negative
    assert quantiles.observe_many(("a",), [1.0, math.nan, -2.0, 3.0], 1.0) is Outcome.ACCEPTED
    assert quantiles.observe_many(("b",), [math.nan], 1.0) is Outcome.INVALID
    assert means.stats().invalid == 3 and quantiles.stats().invalid == 7
    [reading] = quantiles.read(1.0)
    assert (reading.key, reading.samples, reading.mean) == (("a",), 2, 2.0)
    assert len(means) == 1 and len(quantiles) == 1


def fold_service(key: tuple[str, str]) -> tuple[str, str]:
    return ("other", key[1])


def test_series_cap_drops_without_fold() -> None:
    store: WindowStore[tuple[str, str]] = WindowStore((10.0,), max_series=2)
    assert store.observe(("a", "m"), 1.0, 0.0) is Outcome.ACCEPTED
    assert store.observe(("b", "m"), 1.0, 0.0) is Outcome.ACCEPTED
    assert store.observe(("c", "m"), 1.0, 0.0) is Outcome.DROPPED
    assert store.observe_many(("c", "m"), [1.0, 2.0], 0.0) is Outcome.DROPPED
    assert store.observe(("a", "m"), 0.0, 0.0) is Outcome.ACCEPTED  # known keys still go in
    stats = store.stats()
    assert (stats.series, stats.dropped, stats.folded) == (2, 3, 0)


def test_series_cap_folds_into_other() -> None:
    store: WindowStore[tuple[str, str]] = WindowStore(
        (10.0,), max_series=2, fold=fold_service, max_folded=1
    )
    store.observe(("a", "m"), 1.0, 0.0)
    store.observe(("b", "m"), 1.0, 0.0)
    assert store.observe(("c", "m"), 0.0, 1.0) is Outcome.FOLDED
    assert store.observe(("d", "m"), 1.0, 1.0) is Outcome.FOLDED
    assert store.observe(("d", "n"), 1.0, 1.0) is Outcome.DROPPED  # fold series cap reached
    readings = {r.key: r for r in store.read(1.0)}
    assert set(readings) == {("a", "m"), ("b", "m"), ("other", "m")}
    assert (readings[("other", "m")].samples, readings[("other", "m")].mean) == (2, 0.5)
    stats = store.stats()
    assert (stats.series, stats.folded_series, stats.folded, stats.dropped) == (3, 1, 2, 1)


def test_eviction_after_the_longest_window_frees_room() -> None:
    store: WindowStore[tuple[str, str]] = WindowStore((5.0, 60.0), buckets=5, max_series=2)
    store.observe(("a", "m"), 1.0, 0.0)
    store.observe(("b", "m"), 1.0, 30.0)
    assert store.observe(("c", "m"), 1.0, 30.0) is Outcome.DROPPED
    readings = store.read(30.0)  # a: out of 5s, still in 1h-like 60 s window
    seen = {(r.key, r.window, r.samples) for r in readings}
    assert seen >= {(("a", "m"), 5.0, 0), (("a", "m"), 60.0, 1)}
    assert store.stats().evicted == 0
    # a's bucket [0, 12) leaves the 60 s window at t = 60: the next new key takes its place
    assert store.observe(("c", "m"), 1.0, 60.0) is Outcome.ACCEPTED
    assert store.stats().evicted == 1
    assert {r.key for r in store.read(60.0)} == {("b", "m"), ("c", "m")}
    assert store.read(200.0) == [] and len(store) == 0
    assert store.stats().evicted == 3


def test_memory_is_bounded_under_a_long_stream() -> None:
    windows, buckets, cap, folded = (5.0, 60.0, 300.0), 10, 40, 4
    store: WindowStore[tuple[str, str]] = WindowStore(
        windows, buckets=buckets, quantiles=QS, max_series=cap, fold=fold_service, max_folded=folded
    )
    rng = np.random.default_rng(11)
    times = np.cumsum(rng.exponential(0.05, 30_000))  # ~1500 s: 5 times the longest window
    services = rng.integers(0, 500, times.size)
    stages = rng.integers(0, 8, times.size)
    values = 10.0 ** rng.uniform(-12, 12, times.size)
    most = 0
    stream = zip(times.tolist(), services.tolist(), stages.tolist(), values.tolist())
    for i, (t, s, g, v) in enumerate(stream):
        store.observe((f"s{s}", f"g{g}"), v, t)
        if i % 500 == 0:
            stats = store.stats()
            assert stats.series <= cap + folded
            assert stats.buckets <= stats.series * len(windows) * buckets
            most = max(most, stats.buckets)
            for reading in store.read(t):
                assert reading.samples >= 0
    assert most <= (cap + folded) * len(windows) * buckets
    sketch = QuantileSketch()
    for series in store._series.values():  # every bucket's sketch stays within its bin bound
        for ring in series.rings:
            assert isinstance(ring, RollingQuantiles)
            for bucket in ring._sketches:
                assert bucket is None or bucket.bin_count <= sketch.max_bins
    stats = store.stats()
    assert stats.folded > 0 and stats.dropped > 0 and stats.evicted > 0


def test_observe_many_equals_observe() -> None:
    one: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=6, quantiles=QS)
    many: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=6, quantiles=QS)
    rng = np.random.default_rng(5)
    for step in range(200):
        now = step * 0.7
        batch = rng.lognormal(-2, 1, int(rng.integers(1, 20)))
        for v in batch.tolist():
            one.observe(("k",), v, now)
        many.observe_many(("k",), batch, now)
    for a, b in zip(one.read(140.0), many.read(140.0)):
        assert (a.key, a.window, a.samples) == (b.key, b.window, b.samples)
        assert a.quantiles == b.quantiles
        assert a.mean == pytest.approx(b.mean, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"windows": ()},
        {"windows": (0.0,)},
        {"windows": (math.inf,)},
        {"windows": (5.0, 5.0)},
        {"buckets": 0},
        {"buckets": 2.5},
        {"quantiles": (1.5,)},
        {"relative_accuracy": 1.0},
        {"max_series": -1},
    ],
)
def test_bad_configuration_raises(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WindowStore(**{"windows": (10.0,), **kwargs})  # type: ignore[arg-type]


def test_observations_a_caller_folded_are_counted_as_folded() -> None:
    store: WindowStore[tuple[str]] = WindowStore((10.0,), quantiles=QS)
    assert store.observe(("other",), 1.0, 0.0, folded=True) is Outcome.FOLDED
    assert store.observe_many(("other",), [1.0, 2.0], 0.0, folded=True) is Outcome.FOLDED  # one at a time
    assert store.observe_many(("other",), [1.0] * 40, 0.0, folded=True) is Outcome.FOLDED  # numpy
    assert store.observe_many(("own",), [1.0] * 40, 0.0) is Outcome.ACCEPTED
    assert store.discards()["folded"] == store.stats().folded == 43
    assert {r.key: r.samples for r in store.read(0.0)} == {("other",): 43, ("own",): 40}


@pytest.mark.parametrize("quantiles", [(), QS])
def test_a_snapshot_reads_as_the_store_did_whatever_it_takes_afterwards(quantiles: tuple[float, ...]) -> None:
    """What a snapshot holds is never changed by later observations: into the open bucket, into
    a closed one (late), or into a new bucket (which compacts the others)."""
    taken: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=5, quantiles=quantiles)
    frozen: WindowStore[tuple[str]] = WindowStore((10.0, 60.0), buckets=5, quantiles=quantiles)
    rng = np.random.default_rng(3)
    for t in np.arange(0.0, 30.0, 0.5).tolist():
        values = rng.lognormal(size=int(rng.integers(1, 40))).tolist()
        for store in (taken, frozen):
            store.observe_many(("j",), values, t)
    now = 29.5
    snapshot = taken.snapshot(now)
    want = [(r.window, r.samples, r.mean, dict(r.quantiles)) for r in frozen.read(now)]
    for value, t in ((7.0, 29.9), (9.0, 21.0), (11.0, 1.0), (13.0, 30.0), (15.0, 45.0)):
        taken.observe(("j",), value, t)  # open bucket, closed ones (late), then new buckets
        taken.observe_many(("j",), [value] * 40, t)
    assert [(r.window, r.samples, r.mean, dict(r.quantiles)) for r in snapshot.read()] == want
    assert [r.samples for r in taken.read(now)] != [r.samples for r in snapshot.read()]
