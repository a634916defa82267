"""Record scoring: each retrieval score equals the metric core's per-query function of its name;
a record's sources, ``unlabelled`` flag and priced calls."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from genai_prices.data import providers as bundled_providers
from genai_prices.types import ModelPrice
from hypothesis import given
from strategies import SETTINGS, graded_relevance, rankings

from ragmon.config import Price
from ragmon.formats.relevance import Qrels
from ragmon.formats.text import normalize_query
from ragmon.metrics import retrieval
from ragmon.model import LlmCall, RagRecord, RetrievedDocument
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import PricedCall, ProbeLabels, score_record, score_retrieval

KS = (1, 2, 3, 5, 10)


@SETTINGS
@given(rankings, graded_relevance)
def test_each_score_is_its_own_metric(ranking: list[str], grades: dict[str, int]) -> None:
    score = score_retrieval(ranking, grades, "label", KS)
    if retrieval.reciprocal_rank(ranking, grades) is None:
        assert score is None
        return
    assert score is not None and score.source == "label"
    assert score.reciprocal_rank == retrieval.reciprocal_rank(ranking, grades)
    for k in KS:
        assert score.hit[k] == retrieval.hit_at_k(ranking, grades, k)
        assert score.recall[k] == retrieval.recall_at_k(ranking, grades, k)
        assert score.precision[k] == retrieval.precision_at_k(ranking, grades, k)
        assert score.ndcg[k] == retrieval.ndcg_at_k(ranking, grades, k)


def test_two_relevant_documents_tell_every_metric_apart() -> None:
    score = score_retrieval(["a", "x", "b", "y"], {"a": 2, "b": 1, "c": 1}, "golden", (1, 3))
    assert score is not None
    assert score.hit == {1: 1.0, 3: 1.0}
    assert score.recall == {1: 1 / 3, 3: 2 / 3}
    assert score.precision == {1: 1.0, 3: 2 / 3}
    assert score.ndcg[1] == 1.0 and 0 < score.ndcg[3] < 1


def _record(**fields: object) -> RagRecord:
    return RagRecord(trace_id=bytes(range(16)), service="svc", variant="v", start_ns=0, end_ns=10**9, **fields)  # type: ignore[arg-type]


def _docs(*ids: str) -> tuple[RetrievedDocument, ...]:
    return tuple(RetrievedDocument(i) for i in ids)


NO_TABLE = Pricer(package_table=False)


def test_the_reranked_ranking_is_scored_not_the_retrieved_one() -> None:
    """The ranking handed to generation is the reranker's when there was one."""
    record = _record(retrieved=_docs("x", "a"), reranked=_docs("a", "x"), relevance={"a": 1}, has_retrieval=True)
    scores = score_record(record, (1,), NO_TABLE)
    assert [(s.source, s.reciprocal_rank) for s in scores.retrieval] == [("label", 1.0)]
    assert scores.unlabelled is False


def test_unlabelled_means_retrieval_without_any_labels() -> None:
    """Retrieval but no source of relevance: unlabelled; labelled or no retrieval at all: not."""
    bare = _record(retrieved=_docs("a"), has_retrieval=True)
    assert score_record(bare, (1,), NO_TABLE).unlabelled is True
    labelled = _record(retrieved=_docs("a"), relevance={"a": 1}, has_retrieval=True)
    assert score_record(labelled, (1,), NO_TABLE).unlabelled is False
    chat = _record(query="hello")
    assert score_record(chat, (1,), NO_TABLE).unlabelled is False


def test_a_probe_response_ranking_is_scored_without_retrieval_spans() -> None:
    """A probe that reads its ranking from the response is scored even when the trace shows no
    retriever; the probe's labels come back on the scores."""
    probe = ProbeLabels("p1", {"b": 1}, ranking=("a", "b"))
    scores = score_record(_record(), (1, 2), NO_TABLE, probe=probe)
    assert [(s.source, s.reciprocal_rank, s.hit) for s in scores.retrieval] == [("probe", 0.5, {1: 0.0, 2: 1.0})]
    assert scores.probe is probe
    assert scores.unlabelled is False


def test_without_a_response_ranking_the_probe_scores_the_ranking_handed_to_generation() -> None:
    """A probe with labels but no ``response_ids`` scores the trace's final (reranked) ranking."""
    record = _record(retrieved=_docs("a", "x"), reranked=_docs("x", "a"), has_retrieval=True)
    scores = score_record(record, (1, 2), NO_TABLE, probe=ProbeLabels("p1", {"a": 1}))
    assert [(s.source, s.reciprocal_rank, s.hit) for s in scores.retrieval] == [("probe", 0.5, {1: 0.0, 2: 1.0})]


def test_a_golden_set_labels_a_record_by_its_query_text() -> None:
    """Source ``golden``: the golden set's labels of the record's query, matched by normalized
    text; a query the set does not know, or no query, leaves the record unlabelled."""
    golden = Qrels(by_text={normalize_query("What is RAG?"): {"a": 1}})
    record = _record(query="  what is  RAG?", retrieved=_docs("x", "a"), has_retrieval=True)
    scores = score_record(record, (1, 2), NO_TABLE, golden=golden)
    assert [(s.source, s.reciprocal_rank, s.hit) for s in scores.retrieval] == [("golden", 0.5, {1: 0.0, 2: 1.0})]
    assert scores.unlabelled is False
    for other in (replace(record, query="what is BM25?"), replace(record, query=None)):
        unknown = score_record(other, (1, 2), NO_TABLE, golden=golden)
        assert unknown.retrieval == () and unknown.unlabelled is True


def test_a_call_without_usage_is_listed_and_the_calls_after_it_priced() -> None:
    """No tokens and no cost: ``no_usage`` (not 0 USD); a call with only input tokens (an
    embedding) or only a span cost is priced; every call is kept, in order."""
    pricer = Pricer({"emb": Price(input=2.0, output=0.0), "gen": Price(input=1.0, output=4.0)}, package_table=False)
    calls = (
        LlmCall("gen", "openai", 0, 0, "generation"),
        LlmCall("emb", None, 1000, 0, "embedding"),
        LlmCall("gen", None, 0, 0, "rerank", cost_usd=0.25),
        LlmCall("gen", None, 100, 10, "generation"),
    )
    scores = score_record(_record(llm_calls=calls), (1,), pricer)
    assert scores.calls == (
        PricedCall("gen", "generation", 0, 0, None, "no_usage"),
        PricedCall("emb", "embedding", 1000, 0, 1000 * 2.0 / 1e6, "config"),
        PricedCall("gen", "rerank", 0, 0, 0.25, "span"),
        PricedCall("gen", "generation", 100, 10, (100 * 1.0 + 10 * 4.0) / 1e6, "config"),
    )
    assert scores.cost_usd is None  # one call has no usage: no cost is guessed


def test_calls_are_priced_with_their_provider_and_cached_tokens() -> None:
    """The provider selects the table entry (``groq`` lists ``gemma-7b-it``, no provider does
    not); cached input tokens get the cache-read price, and never count above the input."""
    pricer = Pricer()
    calls = (
        LlmCall("gemma-7b-it", "groq", 1000, 100),
        LlmCall("gpt-4o-mini", "openai", 1000, 10, cached_input_tokens=400),
        LlmCall("gpt-4o-mini", "openai", 1000, 10, cached_input_tokens=5000),
    )
    scores = score_record(_record(llm_calls=calls), (1,), pricer)
    groq = pricer.price("gemma-7b-it", "groq", 1000, 100)
    assert groq.usd is not None and pricer.price("gemma-7b-it", None, 1000, 100).usd is None
    cached = pricer.price("gpt-4o-mini", "openai", 1000, 10, cached_input_tokens=400).usd
    all_cached = pricer.price("gpt-4o-mini", "openai", 1000, 10, cached_input_tokens=1000).usd
    uncached = pricer.price("gpt-4o-mini", "openai", 1000, 10).usd
    assert cached is not None and uncached is not None and cached < uncached
    assert [(c.usd, c.price_source) for c in scores.calls] == [(groq.usd, "table"), (cached, "table"), (all_cached, "table")]


def test_calls_are_priced_at_the_request_time() -> None:
    """A model whose table price changed is priced at the record's start, not today's price."""
    pricer = Pricer()
    at = int(datetime(2024, 6, 1, 12, tzinfo=UTC).timestamp()) * 10**9
    provider, model = next(
        (p.id, m.id)
        for p in bundled_providers
        for m in p.models
        if not isinstance(m.prices, ModelPrice)
        and pricer.price(m.id, p.id, 10**6, 0, at_ns=at).usd != pricer.price(m.id, p.id, 10**6, 0).usd
    )
    record = replace(_record(llm_calls=(LlmCall(model, provider, 10**6, 0),)), start_ns=at)
    [call] = score_record(record, (1,), pricer).calls
    assert call.usd == pricer.price(model, provider, 10**6, 0, at_ns=at).usd
    assert call.usd != pricer.price(model, provider, 10**6, 0).usd
