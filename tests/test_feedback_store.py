"""``FeedbackStore``'s bounds on their own: traces, bytes and age."""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import pytest

from ragmon.groundtruth.feedback import ENTRY_OVERHEAD_BYTES, FeedbackStore, Kept, entry_size, held_ids


def _str(text: str) -> int:
    return sys.getsizeof(text) + 16


def _id(i: int) -> bytes:
    return i.to_bytes(16, "big")


def test_the_byte_bound_evicts_the_oldest_and_counts_every_byte() -> None:
    size = ENTRY_OVERHEAD_BYTES + _str("doc1\x00doc2\x00doc3") + _str("svc") + _str("é")
    store = FeedbackStore(retention=60.0, max_traces=100, keep_ids=3, max_bytes=2 * size)
    for i in range(3):
        store.keep(_id(i), ["doc1", "doc2", "doc3", "doc4"], "svc", "é", now=float(i))
    assert (len(store), store.bytes, store.dropped) == (2, 2 * size, {"evicted": 1, "expired": 0})
    assert store.find(_id(0), 3.0) == "unknown_trace"
    found = store.find(_id(2), 3.0)
    assert isinstance(found, Kept) and found.ranking == ("doc1", "doc2", "doc3")


def test_keeping_a_trace_again_replaces_it_and_age_expires_it() -> None:
    store = FeedbackStore(retention=10.0, max_traces=5, keep_ids=10)
    store.keep(_id(1), ["a"], "s", "v", now=0.0)
    store.keep(_id(1), ["a", "b"], "s", "v", now=5.0)
    assert (len(store), store.bytes) == (1, ENTRY_OVERHEAD_BYTES + _str("a\x00b") + 2 * _str("s"))
    store.keep(_id(2), ["c"], "s", "v", now=15.0)  # expires what is older than retention: not _id(1), exactly as old
    assert (len(store), store.dropped["expired"]) == (2, 0)
    assert isinstance(store.find(_id(1), 15.0), Kept)
    assert store.find(_id(1), 15.5) == "expired"
    assert (len(store), store.bytes, store.dropped["expired"]) == (1, ENTRY_OVERHEAD_BYTES + _str("c") + 2 * _str("s"), 1)


@pytest.mark.parametrize(
    ("ranking", "held"),
    [
        (["d1", "d2"], "d1\x00d2"),
        ([], ""),
        (["only"], "only"),
        (["a\x00b", "c"], ("a\x00b", "c")),  # an id holding the separator: kept apart
        (["", "c"], ("", "c")),  # an empty id would not survive the split
    ],
)
def test_a_ranking_is_held_as_one_string_and_read_back_whole(ranking: list[str], held: object) -> None:
    assert held_ids(ranking) == held
    store = FeedbackStore(retention=60.0, max_traces=5, keep_ids=10)
    store.keep(_id(1), ranking, "s", "v", now=0.0)
    found = store.find(_id(1), 0.0)
    assert isinstance(found, Kept) and found.ranking == tuple(ranking)


def test_a_tuple_of_ids_counts_the_tuple_and_every_string() -> None:
    ids = ("a\x00b", "c")
    assert entry_size(ids, "s", "v") == (
        ENTRY_OVERHEAD_BYTES + sys.getsizeof(ids) + 16 + _str("a\x00b") + _str("c") + 2 * _str("s")
    )


@pytest.mark.parametrize("n", [1_000, 50_000])
def test_the_bytes_counted_are_at_least_what_the_store_holds(n: int) -> None:
    """Every kept byte is counted: tracemalloc's count of what the store holds (entries, ids,
    trace ids, its tables) stays under ``store.bytes``, for short and non-ASCII ids too."""
    for make in (lambda i: f"kb-{i:06d}#chunk-{i % 13}", lambda i: f"é{i}"):
        store = FeedbackStore(retention=3600.0, max_traces=10**6, keep_ids=10)
        rankings = [[make(i * 10 + j) for j in range(10)] for i in range(n)]
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i, ranking in enumerate(rankings):
                store.keep(os.urandom(16), ranking, "rag-api", "A", now=float(i))
            del rankings, ranking
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held <= store.bytes, (n, held / n, store.bytes / n)


def test_kept_entries_leave_the_cycle_collectors_care() -> None:
    """A full store is not walked by every full collection: after one pass the collector no
    longer tracks an entry (strings and numbers only), whether its ids are one string or a
    tuple, and after its relevance was taken."""
    store = FeedbackStore(retention=60.0, max_traces=100, keep_ids=3)
    store.keep(_id(1), ["doc1", "doc2"], "svc", "v", now=0.0)
    store.keep(_id(2), ["doc1", ""], "svc", "v", now=0.0)  # an empty id: ids held as a tuple
    found = store.find(_id(1), 1.0)
    assert isinstance(found, Kept)
    store.take_relevance(_id(1), found)
    gc.collect()
    gc.collect()  # a tuple of ids is untracked in the first pass, the entry holding it in the next
    held = list(store._kept.values())  # what the store holds, not find's answer made from it
    assert [type(e[0]) for e in held] == [str, tuple]
    assert [gc.is_tracked(e) for e in held] == [False, False]
    taken = store.find(_id(1), 1.0)
    assert isinstance(taken, Kept) and taken.relevance_taken and taken.ranking == ("doc1", "doc2")
    assert store.trace_ids() == [_id(1), _id(2)]  # taking relevance keeps the entry's place
