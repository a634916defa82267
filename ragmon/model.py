"""The values that flow between ragmon's stages: spans in, traces assembled, what the
pipeline answers when spans are offered to it, and the lifecycle its queue workers share.

Slotted and small: the decoder keeps only the attributes the conventions read
(``AttributeFilter``), so a span costs what ragmon needs of it, not what the app sent. Values
are never changed once made; those made for every span, trace or request (``Span``, ``Trace``,
``RagRecord``, ``LlmCall``, ``ModelCalls``, ``RetrievedDocument``) are not ``frozen`` only
because a frozen dataclass's ``__init__`` costs about 8x a plain one's (one
``object.__setattr__`` call per field): 2 µs a ``RagRecord``.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Literal, Self, TypeAlias

from mypy_extensions import mypyc_attr

__all__ = [
    "AttrValue",
    "Attributes",
    "AttributeFilter",
    "SpanEvent",
    "Span",
    "Trace",
    "Stage",
    "STAGES",
    "RetrievedDocument",
    "LlmCall",
    "Evaluation",
    "RagRecord",
    "ModelCalls",
    "SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE",
    "SPAN_FLAGS_CONTEXT_IS_REMOTE",
    "Offer",
    "Worker",
    "Evaluator",
    "EVALUATORS",
]

AttrValue: TypeAlias = "str | bool | int | float | bytes | tuple[AttrValue, ...] | None"
Attributes: TypeAlias = Mapping[str, AttrValue]

SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE = 0x100
"""OTLP span flags bit: whether the parent is remote is known (bit 0x200 is meaningful)."""
SPAN_FLAGS_CONTEXT_IS_REMOTE = 0x200
"""OTLP span flags bit: the parent span lives in another process."""
SPAN_KIND_SERVER = 2
SPAN_KIND_CONSUMER = 5


Evaluator: TypeAlias = Literal[
    "faithfulness", "answer_relevance", "context_relevance", "answer_correctness", "coherence", "toxicity"
]
EVALUATORS: Final[tuple[Evaluator, ...]] = (
    "faithfulness",
    "answer_relevance",
    "context_relevance",
    "answer_correctness",
    "coherence",
    "toxicity",
)
"""The judge's evaluators, in canonical order (the one list: config and the judge read it)."""


class Offer(enum.Enum):
    """What a span sink did with an offered batch (as the OTel SDK's ``SpanExportResult``).

    A refusal's value is its ``reason`` in ``ragmon_spans_rejected_total``; the receiver
    answers it with 503 / UNAVAILABLE so the exporter retries.
    """

    ACCEPTED = "accepted"
    """Queued: the pipeline owns the spans now."""
    OVERLOADED = "overloaded"
    """The queue is full (in spans or bytes)."""
    SHUTTING_DOWN = "shutting_down"
    """The pipeline no longer accepts spans."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Worker(abc.ABC):
    """A stage that runs in the background behind a bounded queue (the pipeline, the judge, the
    onward sender): ``async with worker:`` starts it, and leaving the block stops it, letting
    what it holds finish for at most ``stop_timeout`` seconds (what cannot is counted, never
    silently lost). The sidecar enters them in an ``AsyncExitStack``.
    """

    stop_timeout: float
    """Seconds ``stop`` gets when the ``async with`` block ends."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the background task(s)."""

    @abc.abstractmethod
    async def stop(self, timeout: float) -> None:
        """Stop accepting, finish what is held within ``timeout`` seconds, then cut off."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None,
    ) -> None:
        await self.stop(self.stop_timeout)


@dataclass(frozen=True, slots=True)
class AttributeFilter:
    """Which attribute keys to keep: exact ``keys`` and any key starting with one of ``prefixes``."""

    keys: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def wants(self, key: str) -> bool:
        """True when ``key`` is kept."""
        return key in self.keys or key.startswith(self.prefixes)


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event the conventions read (e.g. ``gen_ai.evaluation.result``)."""

    name: str
    time_ns: int
    attributes: Attributes


@dataclass(slots=True)
class Span:
    """One span, reduced to what ragmon reads; never changed once made.

    Not ``frozen``: a frozen dataclass's ``__init__`` costs 4x a plain one (one
    ``object.__setattr__`` call per field), and the decoder makes one per span received.

    Ids are raw bytes (16 for a trace, 8 for a span); ``parent_span_id`` is ``b""`` for a root.
    ``flags`` are OTLP span flags (bits 0x100/0x200 tell whether the parent is remote).
    ``service`` is the resource's ``service.name``; ``resource`` keeps the wanted resource
    attributes (e.g. the variant attribute).
    """

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    start_ns: int
    end_ns: int
    flags: int = 0
    kind: int = 0
    """OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer (0 unspecified)."""
    error: bool = False
    service: str = ""
    attributes: Attributes = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    resource: Attributes = field(default_factory=dict)
    size: int = 0
    """Bytes of memory this span holds, at least what it really holds (the decoder counts it;
    queue and assembly byte caps add it up): this object, its ids and numbers, its name,
    ``service``, every kept attribute key and value of every kind (strings, bytes, numbers,
    arrays element by element, key-value lists as their JSON text), its events (name, time,
    attributes) and the resource attributes, with per-object headers, dict entries and
    allocator rounding. Objects a span shares with others of its resource (``service``,
    ``resource``) are counted on each: any one of them may outlive the rest."""

    @property
    def has_remote_parent(self) -> bool:
        """True when the parent lives in another process.

        The span flags say so when the producer sets bit 0x100 (then 0x200 is the answer);
        producers that do not are read by span kind: a SERVER or CONSUMER span's parent is
        the caller's span, in another process.
        """
        if not self.parent_span_id:
            return False
        if self.flags & SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE:
            return bool(self.flags & SPAN_FLAGS_CONTEXT_IS_REMOTE)
        return self.kind in (SPAN_KIND_SERVER, SPAN_KIND_CONSUMER)


@dataclass(slots=True)
class Trace:
    """The spans of one trace, as assembled; ``root`` is the local root span, if one arrived."""

    trace_id: bytes
    spans: tuple[Span, ...]
    root: Span | None


Stage: TypeAlias = Literal["retrieval", "rerank", "generation", "embedding"]
STAGES: Final[tuple[Stage, ...]] = ("retrieval", "rerank", "generation", "embedding")
"""Every stage, in the order of a request (``total`` is the request itself)."""
"""Pipeline stages with their own latency (``total`` is the whole trace)."""


@dataclass(slots=True)
class RetrievedDocument:
    """One ranked document: the id used for scoring (see ``[scoring] document_id``), its
    retriever score and content when the span carried them. Never changed once made (not
    ``frozen`` for the same reason as ``Span``)."""

    id: str
    score: float | None = None
    content: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class LlmCall:
    """One model call with its tokens; ``purpose`` says what it was for (a call under a
    RERANKER span is reranking cost, not the answer). ``cost_usd`` is set only when the span
    carried a cost attribute."""

    model: str
    provider: str | None
    input_tokens: int
    output_tokens: int
    purpose: Literal["generation", "rerank", "embedding", "other"] = "generation"
    cost_usd: float | None = None
    cached_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A ``gen_ai.evaluation.result`` event found in the trace (source ``app``)."""

    name: str
    score: float | None
    label: str | None = None


@dataclass(slots=True)
class RagRecord:
    """One finished request, as the conventions read it from its trace.

    ``retrieved`` is the ranking of the outermost retriever span with documents; ``reranked``
    the reranker's output when there was one. ``relevance`` (id -> grade) comes from
    ``ragmon.relevant_document_ids`` / ``ragmon.relevance`` when the app attached them.
    ``stage_seconds`` sums the outermost spans of each stage whose duration is in range.
    ``content_recorded`` is False
    when the instrumentation recorded no message content (then only latency, tokens and
    cost can be measured).
    """

    trace_id: bytes
    service: str
    variant: str
    start_ns: int
    end_ns: int
    error: bool = False
    query: str | None = None
    retrieved: tuple[RetrievedDocument, ...] = ()
    reranked: tuple[RetrievedDocument, ...] | None = None
    answer: str | None = None
    relevance: Mapping[str, int] | None = None
    reference_answer: str | None = None
    llm_calls: tuple[LlmCall, ...] = ()
    stage_seconds: Mapping[Stage, float] = field(default_factory=dict)
    invalid_durations: tuple[str, ...] = ()
    """Stages of the spans left out of ``stage_seconds``: each a span whose duration was out of
    range (``ragmon.numbers.span_seconds``), one entry a span."""
    evaluations: tuple[Evaluation, ...] = ()
    has_retrieval: bool = False
    content_recorded: bool = True
    root_span_id: bytes = b""
    """The local root span's id (judge results sent onward are parented to it)."""
    conventions: frozenset[str] = frozenset()
    """The conventions its retriever, reranker and model-call spans were read by
    (``openinference``, ``genai``, ``openllmetry``): for the status page."""

    @property
    def duration_seconds(self) -> float:
        """Wall time of the local root span."""
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(slots=True)
class ModelCalls:
    """The model calls of a finished trace that is not a RAG request: a bare instrumented
    client's call (one trace per call, no application span), or embedding calls alone (an
    indexing job). They count in tokens and cost only, never as a request."""

    trace_id: bytes
    service: str
    start_ns: int
    calls: tuple[LlmCall, ...]
