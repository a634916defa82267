"""User feedback (``POST /v1/feedback``): the bodies it accepts and the finished traces it joins.

``parse_feedback`` turns a JSON body into ``RelevanceFeedback`` or ``ScoreFeedback``, or raises
``FeedbackError`` naming the field. ``FeedbackStore`` keeps, per scored RAG trace, what feedback
needs to score it later (the final ranking cut to the largest k, service, variant, when it was
kept): at most ``max_traces`` entries and ``MAX_BYTES`` bytes (the oldest evicted first, counted) for at most
``retention`` seconds (older ones dropped, counted). Relevance feedback is taken once per trace,
and a named score once per trace and name (the first wins; later ones are counted
``duplicate``), for at most ``MAX_SCORE_NAMES`` names per trace (more are counted ``limited``):
one trace cannot weigh more than one user's verdict in a mean, however often it is posted.
Numbers pass ``ragmon.numbers`` (grades whole and at most 10^12, scores in [0, 1]) before any
maths: a body that could not be scored is refused whole, and takes no slot.
"""

from __future__ import annotations

import json
import re
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias

from prometheus_client.metrics_core import Metric

from ragmon import catalogue as cat
from ragmon.errors import FeedbackError
from ragmon.numbers import MAX_COUNT, as_grade, as_unit
from ragmon.model import RagRecord
from ragmon.scoring.records import RecordScores, RetrievalScore, final_ranking, score_retrieval

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "MAX_IDS",
    "MAX_SCORE_NAMES",
    "OUTCOMES",
    "Feedback",
    "FeedbackError",
    "FeedbackSink",
    "FeedbackStore",
    "Kept",
    "RelevanceFeedback",
    "ScoreFeedback",
    "decode_feedback",
    "parse_feedback",
]

OUTCOMES = ("accepted", "invalid", "unknown_trace", "expired", "duplicate", "limited")
"""``ragmon_feedback_total{outcome}``."""
ENTRY_OVERHEAD_BYTES = 200
"""Bytes counted per kept trace besides its ids and strings: the entry object, its trace id, time
and size, and its share of the store's tables (measured with tracemalloc, with room for the
tables' growth: tests/test_feedback_store.py holds the count above what is held)."""
MAX_BYTES = 256 * 1024 * 1024
"""Bytes of kept traces (``entry_size``) past which the oldest are evicted, whatever ``max_traces``."""
MAX_NAME_CHARS = 64
MAX_IDS = 10_000
"""Documents one relevance feedback may name (bounds the work of checking and scoring it)."""
MAX_SCORE_NAMES = 8
"""Names a trace may take a score of (thumbs, rating, …); a body naming another is 409 ``limited``."""
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class RelevanceFeedback:
    """Which documents the user found relevant: ``grades`` is id -> grade (> 0 relevant)."""

    trace_id: bytes
    grades: dict[str, int]


@dataclass(frozen=True, slots=True)
class ScoreFeedback:
    """A named user score in [0, 1] (thumbs: 0 or 1; a rating scaled to [0, 1] by the app)."""

    trace_id: bytes
    name: str
    score: float


def _trace_id(value: Any) -> bytes:
    if not isinstance(value, str) or not _TRACE_ID.match(value.lower()) or value == "0" * 32:
        raise FeedbackError("trace_id: expected 32 hex digits (not all zero)")
    return bytes.fromhex(value)


def _ids(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FeedbackError("relevant_document_ids: expected a list of strings")
    if len(value) > MAX_IDS:
        raise FeedbackError(f"relevant_document_ids: at most {MAX_IDS} ids")
    return list(value)


def _grades(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise FeedbackError("relevance: expected an object of document id -> grade")
    if len(value) > MAX_IDS:
        raise FeedbackError(f"relevance: at most {MAX_IDS} ids")
    grades: dict[str, int] = {}
    for key, raw in value.items():
        grade = None if isinstance(raw, str) else as_grade(raw)
        if grade is None:
            raise FeedbackError(f"relevance: grade of {key!r} must be a whole number from 0 to {MAX_COUNT:,}")
        grades[key] = grade
    return grades


def parse_feedback(body: Any) -> RelevanceFeedback | ScoreFeedback:
    """One feedback body (decoded JSON), or ``FeedbackError`` naming the field."""
    if not isinstance(body, dict):
        raise FeedbackError("body: expected a JSON object")
    trace_id = _trace_id(body.get("trace_id"))
    relevance = "relevant_document_ids" in body or "relevance" in body
    named = "name" in body or "score" in body
    if relevance == named:
        raise FeedbackError('body: give either "relevant_document_ids" (or "relevance") or "name" and "score"')
    if named:
        name, score = body.get("name"), body.get("score")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise FeedbackError(f"name: expected a non-empty string of at most {MAX_NAME_CHARS} characters")
        unit = as_unit(score)
        if unit is None:
            raise FeedbackError("score: expected a number in [0, 1]")
        return ScoreFeedback(trace_id, name, float(unit))
    grades = {doc: 1 for doc in _ids(body["relevant_document_ids"])} if "relevant_document_ids" in body else {}
    if "relevance" in body:
        grades.update(_grades(body["relevance"]))
    return RelevanceFeedback(trace_id, grades)


_JOIN = "\x00"
"""Between the ids of a kept ranking held as one string."""


class Kept(NamedTuple):
    """What feedback needs of one scored trace (``FeedbackStore.find``'s answer; the store
    holds the same fields as a plain tuple)."""

    ids: str | tuple[str, ...]
    """The ranking's ids joined by NUL: one string object, not one per id (a tuple when an id is
    empty or holds a NUL)."""
    service: str
    variant: str
    kept_at: float
    size: int
    relevance_taken: bool = False
    scored: tuple[str, ...] = ()
    """Names the trace has taken a score of (at most ``MAX_SCORE_NAMES``)."""

    @property
    def ranking(self) -> tuple[str, ...]:
        """The ranking's ids, best first."""
        ids = self.ids
        if isinstance(ids, tuple):
            return ids
        return tuple(ids.split(_JOIN)) if ids else ()


_Entry: TypeAlias = tuple[str | tuple[str, ...], str, str, float, int, bool, tuple[str, ...]]
_KEPT_AT: Final = 3  # Kept's fields in an _Entry
_SIZE: Final = 4


def held_ids(ranking: Sequence[str]) -> str | tuple[str, ...]:
    """``Kept.ids`` for ``ranking``."""
    joined = _JOIN.join(ranking)
    if (ranking and joined.count(_JOIN) != len(ranking) - 1) or any(not i for i in ranking):
        return tuple(ranking)
    return joined


def _text_bytes(text: str) -> int:
    """Bytes of a ``str`` object holding ``text`` (at least ``sys.getsizeof``, allocator rounding added)."""
    return sys.getsizeof(text) + 16


def names_size(names: tuple[str, ...]) -> int:
    """Bytes of a tuple of score names and its strings (0 for the empty tuple: shared)."""
    return sys.getsizeof(names) + 16 + sum(_text_bytes(n) for n in names) if names else 0


def entry_size(ids: str | tuple[str, ...], service: str, variant: str) -> int:
    """Bytes counted for one kept trace: its ids (one string, or a tuple and its strings),
    service and variant (counted on every entry, though entries often share them) and
    ``ENTRY_OVERHEAD_BYTES`` (the entry, its trace id, time and size, and its slot in the store)."""
    held = (
        _text_bytes(ids) if isinstance(ids, str)
        else sys.getsizeof(ids) + 16 + sum(_text_bytes(i) for i in ids)
    )
    return ENTRY_OVERHEAD_BYTES + held + _text_bytes(service) + _text_bytes(variant)


class FeedbackStore:
    """Scored traces joinable by feedback, oldest first; ``find`` tells unknown from expired."""

    def __init__(self, retention: float, max_traces: int, keep_ids: int, max_bytes: int = MAX_BYTES) -> None:
        self.retention = retention
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.keep_ids = keep_ids
        """Ids of a ranking kept: the largest k (no metric looks deeper)."""
        self._kept: OrderedDict[bytes, _Entry] = OrderedDict()
        """``Kept``'s fields as a plain tuple of strings and numbers: the cycle collector stops
        tracking one after its first pass (not a tuple subclass's), so a full store (100,000
        entries by default) is not walked by every full collection of ``ragmon run``."""
        self.bytes = 0
        self.dropped = {"evicted": 0, "expired": 0}
        self.outcomes = dict.fromkeys(OUTCOMES, 0)

    def __len__(self) -> int:
        return len(self._kept)

    def trace_ids(self) -> list[bytes]:
        """The trace ids kept, oldest first."""
        return list(self._kept)

    def keep(self, trace_id: bytes, ranking: Sequence[str], service: str, variant: str, now: float) -> None:
        """Keep one scored trace (a trace id seen again replaces its entry)."""
        self.expire(now)
        old = self._kept.pop(trace_id, None)
        if old is not None:
            self.bytes -= old[_SIZE]
        ids = held_ids(ranking[: self.keep_ids])
        size = entry_size(ids, service, variant)
        self._kept[trace_id] = (ids, service, variant, now, size, False, ())
        self.bytes += size
        while len(self._kept) > self.max_traces or self.bytes > self.max_bytes:
            self._drop("evicted")

    def take_relevance(self, trace_id: bytes, entry: Kept) -> None:
        """Mark ``entry`` (``find``'s for ``trace_id``) as having had its relevance feedback."""
        self._kept[trace_id] = (entry.ids, entry.service, entry.variant, entry.kept_at, entry.size, True, entry.scored)

    def take_score(self, trace_id: bytes, entry: Kept, name: str) -> None:
        """Mark ``entry`` (``find``'s for ``trace_id``) as having had a score named ``name``; the
        name's bytes count from now on."""
        scored = (*entry.scored, name)
        size = entry.size + names_size(scored) - names_size(entry.scored)
        self.bytes += size - entry.size
        self._kept[trace_id] = (entry.ids, entry.service, entry.variant, entry.kept_at, size, entry.relevance_taken, scored)
        while self.bytes > self.max_bytes:
            self._drop("evicted")

    def expire(self, now: float) -> None:
        """Drop the entries older than ``retention`` (counted ``expired``)."""
        while self._kept:
            oldest = next(iter(self._kept.values()))
            if now - oldest[_KEPT_AT] <= self.retention:
                return
            self._drop("expired")

    def _drop(self, reason: Literal["evicted", "expired"]) -> None:
        _, entry = self._kept.popitem(last=False)
        self.bytes -= entry[_SIZE]
        self.dropped[reason] += 1

    def find(self, trace_id: bytes, now: float) -> Kept | Literal["unknown_trace", "expired"]:
        """The entry of ``trace_id``; "expired" when it is kept but older than ``retention``
        (then dropped), "unknown_trace" otherwise (never kept, evicted, or already dropped)."""
        entry = self._kept.get(trace_id)
        if entry is None:
            return "unknown_trace"
        if now - entry[_KEPT_AT] > self.retention:
            self.expire(now)
            return "expired"
        return Kept(*entry)

    def count(self, outcome: str) -> None:
        """Count one feedback request's outcome (``OUTCOMES``)."""
        self.outcomes[outcome] += 1



def decode_feedback(body: bytes) -> RelevanceFeedback | ScoreFeedback | FeedbackError:
    """A body decoded and checked, or the error naming the field (pure: safe in a worker thread)."""
    try:
        return parse_feedback(json.loads(body))
    except FeedbackError as exc:
        return exc
    except (ValueError, RecursionError):  # json.JSONDecodeError and bad UTF-8 are ValueErrors
        return FeedbackError("body: not valid JSON")


class FeedbackSink(Protocol):
    """Where joined feedback goes (``RagMetrics``)."""

    def observe_feedback(self, service: str, variant: str, trace_id: str, retrieval: RetrievalScore | None,
                         scores: Mapping[str, float], now: float) -> None: ...


@dataclass
class Feedback:
    """The feedback stage: ``keep`` scored traces; ``decode`` then ``join`` feedback bodies."""

    store: FeedbackStore
    sink: FeedbackSink
    ks: tuple[int, ...]
    clock: Callable[[], float]

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """A scored request (a ``RecordConsumer``): kept joinable by its final ranking."""
        self.keep(record.trace_id, final_ranking(record), record.service, record.variant, now)

    def keep(self, trace_id: bytes, ranking: Sequence[str], service: str, variant: str, now: float) -> None:
        """Keep a scored RAG trace joinable (only those that retrieved documents)."""
        if ranking:
            self.store.keep(trace_id, ranking, service, variant, now)

    @staticmethod
    def decode(body: bytes) -> RelevanceFeedback | ScoreFeedback | FeedbackError:
        """``decode_feedback``: pure, so the receiver may run it in a worker thread."""
        return decode_feedback(body)

    def join(self, parsed: RelevanceFeedback | ScoreFeedback | FeedbackError) -> tuple[int, dict[str, str]]:
        """HTTP status and JSON answer for one decoded body, at ``clock()``: 202 accepted, 400
        invalid (the field named), 404 unknown or expired trace, 409 relevance (or a score of
        the same name) given before for the trace, or scores of ``MAX_SCORE_NAMES`` names."""
        now = self.clock()
        if isinstance(parsed, FeedbackError):
            self.store.count("invalid")
            return 400, {"error": str(parsed)}
        found = self.store.find(parsed.trace_id, now)
        if isinstance(found, str):
            self.store.count(found)
            what = "expired: older than feedback.retention" if found == "expired" else "unknown: no scored RAG trace with this id"
            return 404, {"error": f"trace_id: {what}"}
        retrieval: RetrievalScore | None = None
        scores: dict[str, float] = {}
        if isinstance(parsed, RelevanceFeedback):
            if found.relevance_taken:
                self.store.count("duplicate")
                return 409, {"error": "trace_id: relevance feedback was already taken for this trace (the first wins)"}
            retrieval = score_retrieval(found.ranking, parsed.grades, "feedback", self.ks)  # before the slot is taken
            self.store.take_relevance(parsed.trace_id, found)
            if retrieval is None:  # nothing relevant: every metric is 0 and recall undefined; as for labels
                self.store.count("accepted")
                return 202, {"status": "accepted", "note": "no document graded relevant: not scored"}
        else:
            if parsed.name in found.scored:
                self.store.count("duplicate")
                return 409, {"error": "name: a score of this name was already taken for this trace (the first wins)"}
            if len(found.scored) >= MAX_SCORE_NAMES:
                self.store.count("limited")
                return 409, {"error": f"name: this trace already has scores of {MAX_SCORE_NAMES} names"}
            self.store.take_score(parsed.trace_id, found, parsed.name)
            scores[parsed.name] = parsed.score
        self.sink.observe_feedback(found.service, found.variant, parsed.trace_id.hex(), retrieval, scores, now)
        self.store.count("accepted")
        return 202, {"status": "accepted"}

    def collect(self) -> list[Metric]:
        """``ragmon_feedback_total``, ``ragmon_feedback_traces``, ``…_bytes``, ``…_dropped_total``."""
        store = self.store
        outcomes = cat.FEEDBACK.empty()
        for outcome, n in store.outcomes.items():
            outcomes.add_metric([outcome], n)
        held = cat.FEEDBACK_TRACES.empty()
        held.add_metric([], len(store))
        size = cat.FEEDBACK_TRACES_BYTES.empty()
        size.add_metric([], store.bytes)
        dropped = cat.FEEDBACK_TRACES_DROPPED.empty()
        for reason, n in store.dropped.items():
            dropped.add_metric([reason], n)
        return [outcomes, held, size, dropped]
