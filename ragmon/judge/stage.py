"""The judge stage of ``ragmon run``: every scored record passes here after the metrics.

- ``gen_ai.evaluation.result`` events the app put in its trace are exported as they are
  (source ``app``, judge ``app``) when their name is one of ragmon's generation scores;
- with a judge endpoint, the record is offered to the sampled LLM judge (``Judge.submit``
  never waits); its scores arrive later as source ``judge``, judge ``llm``, and its
  per-document relevance verdicts become the ``judge`` relevance source (hit rate, MRR and
  precision@k);
- only the first ``judge.max_documents`` documents of a context are sent: the rest are
  unjudged, never "not relevant". Context relevance is the share of the documents judged; the
  ``judge`` relevance source scores the ranking of the documents judged, and for a cut context
  only when every ``scoring.k`` fits in it (then hit rate and precision@k are exact, and the
  reciprocal rank is 0 when no judged document is relevant, as MRR cut at that depth);
  otherwise the trace gives no ``judge`` relevance score. The documents left out are counted
  (``ragmon_judge_documents_left_out_total``);
- with no endpoint, the sampled share of records gets the offline lexical faithfulness
  estimate (source ``judge``, judge ``lexical``), so generation panels are never empty, at most
  ``judge.lexical_max_per_second`` over the last second (its cost grows with the text; the
  records past it are counted, ``ragmon_judge_lexical_skipped_total``); no other score is
  invented (``notes`` says which need an LLM judge);
- a toxicity verdict also counts the answer once per toxic category
  (``ragmon_toxic_answers_total``);
- the prober's records are always judged (SPEC §7): they skip the sample rate and the
  per-minute cap, not the USD budget;
- with ``[judge] export_endpoint``, judge and lexical scores are sent onward as OTLP spans
  carrying ``gen_ai.evaluation.result`` events.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Protocol

from prometheus_client.metrics_core import Metric

from ragmon.config import JudgeConfig
from ragmon import catalogue as cat
from ragmon.judge.breaker import BreakerState
from ragmon.judge.endpoint import endpoint_from_config
from ragmon.judge.lexical import lexical_faithfulness
from ragmon.judge.onward import EvaluationResult, EvaluationSender
from ragmon.judge.prompts import EVALUATORS, TOXICITY_CATEGORIES
from ragmon.judge.runner import OUTCOMES, CompletionClient, Judge, Judgement
from ragmon.judge.sampling import BucketedWindow, sampler
from ragmon.model import RagRecord, Worker
from ragmon.scoring.pricing import Pricer
from ragmon.scoring.records import RecordScores, RetrievalScore, final_ranking, score_judged_retrieval

__all__ = ["APP_EVALUATION_NAMES", "JudgeStage", "JudgementSink"]

APP_EVALUATION_NAMES: Final[Mapping[str, str]] = {
    "faithfulness": "faithfulness",
    "groundedness": "faithfulness",
    "answer_relevance": "answer_relevance",
    "answer_relevancy": "answer_relevance",
    "relevance": "answer_relevance",
    "context_relevance": "context_relevance",
    "context_relevancy": "context_relevance",
    "answer_correctness": "answer_correctness",
    "correctness": "answer_correctness",
    "coherence": "coherence",
    "toxicity": "toxicity",
}
"""``gen_ai.evaluation.name`` values (case-insensitive) read as ragmon's generation scores."""


class JudgementSink(Protocol):
    """Where the judge stage hands each judgement: the exporter's ``RagMetrics``, the status
    page's worst requests."""

    def observe_judged(
        self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float],
        retrieval: RetrievalScore | None, now: float, toxic: Mapping[str, bool] | None = None,
    ) -> None:
        """One judgement: generation ``scores`` by name, the judged ``retrieval``, the toxicity
        verdict per category; ``source`` is ``app`` or ``judge``; must not wait."""


class JudgeStage(Worker):
    """App evaluations, the LLM judge or the lexical estimate, and the onward sender."""

    def __init__(
        self,
        config: JudgeConfig,
        sinks: Sequence[JudgementSink],
        ks: Sequence[int],
        pricer: Pricer,
        clock: Callable[[], float],
        environ: Mapping[str, str],
        *,
        client: CompletionClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._in_sample = sampler(config.sample_rate)
        self._sinks = tuple(sinks)
        self._ks = tuple(ks)
        self._clock = clock
        self._rng = rng or random.Random()
        endpoint = endpoint_from_config(config, environ)
        if client is None and endpoint is not None:
            from ragmon.judge.client import JudgeClient  # the openai client: only with an endpoint

            client = JudgeClient(endpoint, config.model, config.timeout)
        self.judge: Judge | None = (
            Judge(config, client, pricer, clock, self._on_judgement, self._rng) if client is not None else None
        )
        self.sender = EvaluationSender(config.export_endpoint, rng=self._rng) if config.export_endpoint else None
        self.stop_timeout = 5.0
        """Seconds the judge and the sender get together on exit (``stop``)."""
        self._lexical = 0
        self._lexical_skipped = 0
        self._estimates = BucketedWindow(1.0, 10)
        """Lexical estimates made over the last second (``judge.lexical_max_per_second``)."""
        self._app = 0

    @property
    def mode(self) -> str:
        """``llm`` with an endpoint, else ``lexical``."""
        return "llm" if self.judge is not None else "lexical"

    def describe(self) -> str:
        """The judge's mode and why, for the start-up log line."""
        if self.judge is not None:
            return (f"llm (model {self._config.model}, on a {self._config.sample_rate:.0%} sample of requests: "
                    f"judge.sample_rate {self._config.sample_rate:g})")
        estimate = self._estimate_line()
        if self._config.enabled is False:
            return f"lexical (judge.enabled = false): {estimate}"
        return f"lexical (no endpoint: set [judge] base_url or {self._config.api_key_env}): {estimate}"

    def _estimate_line(self) -> str:
        """Which requests the lexical estimate reads: a sample, at ``judge.sample_rate``."""
        if not self._config.send_documents:
            return "no lexical estimate (judge.send_documents = false)"
        return f"faithfulness estimated on {self._sample()}"

    def _sample(self) -> str:
        """The requests the judge (or the lexical estimate) reads."""
        rate = self._config.sample_rate
        return f"a {rate:.0%} sample of requests (judge.sample_rate {rate:g}) and every probe's"

    def notes(self) -> list[str]:
        """For the status page: which share of requests the judged scores read, and why configured
        generation scores are absent."""
        cfg = self._config
        rate = self._sample()
        if self.judge is not None:
            out = [f'judged scores (judge="llm") read {rate}.']
            off = [e for e in ("faithfulness", "context_relevance") if e in cfg.evaluators]
            if off and not cfg.send_documents:
                out.append(f"{', '.join(off)}: off, judge.send_documents = false.")
            return out
        out = []
        lexical = [e for e in EVALUATORS if e in cfg.evaluators and e != "faithfulness"]
        if lexical:
            why = (
                "the judge is off (judge.enabled = false)" if cfg.enabled is False
                else f"need an LLM judge ([judge] base_url or {cfg.api_key_env})"
            )
            estimate = "; faithfulness is the offline lexical estimate (judge=\"lexical\")" if cfg.send_documents else ""
            out.append(f"{', '.join(lexical)}: {why}{estimate}.")
        if cfg.send_documents:
            out.append(f'faithfulness (judge="lexical") is an estimate on {rate}: {self._lexical} estimated so far.')
        return out

    async def start(self) -> None:
        """Start the judge's workers and the sender."""
        if self.judge is not None:
            await self.judge.start()
        if self.sender is not None:
            await self.sender.start()

    async def stop(self, timeout: float) -> None:
        """Let in-flight judgements finish, then flush the sender, within ``timeout`` seconds in
        all (plus closing connections) however the endpoints behave; what the sender could not
        send by then is counted (``failed`` / ``dropped``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        if self.judge is not None:
            await self.judge.stop(timeout)
        if self.sender is not None:
            await self.sender.stop(max(deadline - loop.time(), 0.0))

    def consume(self, record: RagRecord, scores: RecordScores, now: float) -> None:
        """A scored record (a ``RecordConsumer``): ``observe``; a probe's is judged as the
        probe sent it (its reference answer and labels applied)."""
        probe = scores.probe
        self.observe(record if probe is None else probe.apply(record), now, probe is not None)

    def _judged(
        self, record: RagRecord, source: str, judge: str, scores: Mapping[str, float],
        retrieval: RetrievalScore | None, now: float, toxic: Mapping[str, bool] | None = None,
    ) -> None:
        for sink in self._sinks:
            sink.observe_judged(record, source, judge, scores, retrieval, now, toxic)

    def observe(self, record: RagRecord, now: float, probe: bool = False) -> None:
        """Everything the judge stage does for one scored record (never waits). A ``probe``
        record is always judged (SPEC §7): no sample rate or per-minute cap, still the USD budget."""
        app: dict[str, float] = {}
        for evaluation in record.evaluations:
            name = APP_EVALUATION_NAMES.get(evaluation.name.strip().lower())
            score = evaluation.score
            if name is not None and score is not None and 0.0 <= score <= 1.0:
                app[name] = score
        if app:
            self._app += 1
            self._judged(record, "app", "app", app, None, now)
        if self.judge is not None:
            self.judge.submit(record, now, probe)
            return
        if not (probe or self._in_sample(record.trace_id)) or not self._config.send_documents:
            return
        docs = record.reranked if record.reranked is not None else record.retrieved
        if not docs or any(d.content is None for d in docs):
            return
        if not probe:
            if self._estimates.total(now) >= self._config.lexical_max_per_second:
                self._lexical_skipped += 1  # its cost grows with the text: bounded per second
                return
            self._estimates.add(1.0, now)
        score = lexical_faithfulness(record.answer, (d.content for d in docs))
        if score is not None:
            self._lexical += 1
            self._judged(record, "judge", "lexical", {"faithfulness": score}, None, now)
            self._send(record, {"faithfulness": score}, "lexical")

    def _on_judgement(self, record: RagRecord, judgement: Judgement) -> None:
        scores = judgement.scores
        if judgement.outcome != "ok" or scores is None:
            return
        values = {
            name: value
            for name in cat.SCORE_HISTOGRAMS
            if (value := getattr(scores, name)) is not None
        }
        retrieval = None
        if scores.relevant_document_ids is not None and record.has_retrieval:
            judged = final_ranking(record)  # the record as queued: its documents are those judged
            if not scores.documents_left_out or max(self._ks) <= len(judged):
                retrieval = score_judged_retrieval(judged, scores.relevant_document_ids, self._ks)
        toxic = (
            None if scores.toxic_categories is None
            else {c: c in scores.toxic_categories for c in TOXICITY_CATEGORIES}
        )
        if values or retrieval is not None:
            self._judged(record, "judge", "llm", values, retrieval, self._clock(), toxic)
        if values:
            self._send(record, values, "llm")

    def _send(self, record: RagRecord, scores: Mapping[str, float], judge: str) -> None:
        if self.sender is None:
            return
        self.sender.offer(
            EvaluationResult(
                trace_id=record.trace_id,
                parent_span_id=record.root_span_id,
                span_id=(self._rng.getrandbits(64) or 1).to_bytes(8, "big"),
                time_ns=record.end_ns,
                scores=dict(scores),
                judge=judge,
            )
        )

    def collect(self) -> Iterable[Metric]:
        """The judge's own series (SPEC §6 self-metrics)."""
        requests = cat.JUDGE_REQUESTS.empty()
        cost = cat.JUDGE_COST_USD.empty()
        unpriced = cat.JUDGE_UNPRICED_TOKENS.empty()
        estimated = cat.JUDGE_USAGE_ESTIMATED.empty()
        cache = cat.JUDGE_CACHE_HITS.empty()
        left_out = cat.JUDGE_DOCUMENTS_LEFT_OUT.empty()
        queue = cat.JUDGE_QUEUE.empty()
        queue_bytes = cat.JUDGE_QUEUE_BYTES.empty()
        in_flight = cat.JUDGE_IN_FLIGHT.empty()
        breaker = cat.JUDGE_BREAKER_OPEN.empty()
        mode = cat.JUDGE_INFO.empty()
        lexical = cat.JUDGE_LEXICAL.empty()
        lexical_skipped = cat.JUDGE_LEXICAL_SKIPPED.empty()
        app = cat.APP_EVALUATIONS.empty()
        mode.add_metric([self.mode], 1)
        lexical.add_metric([], self._lexical)
        lexical_skipped.add_metric([], self._lexical_skipped)
        app.add_metric([], self._app)
        if self.judge is not None:
            stats = self.judge.stats()
            for evaluator in EVALUATORS:
                if evaluator in self._config.evaluators:
                    for outcome in OUTCOMES:
                        requests.add_metric([evaluator, outcome], stats.counts.get((evaluator, outcome), 0))
            cost.add_metric([], stats.cost_usd)
            unpriced.add_metric([], stats.unpriced_tokens)
            estimated.add_metric([], stats.usage_estimated)
            cache.add_metric([], stats.cache_hits)
            left_out.add_metric([], stats.documents_left_out)
            queue.add_metric([], stats.queue_depth)
            queue_bytes.add_metric([], stats.queue_bytes)
            in_flight.add_metric([], stats.in_flight)
            breaker.add_metric([], 1 if stats.breaker is BreakerState.OPEN else 0)
        families: list[Metric] = [
            requests, cost, unpriced, estimated, cache, left_out, queue, queue_bytes, in_flight, breaker, mode,
            lexical, lexical_skipped, app,
        ]
        if self.sender is not None:
            sent = self.sender.stats()
            exported = cat.EVALUATIONS_EXPORTED.empty()
            for result, n in (("sent", sent.sent), ("dropped", sent.dropped), ("failed", sent.failed)):
                exported.add_metric([result], n)
            families.append(exported)
        return families
