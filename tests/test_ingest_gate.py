"""What both OTLP receivers share: the ingest gate's turns and the counters ``hand_over`` keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from ragmon.otlp.decode import Decoded
from ragmon.model import Offer, Span
from ragmon.receivers.ingest import IngestGate, IngestStats, hand_over


def _span(name: str) -> Span:
    return Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, parent_span_id=b"", name=name, start_ns=1, end_ns=2)


@dataclass
class Sink:
    answer: Offer = Offer.ACCEPTED

    def offer(self, spans: Sequence[Span]) -> Offer:
        return self.answer


def test_the_default_gate_gives_two_turns_and_waits_two_seconds() -> None:
    """The documented defaults (docs/explanation/sidecar.md: two bodies worked on at once, the others wait up to 2 s)."""

    async def run() -> list[bool]:
        gate = IngestGate()
        assert (gate.slots, gate.wait) == (2, 2.0)
        gate.wait = 0.01  # do not wait 2 s for the third
        return [await gate.enter(), await gate.enter(), await gate.enter()]

    assert asyncio.run(run()) == [True, True, False]


@pytest.mark.parametrize("slots, wait", [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_a_gate_without_turns_or_without_a_wait_is_refused(slots: int, wait: float) -> None:
    with pytest.raises(ValueError, match=r"slots >= 1 and wait > 0, got"):
        IngestGate(slots=slots, wait=wait)


def test_counters_add_up_over_requests() -> None:
    """Refused spans, rejected spans per reason and truncated attributes accumulate, request
    after request."""
    stats, sink = IngestStats(), Sink()
    for _ in range(2):
        decoded = Decoded(spans=[_span("a")], truncated=3)
        decoded.reject("invalid_span_id")
        response = hand_over(decoded, sink, stats, "http")
        assert not isinstance(response, Offer) and response.partial_success.rejected_spans == 1
    sink.answer = Offer.OVERLOADED
    for _ in range(2):
        assert hand_over(Decoded(spans=[_span("a"), _span("b")]), sink, stats, "http") is Offer.OVERLOADED
    assert stats.spans_received == {"http": 4}
    assert stats.attributes_truncated == {"http": 6}
    assert stats.spans_rejected == {("http", "invalid_span_id"): 2, ("http", "overloaded"): 4}
