"""Generation metrics of an offline run: per-record outcomes, their means and counts.

Pure: no I/O. A record's outcome for one metric is a score, a failure (the judgement failed:
``timeout``, ``error``, ``invalid``, ``budget``, ``breaker_open``, ``dropped``) or a skip
(``not_applicable``: the record lacks the content the metric needs; ``no_score``: the verdict
defines no score, e.g. an answer without claims). A failure is never a score and never left
out of the counts.

Judged metrics are named after the judge's evaluators (``ragmon.judge.prompts.EVALUATORS``);
the offline lexical estimate made without ``--judge`` is ``faithfulness_lexical``, never
``faithfulness``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from ragmon.judge.lexical import lexical_faithfulness
from ragmon.judge.prompts import EVALUATORS
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.offline.records import EvalRecord

__all__ = [
    "ESTIMATES",
    "FAILURES",
    "GENERATION_METRICS",
    "Mode",
    "RecordOutcome",
    "MetricResults",
    "GenerationReport",
    "rag_record",
    "lexical_outcome",
    "lexical_estimates",
]

ESTIMATES: Final = ("faithfulness_lexical",)
"""Offline estimates made without a judge; named apart from the judged metrics."""
GENERATION_METRICS: Final[tuple[str, ...]] = (*EVALUATORS, *ESTIMATES)
"""Every generation metric a threshold may name."""
FAILURES: Final = ("timeout", "error", "invalid", "budget", "breaker_open", "dropped")
"""Why a judgement failed (``error``: the endpoint failed or refused the request)."""

Mode: TypeAlias = Literal["llm", "lexical"]


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """One record, one metric: exactly one of ``score``, ``failure``, ``skip`` is set; a
    failure says why in ``cause`` (the endpoint's status or error and first message, an invalid
    reply's reason, why no call went out)."""

    score: float | None = None
    failure: str | None = None
    skip: str | None = None
    cause: str = ""
    detail: Mapping[str, Any] | None = None
    """The judge's verdict behind a score (``ragmon.offline.details``); ``None`` otherwise."""


@dataclass(frozen=True, slots=True)
class MetricResults:
    """One generation metric over a run: the outcome of every record, in order."""

    key: str
    outcomes: tuple[RecordOutcome, ...]

    @property
    def scores(self) -> tuple[float | None, ...]:
        """Per record: its score, or ``None`` (failed or skipped)."""
        return tuple(o.score for o in self.outcomes)

    @property
    def failed(self) -> dict[str, int]:
        """Failure reason -> records."""
        return dict(sorted(Counter(o.failure for o in self.outcomes if o.failure is not None).items()))

    @property
    def skipped(self) -> dict[str, int]:
        """Skip reason -> records."""
        return dict(sorted(Counter(o.skip for o in self.outcomes if o.skip is not None).items()))

    @property
    def scored(self) -> int:
        """Records with a score."""
        return sum(1 for o in self.outcomes if o.score is not None)

    @property
    def failures(self) -> int:
        """Records whose judgement failed."""
        return sum(1 for o in self.outcomes if o.failure is not None)

    @property
    def skips(self) -> int:
        """Records not scored for a reason other than a failure."""
        return sum(1 for o in self.outcomes if o.skip is not None)

    @property
    def mean(self) -> float | None:
        """Mean over scored records; ``None`` when none was scored."""
        values = [o.score for o in self.outcomes if o.score is not None]
        return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class GenerationReport:
    """The generation metrics of a run: judged (``llm``) or estimated (``lexical``)."""

    mode: Mode
    metrics: tuple[MetricResults, ...]
    model: str | None = None
    """The judge model (``llm`` only)."""
    judged: int = 0
    """Records sent to the judge this run: at least one call made, whatever its outcome."""
    cached: int = 0
    """Records answered from the cache (no call)."""
    answered: int = 0
    """Records the endpoint answered (a reply, valid or not)."""
    cost_usd: float = 0.0
    unpriced_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    endpoint: str = ""
    """Where the judge was asked (credentials masked; ``llm`` only)."""

    def get(self, key: str) -> MetricResults | None:
        """The metric named ``key``, if this report has it."""
        return next((m for m in self.metrics if m.key == key), None)

    @property
    def failed_records(self) -> int:
        """Records with a failed judgement (for any metric)."""
        return sum(1 for i in range(self.records) if any(m.outcomes[i].failure is not None for m in self.metrics))

    @property
    def nothing_to_judge(self) -> int:
        """Records no evaluator applied to (no answer, no contexts…): never sent, never failed."""
        return sum(
            1 for i in range(self.records) if all(m.outcomes[i].skip == "not_applicable" for m in self.metrics)
        )

    @property
    def records(self) -> int:
        """Records the report covers."""
        return len(self.metrics[0].outcomes) if self.metrics else 0

    def cause_lines(self) -> list[str]:
        """Each cause of a failed judgement once, with its records: ``N record(s) (failure):
        endpoint: cause``."""
        where = f"{self.endpoint}: " if self.endpoint else ""
        return [f"{n} record(s) ({failure}): {where}{cause or failure}" for (failure, cause), n in self.causes().items()]

    def causes(self) -> dict[tuple[str, str], int]:
        """(failure, cause) -> records whose judgement failed so, most frequent first."""
        found: Counter[tuple[str, str]] = Counter()
        for i in range(self.records):
            failed = next((m.outcomes[i] for m in self.metrics if m.outcomes[i].failure is not None), None)
            if failed is not None and failed.failure is not None:
                found[(failed.failure, failed.cause)] += 1
        return dict(found.most_common())

    def split(self, sizes: Sequence[int]) -> list[GenerationReport]:
        """Reports for consecutive slices of the records (``compare`` judges both runs at once):
        each slice's metrics, model and endpoint; the call totals (tried, answered, cached,
        cost, tokens) are the session's and stay on this report (``ragmon.offline.session``)."""
        out: list[GenerationReport] = []
        start = 0
        for size in sizes:
            parts = tuple(MetricResults(m.key, m.outcomes[start : start + size]) for m in self.metrics)
            out.append(GenerationReport(self.mode, parts, self.model, endpoint=self.endpoint))
            start += size
        return out


def rag_record(record: EvalRecord, index: int) -> RagRecord:
    """The judge's view of an offline record: query, answer, reference answer, and the contexts
    as documents in rank order (named by the record's retrieved ids when they line up, else by
    position). ``index`` becomes the trace id, so results can be matched back.

    A record without ``contexts`` has documents whose content is unknown (``None``), as a trace
    without captured content has: evaluators that read the documents do not apply to it, where
    an empty list (``"contexts": []``) means the generator was given nothing."""
    if record.contexts is None:
        docs = tuple(RetrievedDocument(doc_id) for doc_id in record.retrieved or [""])
    else:
        contexts = record.contexts
        retrieved = record.retrieved
        ids = retrieved if retrieved is not None and len(retrieved) == len(contexts) else [str(i) for i in range(len(contexts))]
        docs = tuple(RetrievedDocument(doc_id, None, text) for doc_id, text in zip(ids, contexts))
    return RagRecord(
        trace_id=index.to_bytes(16, "big"), service="offline", variant="", start_ns=0, end_ns=0,
        query=record.query, retrieved=docs, answer=record.answer,
        reference_answer=record.reference_answer, has_retrieval=True,
    )


_NOT_APPLICABLE: Final = RecordOutcome(skip="not_applicable")
_NO_SCORE: Final = RecordOutcome(skip="no_score")
"""The skips, one shared value each (a run of a million records holds a million outcomes)."""


def lexical_outcome(record: EvalRecord) -> RecordOutcome:
    """The lexical faithfulness estimate of one record (needs an answer and its contexts)."""
    if not record.answer or not record.contexts:
        return _NOT_APPLICABLE
    score = lexical_faithfulness(record.answer, record.contexts)
    return _NO_SCORE if score is None else RecordOutcome(score=score)


def lexical_estimates(records: Sequence[EvalRecord]) -> GenerationReport:
    """The estimates made without a judge (``faithfulness_lexical``), labelled ``lexical``."""
    return GenerationReport("lexical", (MetricResults("faithfulness_lexical", tuple(map(lexical_outcome, records))),))
