"""The judge's queue is bounded in bytes as well as records (issue "Trust, second round": traces
of 900 x 16,000-character documents grew RSS to 3 GB with 189 queued): a queued item holds the
record as cut, never the original's document texts, its bytes are counted as held (checked
with ``tracemalloc``), and past ``judge.max_queue_bytes`` a record is dropped and counted."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from test_judge_runner import _NoCalls, config, record
from ragmon.judge.prompts import MAX_DATA_CHARS, REDACT_MARGIN
from ragmon.judge.runner import Judge
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.scoring.pricing import Pricer

KEEP = MAX_DATA_CHARS + REDACT_MARGIN


def huge(n: int, n_docs: int = 300, chars: int = 16_000, char: str = "x") -> RagRecord:
    """Record ``n`` with ``n_docs`` documents of ``chars`` characters (made here, not shared)."""
    docs = tuple(RetrievedDocument(f"doc-{n}-{i}", 0.5, f"{n:04d}{i:04d}" + char * (chars - 8)) for i in range(n_docs))
    return record(n, query=f"query {n} " + "q" * 20_000, answer=f"answer {n} " + "a" * 300, retrieved=docs)


def judge(**kw: object) -> Judge:
    """A judge never started: what it queues stays queued."""
    return Judge(config(**kw), _NoCalls(), Pricer(package_table=False), lambda: 0.0, lambda r, j: None)


@pytest.mark.parametrize("char", ["x", "\U0001f600"], ids=["ascii", "ucs4"])
def test_the_bytes_counted_are_the_bytes_held_and_no_original_text_is_kept(char: str) -> None:
    j = judge(max_documents=20, max_queue=100)
    assert j.submit(huge(0, char=char), 0.0) == "queued"  # the first allocations of the path, not measured
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counted_before = j.stats().queue_bytes
        for n in range(1, 11):
            assert j.submit(huge(n, char=char), 0.0) == "queued"  # the original is freed at once
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = j.stats().queue_bytes - counted_before
    width = 1 if char == "x" else 4
    # ten records: 300 x 16,000 characters each (4.8 M characters); kept: 20 documents cut to
    # MAX_DATA_CHARS + REDACT_MARGIN characters, the query cut likewise, the answer
    assert 10 * (20 * KEEP * width + KEEP) < held <= counted <= held * 1.02
    assert counted < 10 * (20 * (KEEP * width + 300) + KEEP + 3000)  # not the 4.8 M characters
    assert j.stats().queue_depth == 11


def test_past_max_queue_bytes_a_record_is_dropped_and_counted() -> None:
    one = judge(max_documents=20)
    assert one.submit(huge(1), 0.0) == "queued"
    size = one.stats().queue_bytes
    j = judge(max_documents=20, max_queue_bytes=2 * size + size // 2)
    assert [j.submit(huge(n), 0.0) for n in range(1, 5)] == ["queued", "queued", "dropped", "dropped"]
    stats = j.stats()
    assert (stats.queue_depth, stats.queue_bytes) == (2, 2 * size)
    assert {e: stats.counts.get((e, "dropped")) for e in ("faithfulness", "coherence")} == dict.fromkeys(
        ("faithfulness", "coherence"), 2)
    assert j.submit(record(9), 0.0) == "queued"  # a small one still fits


def test_an_empty_queue_takes_one_record_whatever_its_size() -> None:
    j = judge(max_queue_bytes=1)
    assert [j.submit(huge(n), 0.0) for n in (1, 2)] == ["queued", "dropped"]


def test_bytes_go_back_as_records_leave_the_queue() -> None:
    async def main() -> Judge:
        j = judge(max_documents=20, concurrency=1)
        for n in range(3):
            assert j.submit(huge(n), 0.0) == "queued"
        assert j.stats().queue_bytes > 0
        await j.stop(0.1)  # never started: the queued are dropped, their bytes with them
        return j

    stats = asyncio.run(main()).stats()
    assert (stats.queue_depth, stats.queue_bytes) == (0, 0)
    assert stats.counts[("faithfulness", "dropped")] == 3
