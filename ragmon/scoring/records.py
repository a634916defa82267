"""A finished request's scores: retrieval metrics per relevance source, and priced model calls
(``price_calls``, also for the model calls of traces that are not RAG requests).

Pure: ``score_record`` reads a ``RagRecord`` and returns a ``RecordScores``; it holds no state
and reads no clock. The scores are never changed once made (not ``frozen``, as ``ragmon.model``'s
per-request values, for the cost of a frozen ``__init__``). The ranking scored is the one handed to generation: the reranker's output
when there was a reranker, else the retriever's (for source ``probe``, the ranking read from the
response when the probe has ``response_ids``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from ragmon.formats.relevance import Qrels
from ragmon.metrics import retrieval
from ragmon.model import LlmCall, ModelCalls, RagRecord
from ragmon.scoring.pricing import Pricer, PriceSource

__all__ = [
    "ProbeLabels", "RetrievalScore", "PricedCall", "RecordScores", "score_retrieval", "score_judged_retrieval", "score_record", "RecordScorer", "ProbeSource",
    "final_ranking", "price_calls",
]


@dataclass(slots=True)
class RetrievalScore:
    """Retrieval metrics of one query against one source of relevance (label, golden, …)."""

    source: str
    reciprocal_rank: float
    hit: dict[int, float]
    recall: dict[int, float]
    precision: dict[int, float]
    ndcg: dict[int, float]


@dataclass(slots=True, unsafe_hash=True)
class PricedCall:
    """One model call's tokens and price. ``usd`` is None when the model has no price
    (``price_source="unpriced"``) or the span reported no usage (``"no_usage"``: no tokens
    and no cost, e.g. a streamed OpenAI call without ``stream_options.include_usage``)."""

    model: str
    purpose: str
    input_tokens: int
    output_tokens: int
    usd: float | None
    price_source: PriceSource | Literal["no_usage"]


@dataclass(frozen=True, slots=True)
class ProbeLabels:
    """What the prober knows of a request it sent (source ``probe``, joined by trace id): the
    golden labels and reference answer of its query and, when the probe reads them from the
    response (``response_ids`` / ``response_answer``), the ranking and answer, which then
    replace the trace's."""

    probe: str
    grades: Mapping[str, int] | None
    reference_answer: str | None = None
    ranking: tuple[str, ...] | None = None
    answer: str | None = None

    def apply(self, record: RagRecord) -> RagRecord:
        """``record`` with the response's answer and, unless the trace had one, the reference answer."""
        answer = self.answer if self.answer is not None else record.answer
        reference = record.reference_answer or self.reference_answer
        if answer == record.answer and reference == record.reference_answer:
            return record
        return replace(record, answer=answer, reference_answer=reference)


@dataclass(slots=True)
class RecordScores:
    """Everything ragmon derives from one record."""

    retrieval: tuple[RetrievalScore, ...]
    unlabelled: bool
    """The request retrieved documents but no source said which were relevant."""
    calls: tuple[PricedCall, ...]
    probe: ProbeLabels | None = None
    """Set when the request was one of the prober's."""

    @property
    def cost_usd(self) -> float | None:
        """Cost of the request; ``None`` unless every call was priced (no cost is guessed)."""
        if not self.calls or any(c.usd is None for c in self.calls):
            return None
        return sum(c.usd for c in self.calls if c.usd is not None)


def final_ranking(record: RagRecord) -> list[str]:
    """Ids of the ranking handed to generation: reranked if a reranker ran, else retrieved."""
    documents = record.reranked if record.reranked is not None else record.retrieved
    return [d.id for d in documents]


def score_retrieval(ranking: Sequence[str], grades: dict[str, int] | dict[str, float], source: str, ks: Sequence[int]) -> RetrievalScore | None:
    """Score one ranking against one label set at every k; ``None`` when nothing is relevant."""
    scored = retrieval.score_all(ranking, grades, ks)
    if scored is None:
        return None
    rr, per_k = scored
    hit: dict[int, float] = {}
    recall: dict[int, float] = {}
    precision: dict[int, float] = {}
    ndcg: dict[int, float] = {}
    for k, (hit_k, recall_k, precision_k, ndcg_k) in per_k.items():
        hit[k], recall[k], precision[k], ndcg[k] = hit_k, recall_k, precision_k, ndcg_k
    return RetrievalScore(source, rr, hit, recall, precision, ndcg)


def score_judged_retrieval(ranking: Sequence[str], relevant_ids: Sequence[str], ks: Sequence[int]) -> RetrievalScore:
    """Score a ranking against the judge's per-document verdicts (source ``judge``).

    The judge saw every retrieved document, so an empty ``relevant_ids`` is a judged miss
    (reciprocal rank, hit rate and precision 0), not "unlabelled" as for human labels. Recall
    and NDCG need every relevant document of the corpus and are left empty for this source.
    """
    gains = retrieval.ranked_gains(ranking, dict.fromkeys(relevant_ids, 1))
    found = {k: retrieval.relevant_in_top(gains, k) for k in ks}
    return RetrievalScore(
        source="judge",
        reciprocal_rank=retrieval.reciprocal_rank_of(gains),
        hit={k: retrieval.hit_of(n) for k, n in found.items()},
        recall={},
        precision={k: retrieval.precision_of(n, k) for k, n in found.items()},
        ndcg={},
    )


def score_record(
    record: RagRecord, ks: Sequence[int], pricer: Pricer, golden: Qrels | None = None, probe: ProbeLabels | None = None,
) -> RecordScores:
    """Score a record: retrieval per relevance source (``label``, ``golden``, ``probe``) and priced calls."""
    scores: list[RetrievalScore] = []
    labelled = False
    sources: list[tuple[str, Sequence[str], dict[str, int]]] = []
    if record.has_retrieval:
        ranking = final_ranking(record)
        if record.relevance is not None:
            sources.append(("label", ranking, dict(record.relevance)))
        if golden is not None and record.query is not None:
            found = golden.lookup(None, record.query)
            if found is not None:
                sources.append(("golden", ranking, found))
    if probe is not None and probe.grades is not None and (probe.ranking is not None or record.has_retrieval):
        probed = probe.ranking if probe.ranking is not None else final_ranking(record)
        sources.append(("probe", probed, dict(probe.grades)))
    for source, ranked, grades in sources:
        score = score_retrieval(ranked, grades, source, ks)
        if score is not None:
            scores.append(score)
            labelled = True
    calls = price_calls(record.llm_calls, pricer, record.start_ns)
    return RecordScores(tuple(scores), record.has_retrieval and not labelled, calls, probe)


def price_calls(calls: Sequence[LlmCall], pricer: Pricer, start_ns: int) -> tuple[PricedCall, ...]:
    """Price model calls made at ``start_ns`` (a RAG request's or a bare call's): the span's
    cost attribute, else the price table, else genai-prices; ``"no_usage"`` without tokens."""
    priced = []
    for call in calls:
        if call.cost_usd is None and not call.input_tokens and not call.output_tokens:
            priced.append(PricedCall(call.model, call.purpose, 0, 0, None, "no_usage"))
            continue
        price = pricer.price(
            call.model, call.provider, call.input_tokens, call.output_tokens,
            cached_input_tokens=min(call.cached_input_tokens, call.input_tokens),
            span_cost_usd=call.cost_usd, at_ns=start_ns or None,
        )
        priced.append(PricedCall(call.model, call.purpose, call.input_tokens, call.output_tokens, price.usd, price.source))
    return tuple(priced)


class ProbeSource(Protocol):
    """Where a probe's relevance labels wait for its trace (``groundtruth.prober.Probes``)."""

    def take(self, trace_id: bytes) -> ProbeLabels | None:
        """The labels of the probe that sent ``trace_id``, once; None for other traces."""
        ...


@dataclass(frozen=True, slots=True)
class RecordScorer:
    """The scoring stage: each record's retrieval at ``ks`` against every relevance source it
    has (its labels, ``golden``, a probe's labels from ``probes``) and its priced calls."""

    ks: tuple[int, ...]
    pricer: Pricer
    golden: Qrels | None = None
    probes: ProbeSource | None = None

    def score(self, record: RagRecord) -> RecordScores:
        """``score_record`` with this stage's sources."""
        probe = self.probes.take(record.trace_id) if self.probes is not None else None
        return score_record(record, self.ks, self.pricer, self.golden, probe)

    def price(self, calls: ModelCalls) -> tuple[PricedCall, ...]:
        """The priced calls of a trace that is not a RAG request."""
        return price_calls(calls.calls, self.pricer, calls.start_ns)
