"""``FeedbackStore``'s bounds on their own: traces, bytes and age."""

from __future__ import annotations

from ragmon.groundtruth.feedback import ENTRY_OVERHEAD_BYTES, FeedbackStore, Kept


def _id(i: int) -> bytes:
    return i.to_bytes(16, "big")


def test_the_byte_bound_evicts_the_oldest_and_counts_every_byte() -> None:
    size = ENTRY_OVERHEAD_BYTES + 3 * 4 + len("svc") + len("é".encode())  # "é" is 2 bytes
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
    assert (len(store), store.bytes) == (1, ENTRY_OVERHEAD_BYTES + 4)
    assert isinstance(store.find(_id(1), 15.0), Kept)
    assert store.find(_id(1), 15.5) == "expired"
    assert (len(store), store.bytes, store.dropped["expired"]) == (0, 0, 1)
