"""Trace assembly: completion, deadlines, local roots, bounds, late spans and counters.

The clock is injected (``now`` in seconds); nothing sleeps. Ids are small integers turned
into bytes so that tests read as ``span(1, 2, parent=1)``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.pipeline.assembly import AssemblyStats, FinishReason, TraceAssembler, local_root
from ragmon.config import TracesConfig
from ragmon.model import Span, Trace

from tests.strategies import SETTINGS

REMOTE = 0x300  # what the OpenTelemetry Python SDK sends on a span whose parent is remote


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def sid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def span(trace: int, span_id: int, parent: int = 0, *, start: int = 0, flags: int = 0) -> Span:
    """A span of trace ``trace``; ``parent=0`` means no parent."""
    return Span(
        trace_id=tid(trace),
        span_id=sid(span_id),
        parent_span_id=sid(parent) if parent else b"",
        name=f"t{trace}s{span_id}",
        start_ns=start,
        end_ns=start + 1,
        flags=flags,
    )


def assembler(**overrides: float) -> TraceAssembler:
    params: dict[str, float] = dict(grace=2.0, max_wait=60.0, max_pending=1000, max_spans=10_000)
    params.update(overrides)
    return TraceAssembler(**params)  # type: ignore[arg-type]


def ids(trace: Trace) -> set[bytes]:
    return {s.span_id for s in trace.spans}


# --- completion -------------------------------------------------------------------------------


def test_trace_completes_grace_after_root_and_not_before() -> None:
    a = assembler()
    a.add([span(1, 2, parent=1), span(1, 1)], now=10.0)
    assert a.expire(11.999) == []
    [trace] = a.expire(12.0)
    assert trace.trace_id == tid(1)
    assert trace.root == span(1, 1)
    assert ids(trace) == {sid(1), sid(2)}
    assert a.stats().traces_complete == 1
    assert a.expire(100.0) == []


def test_finish_rooted_finishes_rooted_traces_at_once_and_keeps_the_others() -> None:
    a = assembler()
    a.add([span(1, 2, parent=1), span(1, 1), span(2, 3, parent=9), span(3, 4)], now=10.0)
    assert a.finish_rooted() == 2  # traces 1 and 3 have their root; trace 2 waits for its own
    done = a.expire(10.0)
    assert sorted(t.trace_id for t in done) == [tid(1), tid(3)]
    assert a.stats().traces_complete == 2 and a.stats().traces_pending == 1 and a.stats().spans_held == 1
    assert a.finish_rooted() == 0
    a.add([span(2, 9)], now=11.0)
    assert a.finish_rooted() == 1


def test_new_span_resets_grace() -> None:
    a = assembler()
    a.add([span(1, 1)], now=0.0)
    a.add([span(1, 2, parent=1)], now=1.5)
    assert a.expire(2.0) == []
    assert a.expire(3.4) == []
    [trace] = a.expire(3.5)
    assert ids(trace) == {sid(1), sid(2)}


def test_children_without_root_do_not_complete_on_grace() -> None:
    a = assembler()
    a.add([span(1, 2, parent=1)], now=0.0)
    assert a.expire(30.0) == []
    a.add([span(1, 1)], now=30.0)
    [trace] = a.expire(32.0)
    assert trace.root == span(1, 1)
    assert a.stats().traces_complete == 1


def test_max_wait_finishes_trace_whose_root_never_arrives() -> None:
    a = assembler()
    a.add([span(1, 2, parent=1, start=5)], now=0.0)
    a.add([span(1, 3, parent=2, start=6)], now=10.0)
    assert a.expire(59.999) == []
    [trace] = a.expire(60.0)
    assert trace.root == span(1, 2, parent=1, start=5)  # its parent never arrived
    stats = a.stats()
    assert (stats.traces_max_wait, stats.traces_complete) == (1, 0)


def test_max_wait_caps_a_rooted_trace_that_keeps_receiving_spans() -> None:
    a = assembler(grace=2.0, max_wait=5.0)
    a.add([span(1, 1)], now=0.0)
    for i, t in enumerate([1.0, 2.0, 3.0, 4.0, 4.5]):
        a.add([span(1, 10 + i, parent=1)], now=t)
        assert a.expire(t) == []
    [trace] = a.expire(5.0)
    assert len(trace.spans) == 6 and trace.root == span(1, 1)
    assert a.stats().traces_max_wait == 1


def test_remote_parent_root_completes_without_waiting_for_its_parent() -> None:
    a = assembler()
    root = span(1, 1, parent=99, flags=REMOTE)
    assert root.has_remote_parent
    a.add([span(1, 2, parent=1), root], now=0.0)
    [trace] = a.expire(2.0)
    assert trace.root == root
    assert a.stats().traces_complete == 1


def test_remote_bit_without_known_bit_is_not_a_remote_parent() -> None:
    a = assembler()
    a.add([span(1, 1, parent=99, flags=0x200)], now=0.0)
    assert a.expire(2.0) == []
    [trace] = a.expire(60.0)
    assert trace.root == span(1, 1, parent=99, flags=0x200)  # still the local root, by orphanhood


def test_missing_parent_earliest_start_becomes_root_at_max_wait() -> None:
    a = assembler()
    late_orphan = span(1, 3, parent=7, start=200)
    early_orphan = span(1, 2, parent=8, start=100)
    child = span(1, 4, parent=2, start=50)  # starts first, but its parent is here
    a.add([late_orphan, child, early_orphan], now=0.0)
    [trace] = a.expire(60.0)
    assert trace.root == early_orphan


def test_explicit_root_wins_over_orphans() -> None:
    a = assembler()
    orphan = span(1, 5, parent=77, start=0)
    root = span(1, 1, start=100)
    a.add([orphan, root], now=0.0)
    [trace] = a.expire(2.0)
    assert trace.root == root


def test_nested_spans_out_of_order_assemble_into_one_trace() -> None:
    a = assembler()
    a.add([span(1, 4, parent=3, start=40)], now=0.0)  # grandchild first
    a.add([span(1, 3, parent=2, start=30)], now=0.5)
    a.add([span(1, 1, start=10)], now=1.0)  # root
    assert a.expire(2.5) == []
    a.add([span(1, 2, parent=1, start=20)], now=2.5)  # child after root, within grace
    assert a.expire(4.4) == []
    [trace] = a.expire(4.5)
    assert ids(trace) == {sid(1), sid(2), sid(3), sid(4)}
    assert trace.root == span(1, 1, start=10)
    assert [s.span_id for s in trace.spans] == [sid(4), sid(3), sid(1), sid(2)]  # arrival order


def test_many_interleaved_traces() -> None:
    a = assembler(grace=1.0)
    n = 200
    for step in range(4):  # spans 2..4 (children) round-robin, then each root at its own time
        a.add([span(t, 10 + step, parent=1) for t in range(1, n + 1)], now=float(step))
    for t in range(1, n + 1):
        a.add([span(t, 1)], now=4.0 + t / 1000)
    assert a.expire(4.5) == []
    finished = a.expire(6.0)
    assert [tr.trace_id for tr in finished] == [tid(t) for t in range(1, n + 1)]
    for tr in finished:
        assert len(tr.spans) == 5 and {s.trace_id for s in tr.spans} == {tr.trace_id}
        assert tr.root is not None and tr.root.span_id == sid(1)
    assert a.stats() == AssemblyStats(traces_complete=n, spans_accepted=5 * n)


def test_expire_returns_traces_in_finishing_order() -> None:
    a = assembler(grace=2.0, max_wait=10.0)
    a.add([span(1, 2, parent=1)], now=0.0)  # no root: finishes at max_wait, t=10
    a.add([span(2, 1)], now=5.0)  # root: complete at t=7
    a.add([span(3, 1)], now=9.0)  # root: complete at t=11
    finished = a.expire(20.0)
    assert [t.trace_id for t in finished] == [tid(2), tid(1), tid(3)]
    s = a.stats()
    assert (s.traces_complete, s.traces_max_wait) == (2, 1)


# --- bounds -----------------------------------------------------------------------------------


def test_max_pending_evicts_the_longest_quiet_rooted_trace_first() -> None:
    a = assembler(max_pending=2)
    a.add([span(1, 1)], now=0.0)
    a.add([span(2, 1)], now=1.0)
    a.add([span(1, 2, parent=1)], now=1.5)  # recent activity: trace 2 is now the quietest
    a.add([span(3, 1)], now=2.0)
    s = a.stats()
    assert (s.traces_pending, s.traces_evicted) == (2, 1)
    [evicted] = a.expire(2.0)  # evicted traces come out of the next expire
    assert evicted.trace_id == tid(2) and len(evicted.spans) == 1
    assert [t.trace_id for t in a.expire(4.0)] == [tid(1), tid(3)]


def test_at_a_cap_a_rooted_trace_goes_before_an_older_one_still_waiting_for_its_root() -> None:
    """Roots usually arrive last: a rooted trace is most likely complete, finishing it early
    costs nothing; a trace without its root would lose it (and its later spans, as late)."""
    a = assembler(max_pending=2)
    a.add([span(1, 2, parent=1)], now=0.0)  # no root yet
    a.add([span(2, 1)], now=1.0)  # rooted
    a.add([span(3, 2, parent=1)], now=2.0)  # a third trace: one must go
    [evicted] = a.expire(2.0)
    assert evicted.trace_id == tid(2)
    a.add([span(1, 1)], now=2.5)  # trace 1's root still joins it
    assert a.stats().spans_late == 0
    a.add([span(4, 1)], now=3.0)  # full again: the rooted trace 1 goes, not trace 3
    [evicted] = a.expire(3.0)
    assert evicted.trace_id == tid(1) and len(evicted.spans) == 2


def test_max_spans_evicts_oldest_traces_until_under_the_cap() -> None:
    a = assembler(max_spans=5)
    a.add([span(1, i, parent=1) for i in range(2, 4)], now=0.0)  # 2 spans
    a.add([span(2, i, parent=1) for i in range(2, 4)], now=1.0)  # 2 spans
    a.add([span(3, i, parent=1) for i in range(2, 5)], now=2.0)  # 6th span: trace 1 goes
    s = a.stats()
    assert (s.spans_held, s.traces_pending, s.traces_evicted) == (5, 2, 1)
    a.add([span(3, i, parent=1) for i in range(5, 8)], now=3.0)  # 8 > 5: trace 2 goes, then 3
    s = a.stats()
    assert (s.spans_held, s.traces_pending, s.traces_evicted) == (0, 0, 3)
    assert [(t.trace_id, len(t.spans)) for t in a.expire(3.0)] == [(tid(1), 2), (tid(2), 2), (tid(3), 6)]


def test_span_cap_can_evict_the_growing_trace_itself_without_losing_spans() -> None:
    a = assembler(max_spans=3, max_trace_spans=10)
    a.add([span(1, i, parent=1) for i in range(2, 6)], now=0.0)  # the 4th span overflows
    s = a.stats()
    assert s.spans_held <= 3 and s.traces_evicted == 1
    got = [sp for t in a.expire(0.0) + a.drain() for sp in t.spans]
    assert len(got) == 4


def test_per_trace_span_cap_drops_and_counts_but_keeps_the_root() -> None:
    a = assembler(max_trace_spans=3)
    a.add([span(1, i, parent=1) for i in range(2, 7)], now=0.0)  # 5 children: 2 dropped
    a.add([span(1, 1)], now=0.5)  # the root is still admitted
    a.add([span(1, 99, parent=50, flags=REMOTE)], now=0.6)  # a second root is not
    s = a.stats()
    assert (s.spans_held, s.spans_dropped_trace_full, s.spans_dropped) == (4, 3, 3)
    [trace] = a.expire(2.6)
    assert trace.root == span(1, 1)
    assert ids(trace) == {sid(1), sid(2), sid(3), sid(4)}


def test_duplicate_span_ids_are_dropped_and_counted() -> None:
    a = assembler()
    a.add([span(1, 1), span(1, 1)], now=0.0)
    [trace] = a.expire(2.0)
    assert len(trace.spans) == 1
    assert a.stats().spans_dropped_duplicate == 1


# --- late spans -------------------------------------------------------------------------------


def test_late_spans_are_counted_and_do_not_reopen_the_trace() -> None:
    a = assembler()
    a.add([span(1, 1)], now=0.0)
    [trace] = a.expire(2.0)
    a.add([span(1, 2, parent=1), span(1, 3, parent=1)], now=3.0)
    s = a.stats()
    assert (s.spans_late, s.traces_pending, s.spans_held) == (2, 0, 0)
    assert a.expire(100.0) == [] and a.drain() == []


def test_spans_for_an_evicted_trace_not_yet_expired_are_late() -> None:
    a = assembler(max_pending=1)
    a.add([span(1, 1)], now=0.0)
    a.add([span(2, 1)], now=0.0)  # evicts trace 1 into the ready queue
    a.add([span(1, 2, parent=1)], now=0.0)
    assert a.stats().spans_late == 1
    [evicted] = a.expire(0.0)
    assert evicted.trace_id == tid(1) and len(evicted.spans) == 1


def test_late_memory_is_bounded() -> None:
    a = assembler(late_memory=1)
    a.add([span(1, 1), span(2, 1)], now=0.0)
    assert len(a.expire(2.0)) == 2  # trace 1 then trace 2: only trace 2 is remembered
    a.add([span(2, 2, parent=1)], now=3.0)
    assert a.stats().spans_late == 1
    a.add([span(1, 2, parent=1)], now=3.0)  # forgotten: starts a new trace
    s = a.stats()
    assert (s.spans_late, s.traces_pending) == (1, 1)


# --- drain, stats, config, clock --------------------------------------------------------------


def test_drain_returns_everything_held() -> None:
    a = assembler(max_pending=2)
    a.add([span(1, 1)], now=0.0)
    a.add([span(2, 2, parent=1)], now=1.0)
    a.add([span(3, 1)], now=2.0)  # evicts trace 1
    drained = a.drain()
    assert [t.trace_id for t in drained] == [tid(1), tid(2), tid(3)]
    s = a.stats()
    assert (s.traces_evicted, s.traces_drained, s.traces_pending, s.spans_held) == (1, 2, 0, 0)
    assert a.drain() == []


def test_stats_counters_and_samples() -> None:
    a = assembler(max_pending=2, max_trace_spans=2)
    a.add([span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1)], now=0.0)  # 1 dropped
    a.add([span(2, 2, parent=1)], now=1.0)
    a.expire(2.0)  # trace 1 complete
    a.add([span(1, 4, parent=1)], now=2.0)  # late
    a.add([span(3, 1), span(4, 1)], now=3.0)  # trace 3 evicted: rooted, so finished first
    a.expire(61.0)  # trace 2 at max_wait, trace 4 complete, trace 3 already out
    a.add([span(5, 5, parent=1)], now=62.0)
    s = a.stats()
    assert s == AssemblyStats(
        traces_complete=2, traces_max_wait=1, traces_evicted=1, traces_drained=0,
        traces_pending=1, spans_held=1, spans_accepted=6, spans_late=1,
        spans_dropped_trace_full=1, spans_dropped_duplicate=0,
    )
    assert s.traces_finished == 4
    samples = {(x.name, x.labels): (x.value, x.kind) for x in s.samples()}
    assert samples[("ragmon_traces_finished_total", (("reason", "complete"),))] == (2, "counter")
    assert samples[("ragmon_traces_finished_total", (("reason", "evicted"),))] == (1, "counter")
    assert samples[("ragmon_traces_evicted_total", ())] == (1, "counter")
    assert samples[("ragmon_traces_pending", ())] == (1, "gauge")
    assert samples[("ragmon_spans_pending", ())] == (1, "gauge")
    assert samples[("ragmon_spans_late_total", ())] == (1, "counter")
    assert samples[("ragmon_spans_dropped_total", (("reason", "trace_full"),))] == (1, "counter")
    assert all(x.name.endswith("_total") == (x.kind == "counter") for x in s.samples())
    assert {r.value for r in FinishReason} == {"complete", "max_wait", "evicted", "drained"}


def test_from_config_defaults() -> None:
    a = TraceAssembler.from_config(TracesConfig(grace=0.5, max_wait=3.0))
    a.add([span(1, 1)], now=0.0)
    assert a.expire(0.49) == []
    assert len(a.expire(0.5)) == 1
    a.add([span(2, 2, parent=1)], now=1.0)
    assert len(a.expire(4.0)) == 1


def test_time_going_backwards_counts_as_the_latest_time() -> None:
    a = assembler()
    a.add([span(1, 1)], now=10.0)
    a.add([span(2, 1)], now=5.0)  # treated as t=10
    assert a.expire(11.0) == []
    assert len(a.expire(12.0)) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"grace": -1.0}, {"grace": math.nan}, {"max_wait": 0.0}, {"max_wait": math.inf},
        {"max_pending": 0}, {"max_spans": 0}, {"max_trace_spans": 0}, {"late_memory": -1},
        {"max_pending": True}, {"max_bytes": 0}, {"grace": True}, {"max_wait": "3s"},
    ],
)
def test_invalid_parameters_raise_value_error_naming_them(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=f"^{next(iter(bad))} must be "):
        assembler(**bad)


def test_invalid_durations_say_which_bound_they_break() -> None:
    with pytest.raises(ValueError, match=r"^grace must be >= 0 seconds, got -1\.0$"):
        assembler(grace=-1.0)
    with pytest.raises(ValueError, match=r"^max_wait must be > 0 seconds, got 0\.0$"):
        assembler(max_wait=0.0)


def test_the_smallest_bounds_are_valid() -> None:
    """Zero grace, no late memory, and one trace, span and byte held at a time."""
    a = TraceAssembler(grace=0.0, max_wait=0.5, max_pending=1, max_spans=1, late_memory=0, max_trace_spans=1, max_bytes=1)
    a.add([span(1, 1)], now=0.0)
    assert [t.trace_id for t in a.expire(0.0)] == [tid(1)]
    a.add([span(1, 2, parent=1)], now=1.0)  # nothing remembered: a new trace, not a late span
    assert a.stats().spans_late == 0 and a.stats().traces_pending == 1


def test_non_finite_now_raises() -> None:
    with pytest.raises(ValueError, match="now"):
        assembler().expire(math.nan)


def test_local_root_of_a_cycle_or_nothing_is_none() -> None:
    assert local_root([]) is None
    assert local_root([span(1, 1, parent=2), span(1, 2, parent=1)]) is None


# --- nothing is lost silently ------------------------------------------------------------------


@dataclass(frozen=True)
class _Op:
    kind: str  # "add" or "expire"
    dt: float
    spans: tuple[tuple[int, int, int, int], ...] = ()  # (trace, span id, parent, flags)


_span_spec = st.tuples(
    st.integers(1, 6), st.integers(1, 8), st.integers(0, 8), st.sampled_from([0, 0x100, 0x200, REMOTE])
)
_ops = st.lists(
    st.one_of(
        st.builds(_Op, st.just("add"), st.sampled_from([0.0, 0.5, 1.0, 3.0]),
                  st.lists(_span_spec, max_size=6).map(tuple)),
        st.builds(_Op, st.just("expire"), st.sampled_from([0.0, 1.0, 2.5, 10.0])),
    ),
    max_size=30,
)


@SETTINGS
@given(
    ops=_ops,
    max_pending=st.integers(1, 4),
    max_spans=st.integers(1, 12),
    max_trace_spans=st.integers(1, 5),
    late_memory=st.integers(0, 3),
)
def test_every_span_is_returned_once_or_counted(
    ops: list[_Op], max_pending: int, max_spans: int, max_trace_spans: int, late_memory: int
) -> None:
    a = TraceAssembler(
        grace=1.0, max_wait=5.0, max_pending=max_pending, max_spans=max_spans,
        late_memory=late_memory, max_trace_spans=max_trace_spans,
    )
    added: list[Span] = []
    returned: list[Trace] = []
    now = 0.0
    for op in ops:
        now += op.dt
        if op.kind == "add":
            batch = [
                Span(tid(t), sid(s), sid(p) if p else b"", f"n{len(added) + i}", 0, 1, flags=f)
                for i, (t, s, p, f) in enumerate(op.spans)
            ]
            added.extend(batch)
            a.add(batch, now)
        else:
            returned.extend(a.expire(now))
        s = a.stats()
        assert s.traces_pending <= max_pending
        assert s.spans_held <= max_spans
    returned.extend(a.drain())

    got = Counter(sp.name for tr in returned for sp in tr.spans)
    assert all(n == 1 for n in got.values()), "a span was returned twice"
    assert set(got) <= {sp.name for sp in added}
    s = a.stats()
    assert len(added) == sum(got.values()) + s.spans_dropped + s.spans_late
    assert s.spans_accepted == sum(got.values())
    assert s.traces_finished == len(returned)
    assert (s.traces_pending, s.spans_held) == (0, 0)
    for tr in returned:
        assert tr.spans and all(sp.trace_id == tr.trace_id for sp in tr.spans)
        assert len({sp.span_id for sp in tr.spans}) == len(tr.spans)
        assert tr.root is None or tr.root in tr.spans


def test_byte_bound_evicts_the_oldest_trace() -> None:
    from dataclasses import replace

    asm = TraceAssembler(grace=2.0, max_wait=60.0, max_pending=100, max_spans=100, max_bytes=2500)
    asm.add([replace(span(1, 1), size=1000), replace(span(2, 1), size=1000)], now=0.0)
    assert asm.stats().bytes_held == 2000 and asm.stats().traces_evicted == 0
    asm.add([replace(span(3, 1), size=1000)], now=1.0)
    stats = asm.stats()
    assert stats.traces_evicted == 1 and stats.bytes_held == 2000
    assert [t.trace_id for t in asm.expire(1.0)] == [tid(1)]
    asm.drain()
    assert asm.stats().bytes_held == 0


def test_duplicates_and_held_bytes_are_exported_with_their_labels_and_kinds() -> None:
    a = assembler()
    a.add([replace(span(1, 1), size=300), replace(span(1, 2, parent=1), size=200)], now=0.0)
    a.add([span(1, 1), span(1, 2, parent=1)], now=0.5)  # both again: duplicates
    s = a.stats()
    assert (s.spans_dropped_duplicate, s.spans_dropped, s.bytes_held) == (2, 2, 500)
    samples = {(x.name, x.labels): (x.value, x.kind) for x in s.samples()}
    assert samples[("ragmon_spans_dropped_total", (("reason", "duplicate"),))] == (2, "counter")
    assert samples[("ragmon_span_bytes_pending", ())] == (500, "gauge")


def test_a_finished_trace_gives_back_the_bytes_of_all_its_spans() -> None:
    a = assembler()
    a.add([replace(span(1, 1), size=300), replace(span(1, 2, parent=1), size=200)], now=0.0)
    a.add([replace(span(2, 3, parent=1), size=50)], now=0.0)
    assert a.stats().bytes_held == 550
    [trace] = a.expire(2.0)
    assert trace.trace_id == tid(1) and a.stats().bytes_held == 50


def test_the_byte_bound_holds_exactly_max_bytes() -> None:
    a = assembler(max_bytes=2000)
    a.add([replace(span(1, 1), size=1000), replace(span(2, 1), size=1000)], now=0.0)  # 2000 of 2000
    assert (a.stats().bytes_held, a.stats().traces_evicted) == (2000, 0)
    a.add([replace(span(3, 1), size=1)], now=0.0)
    assert (a.stats().bytes_held, a.stats().traces_evicted) == (1001, 1)


def test_from_config_takes_the_byte_bound() -> None:
    a = TraceAssembler.from_config(TracesConfig(max_bytes=1500))
    a.add([replace(span(1, 1), size=1000), replace(span(2, 1), size=1000)], now=0.0)
    assert (a.stats().bytes_held, a.stats().traces_evicted) == (1000, 1)


@pytest.mark.parametrize(
    ("arrivals", "root"),
    [
        ([(1, 5), (2, 5), (3, 5)], 1),  # equal starts: the first to arrive
        ([(1, 5), (2, 3), (3, 4)], 2),  # the earliest start, whenever it arrived
        ([(1, 5), (2, 5), (3, 2), (4, 2)], 3),
    ],
)
def test_the_root_kept_as_spans_arrive_is_local_roots_answer(arrivals: list[tuple[int, int]], root: int) -> None:
    """The assembler keeps a trace's root as its spans arrive (no pass over them when it
    finishes): the same span ``local_root`` picks, ties to the first given."""
    asm = assembler()
    spans = [span(1, i, start=start) for i, start in arrivals] + [span(1, 99, parent=1, start=6)]
    asm.add(spans, now=0.0)
    (trace,) = asm.drain()
    assert trace.root is local_root(trace.spans)
    assert trace.root is not None and trace.root.span_id == sid(root)
