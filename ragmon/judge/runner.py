"""The judge at run time (SPEC §7): admission, a bounded queue, workers, breaker, cache.

``submit`` is synchronous and never waits: it picks the applicable evaluators, applies the
trace-id sample, refuses at once while the circuit breaker is open (before any copying,
hashing or queueing, so a down endpoint costs ingest next to nothing), cuts the record to what
a request can carry (``prompts.trim_record``: at most ``max_documents`` documents, every text
sliced; nothing walks a character), answers from the cache, applies the per-minute cap and the
USD budget, and queues the cut record (or drops it when the queue is full in records or in
bytes, ``max_queue`` / ``max_queue_bytes``; an empty queue takes one record whatever its size).
``concurrency`` worker tasks take records off the queue and judge them: a worker asks the
breaker again, redacts the record and builds the prompt in a thread (``asyncio.to_thread``,
never on the event loop), estimates the call's cost from the prompt's own size and
``max_tokens`` at the configured model's price and reserves it against the USD budget (refused:
``skipped_budget``, no call), then makes one request per trace covering all its evaluators,
with a fresh nonce, a timeout per attempt, and up to ``max_retries`` retries of retryable
failures and timeouts after full-jitter backoff. The reservation is replaced by the real cost
once the call ends, so spend passes the budget by at most what the calls in flight cost beyond
their estimates. The judge's own tokens are always priced as ``judge.model`` (a reply naming
another model does not choose the price); a reply without usage has its tokens estimated from
the prompt and its own text (``prompts.estimate_tokens``), priced and counted
(``stats().usage_estimated``).

Outcomes, counted per evaluator of the request (``stats().counts``):

- ``ok``: parsed and scored; ``skipped_rate`` / ``skipped_budget``: not admitted (at submit, or
  the budget right before the call);
- ``dropped``: the queue was full, or the record was still queued (or in flight and cut off)
  at ``stop``;
- ``timeout``: the last attempt timed out; ``error``: the endpoint failed (status,
  connection, an unusable or oversized HTTP reply), refused the request, or the circuit
  breaker was open so no call was made (at ``submit``, or when a worker takes the record);
- ``invalid``: the reply was not a verdict of the requested shape (never a score), or was cut
  at ``max_tokens`` (finish reason ``length``).

Cache hits are counted apart (``stats().cache_hits``), not as ``ok``. ``on_result`` is called
for every record a worker finished, whatever the outcome (``Judgement.scores`` is set only for
``ok``), and for cache hits (``cached=True``, no tokens), always with the record as cut (trace
and root span ids, service, variant, times and the ids of the documents sent are kept; the
documents past ``max_documents`` are not: ``JudgeScores.documents_left_out`` counts them); an
exception in it is logged.

The breaker hears of endpoint health only: failed and timed-out attempts are failures; any
reply, valid or not, is a success, and so is a refusal of this one request (400, 413, 422:
e.g. a context too long), so content under evaluation cannot open it. Its thresholds and
cool-down come from ``[judge] breaker_*``.

Logs never carry content under evaluation, the judge's reply, or its error bodies: failures
are logged by kind and status, and a bug by exception type and traceback frames only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import secrets
import sys
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Final, Literal, NamedTuple, Protocol, TypeAlias, cast

from ragmon.config import JudgeConfig
from ragmon.judge.breaker import BreakerState, CircuitBreaker, backoff_delays
from ragmon.errors import JudgeCallError, JudgeRetryableError, JudgeTimeoutError
from ragmon.judge.endpoint import Completion
from ragmon.judge.evaluators import Invalid, JudgeScores, Verdicts, parse_verdict, score_verdicts
from ragmon.judge.prompts import (
    EVALUATORS,
    Evaluator,
    JudgeRequest,
    Trimmed,
    applicable_evaluators,
    build_judge_request,
    estimate_tokens,
    trim_record,
)
from ragmon.judge.redact import Redactor
from ragmon.judge.sampling import Decision, JudgeAdmission
from ragmon.model import RagRecord, Worker
from ragmon.scoring.pricing import Pricer

__all__ = [
    "OUTCOMES",
    "CompletionClient",
    "Judge",
    "JudgeStats",
    "Judgement",
    "Outcome",
    "SubmitResult",
]

_log = logging.getLogger(__name__)

Outcome: TypeAlias = Literal["ok", "error", "timeout", "invalid", "skipped_rate", "skipped_budget", "dropped"]
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "ok", "error", "timeout", "invalid", "skipped_rate", "skipped_budget", "dropped",
)


class SubmitResult(StrEnum):
    """What ``Judge.submit`` did with a record (as the OTel SDK's export results)."""

    NOT_APPLICABLE = "not_applicable"
    """No configured evaluator applies to the record."""
    SKIPPED_RATE = "skipped_rate"
    SKIPPED_BUDGET = "skipped_budget"
    BREAKER_OPEN = "breaker_open"
    CACHED = "cached"
    DROPPED = "dropped"
    QUEUED = "queued"


_DOCUMENT_EVALUATORS: Final = frozenset({"faithfulness", "context_relevance"})
_REQUEST_REFUSED: Final = frozenset({400, 413, 422})
"""Statuses that refuse one request (its size or shape), not a sign the endpoint is down."""


class CompletionClient(Protocol):
    """What the judge needs of an endpoint client (``JudgeClient`` is one)."""

    async def complete(self, request: JudgeRequest) -> Completion:
        """One call; raises ``JudgeCallError`` subclasses."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, slots=True)
class Judgement:
    """The result of judging one record; ``scores`` only when ``outcome`` is ``ok``.

    Tokens and ``cost_usd`` are the judge's own, as charged (estimated when the reply reported
    none; 0 for a cache hit; ``cost_usd`` ``None`` when the judge model is unpriced). ``model``
    is the one the reply named (the price is always ``judge.model``'s).
    """

    evaluators: tuple[Evaluator, ...]
    outcome: Outcome
    scores: JudgeScores | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    model: str
    cached: bool = False
    cause: str = ""
    """Why a judgement failed, for a report (never logged by the sidecar): the last attempt's
    kind, status and the endpoint's first message; an invalid reply's reason; why no call went
    out. Empty for ``ok``."""
    calls: int = 0
    """Calls made for it (attempts that reached the client); 0 when none went out."""
    verdicts: Verdicts | None = None
    """The parsed verdicts behind ``scores``, kept only for a judge made with ``verdicts=True``
    (``ragmon eval``'s per-record details; the sidecar keeps scores only)."""


class _Called(NamedTuple):
    """What ``Judge._call`` ends with: the completion (or ``None``), the outcome of the last
    failed attempt, why, and how many attempts were made."""

    completion: Completion | None
    outcome: Literal["error", "timeout"]
    cause: str
    calls: int


_BREAKER_OPEN: Final = "not sent: the circuit breaker is open after repeated failures"


@dataclass(frozen=True, slots=True)
class JudgeStats:
    """A snapshot of the judge's counters and state."""

    counts: Mapping[tuple[str, str], int]
    """(evaluator, outcome) -> records."""
    cost_usd: float
    unpriced_tokens: int
    queue_depth: int
    in_flight: int
    breaker: BreakerState
    cache_hits: int
    cache_size: int
    queue_bytes: int = 0
    """Bytes the queued records hold (``max_queue_bytes`` bounds it)."""
    usage_estimated: int = 0
    """Replies without a usable token count: their tokens were estimated, priced and charged."""
    documents_left_out: int = 0
    """Documents past ``max_documents`` of the traces whose prompt was built: never judged."""


@dataclass(slots=True)
class _Item:
    """A queued record: the record as cut (never the original), what to ask, the cache key."""

    record: RagRecord
    evaluators: tuple[Evaluator, ...]
    key: str
    documents_left_out: int
    truncated: frozenset[str]
    size: int = 0
    """Bytes held (``_held_bytes``), set once made."""


_QUEUE_SLOT: Final = 8
"""A pointer in the queue's deque, per item."""


def _held_bytes(item: _Item) -> int:
    """Every byte ``item`` keeps alive: the objects it holds and each string, bytes and number
    in them at its object size (``sys.getsizeof``); shared constants (the evaluator names,
    empty defaults) are not counted, strings that may be shared (service, variant) are."""
    record = item.record
    docs = record.reranked if record.reranked is not None else record.retrieved
    size = _QUEUE_SLOT + sys.getsizeof(item) + sys.getsizeof(item.key) + sys.getsizeof(item.evaluators)
    size += sys.getsizeof(item.truncated) + sum(sys.getsizeof(name) for name in item.truncated)
    size += sys.getsizeof(record) + sys.getsizeof(record.stage_seconds)
    size += sum(sys.getsizeof(value) for value in (
        record.trace_id, record.root_span_id, record.service, record.variant, record.start_ns, record.end_ns,
        record.query, record.answer, record.reference_answer,
    ) if value is not None)
    size += sys.getsizeof(record.retrieved) + (0 if record.reranked is None else sys.getsizeof(record.reranked))
    for doc in docs:
        size += sys.getsizeof(doc) + sys.getsizeof(doc.id)
        size += 0 if doc.content is None else sys.getsizeof(doc.content)
        size += 0 if doc.score is None else sys.getsizeof(doc.score)
    return size


def _cache_key(trimmed: Trimmed, evaluators: tuple[Evaluator, ...]) -> str:
    """sha256 over the evaluators and what the request is built from: the record as cut (query,
    answer, reference answer, (id, content) of each document sent), the documents left out and
    the texts cut. Taken before redaction, which is deterministic: equal inputs share a key."""
    record = trimmed.record
    docs = record.reranked if record.reranked is not None else record.retrieved
    payload = [
        list(evaluators), record.query, record.answer, record.reference_answer,
        [[d.id, d.content] for d in docs], trimmed.documents_left_out, sorted(trimmed.truncated),
    ]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


class Judge(Worker):
    """Runs the LLM judge; see the module docstring. ``start`` before use, ``stop`` at the end
    (or ``async with judge:``, which stops within ``stop_timeout``).

    ``clock`` is monotonic seconds (breaker, budget windows); ``rng`` drives backoff jitter.
    ``breaker``, ``backoff_base`` and ``backoff_cap`` (seconds) may be given for tuning/tests.
    """

    def __init__(
        self,
        config: JudgeConfig,
        client: CompletionClient,
        pricer: Pricer,
        clock: Callable[[], float],
        on_result: Callable[[RagRecord, Judgement], None],
        rng: random.Random | None = None,
        *,
        breaker: CircuitBreaker | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 10.0,
        stop_timeout: float = 5.0,
        verdicts: bool = False,
    ) -> None:
        self._keep_verdicts = verdicts
        self._evaluators = tuple(
            e for e in _evaluators_from_config(config.evaluators)
            if config.send_documents or e not in _DOCUMENT_EVALUATORS
        )
        self._config = config
        self._client = client
        self._pricer = pricer
        self._clock = clock
        self._on_result = on_result
        self._rng = rng or random.Random()
        self._timeout = config.timeout
        self._admission = JudgeAdmission.from_config(config)
        self._breaker = breaker or CircuitBreaker(
            failure_threshold=config.breaker_failures, failure_ratio=config.breaker_failure_ratio,
            min_calls=config.breaker_min_calls, window=config.breaker_window,
            cooldown=config.breaker_cooldown, max_cooldown=config.breaker_max_cooldown,
        )
        self._backoff = (backoff_base, backoff_cap)
        self._redactor = Redactor.from_patterns(config.redact, config.send_documents)
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(config.max_queue)
        self._queue_bytes = 0
        self._cache: OrderedDict[str, Judgement] = OrderedDict()
        self._counts: dict[tuple[str, str], int] = {}
        self._cost = 0.0
        self._unpriced_tokens = 0
        self._usage_estimated = 0
        self._documents_left_out = 0
        self._cache_hits = 0
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._workers: list[asyncio.Task[None]] = []
        self._closed = False
        self.stop_timeout = stop_timeout
        """Seconds calls in flight get to finish on exit (``stop``)."""

    @property
    def evaluators(self) -> tuple[Evaluator, ...]:
        """The evaluators this judge runs (``[judge] evaluators``, less the document ones when
        ``send_documents`` is off), in canonical order."""
        return self._evaluators

    # -- submission (synchronous) ------------------------------------------------------------

    def submit(self, record: RagRecord, now: float, probe: bool = False) -> SubmitResult:
        """Offer one record; never blocks. Returns what happened to it (see the module doc).

        ``now`` is read on the same clock as ``clock``. ``breaker_open`` is counted as outcome
        ``error`` (no call was made: the judgement failed) and costs no copy, hashing, cache
        lookup, budget or queue slot.
        """
        evaluators = applicable_evaluators(record, self._evaluators)
        if not evaluators:
            return SubmitResult.NOT_APPLICABLE
        if not probe and not self._admission.in_sample(record.trace_id):
            self._count(evaluators, "skipped_rate")
            return SubmitResult.SKIPPED_RATE
        if self._closed:
            self._count(evaluators, "dropped")
            return SubmitResult.DROPPED
        if self._breaker.refusing(now):
            self._count(evaluators, "error")
            return SubmitResult.BREAKER_OPEN
        config = self._config
        trimmed = trim_record(record, config.max_documents, send_documents=config.send_documents)
        key = _cache_key(trimmed, evaluators)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self._cache_hits += 1
            self._deliver(trimmed.record, hit)
            return SubmitResult.CACHED
        decision = self._admission.decide(record.trace_id, now, probe)
        if decision is not Decision.ADMIT:
            outcome = cast(Outcome, decision.value)
            self._count(evaluators, outcome)
            return SubmitResult(outcome)
        item = _Item(trimmed.record, evaluators, key, trimmed.documents_left_out, trimmed.truncated)
        item.size = _held_bytes(item)
        if self._queue.qsize() and self._queue_bytes + item.size > config.max_queue_bytes:
            self._count(evaluators, "dropped")
            return SubmitResult.DROPPED
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self._count(evaluators, "dropped")
            return SubmitResult.DROPPED
        self._queue_bytes += item.size
        return SubmitResult.QUEUED

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the ``concurrency`` workers (once; not after ``stop``)."""
        if not self._workers and not self._closed:
            self._workers = [
                asyncio.create_task(self._work(), name=f"ragmon-judge-{i}") for i in range(self._config.concurrency)
            ]

    async def join(self) -> None:
        """Wait until every record queued so far has been judged (batch runs, tests)."""
        await self._queue.join()

    async def stop(self, timeout: float) -> None:
        """Stop accepting, drop what is queued, let calls in flight finish for up to ``timeout``
        seconds, then cancel them (counted ``dropped``) and close the client."""
        if self._closed:
            return
        self._closed = True
        while not self._queue.empty():
            item = self._queue.get_nowait()
            self._queue_bytes -= item.size
            self._queue.task_done()
            self._count(item.evaluators, "dropped")
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._idle.wait()
        except TimeoutError:
            _log.warning("judge stop: cancelling %d call(s) in flight", self._in_flight)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        await self._client.aclose()

    # -- state ---------------------------------------------------------------------------------

    def stats(self) -> JudgeStats:
        """An immutable snapshot of counters and state."""
        return JudgeStats(
            counts=MappingProxyType(dict(self._counts)),
            cost_usd=self._cost,
            unpriced_tokens=self._unpriced_tokens,
            queue_depth=self._queue.qsize(),
            in_flight=self._in_flight,
            breaker=self._breaker.state,
            cache_hits=self._cache_hits,
            cache_size=len(self._cache),
            queue_bytes=self._queue_bytes,
            usage_estimated=self._usage_estimated,
            documents_left_out=self._documents_left_out,
        )

    # -- workers -------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            self._queue_bytes -= item.size
            self._in_flight += 1
            self._idle.clear()
            try:
                judgement = await self._judge(item)
            except asyncio.CancelledError:
                self._count(item.evaluators, "dropped")
                raise
            except Exception as exc:  # a bug must not kill the worker
                _log_bug("judge worker failed on one record", exc)
                judgement = self._failed(item, "error", f"a bug in ragmon ({type(exc).__name__}; logged)")
            finally:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.set()
                self._queue.task_done()
            self._count(item.evaluators, judgement.outcome)
            if judgement.outcome == "ok":
                self._remember(item.key, judgement)
            self._deliver(item.record, judgement)

    async def _judge(self, item: _Item) -> Judgement:
        if self._breaker.refusing(self._clock()):  # opened while the record waited: no prompt built
            return self._failed(item, "error", _BREAKER_OPEN)
        request = await asyncio.to_thread(self._request, item)  # redaction and prompt: off the loop
        if request is None:  # redaction left nothing to judge
            _log.info("judge request not sent: nothing left to judge once redacted")
            return self._failed(item, "error", "not sent: nothing left to judge once redacted")
        estimate = self._estimate(request)
        if estimate is not None and not self._admission.reserve(estimate, self._clock()):
            return self._failed(item, "skipped_budget", "not sent: the call would pass judge.max_usd_per_hour")
        self._documents_left_out += item.documents_left_out
        cost: float | None = None
        try:
            called = await self._call(request)
            completion = called.completion
            if completion is None:
                return self._failed(item, called.outcome, called.cause, called.calls)
            input_tokens, output_tokens, cost = self._charge(completion, request)
        finally:
            if estimate is not None:
                self._admission.settle(estimate, cost, self._clock())
            elif cost is not None:
                self._admission.record_cost(cost, self._clock())
        verdicts: Verdicts | Invalid
        if completion.finish_reason == "length":
            verdicts = Invalid(f"reply cut at max_tokens ({request.max_tokens})")
        else:
            verdicts = parse_verdict(completion.text, request)
        if isinstance(verdicts, Invalid):
            _log.info("judge reply invalid: %s", verdicts.reason)
        return Judgement(
            evaluators=request.evaluators,
            outcome="invalid" if isinstance(verdicts, Invalid) else "ok",
            scores=None if isinstance(verdicts, Invalid) else score_verdicts(verdicts, request),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
            model=completion.model,
            cause=f"invalid reply: {verdicts.reason}" if isinstance(verdicts, Invalid) else "",
            calls=called.calls,
            verdicts=verdicts if self._keep_verdicts and isinstance(verdicts, Verdicts) else None,
        )

    def _request(self, item: _Item) -> JudgeRequest | None:
        """Redact the record as cut and build its request (run in a worker thread)."""
        redacted = self._redactor.redact_record(item.record)
        return build_judge_request(
            redacted, item.evaluators, secrets.token_hex(8),
            documents_left_out=item.documents_left_out, truncated=item.truncated,
        )

    def _price(self, input_tokens: int, output_tokens: int) -> float | None:
        """USD for these tokens at ``judge.model``'s price; ``None`` when it has no usable price."""
        usd = self._pricer.price(self._config.model, None, input_tokens, output_tokens).usd
        return usd if usd is not None and math.isfinite(usd) and usd >= 0 else None

    def _estimate(self, request: JudgeRequest) -> float | None:
        """The most ``request`` may cost: its prompt's estimated tokens and ``max_tokens`` out."""
        return self._price(request.input_tokens_estimate, request.max_tokens)

    async def _call(self, request: JudgeRequest) -> _Called:
        """The completion, or the outcome and cause of the last failed attempt; attempts made."""
        base, cap = self._backoff
        delays = backoff_delays(self._config.max_retries, base, cap, self._rng)
        outcome: Literal["error", "timeout"] = "error"
        cause = _BREAKER_OPEN
        calls = 0
        for attempt in range(self._config.max_retries + 1):
            if not self._breaker.allow(self._clock()):
                return _Called(None, outcome, cause if calls else _BREAKER_OPEN, calls)
            calls += 1
            try:
                async with asyncio.timeout(self._timeout):
                    completion = await self._client.complete(request)
            except (TimeoutError, JudgeTimeoutError):
                self._breaker.failure(self._clock())
                outcome, cause = "timeout", f"no answer within judge.timeout ({self._timeout:g}s)"
            except JudgeRetryableError as exc:
                self._breaker.failure(self._clock())
                outcome, cause = "error", _cause(exc)
                _log.debug("judge call failed (retryable): %s", exc)
                if exc.retry_after is not None and attempt < len(delays):
                    delays[attempt] = max(delays[attempt], min(exc.retry_after, cap))
            except JudgeCallError as exc:
                if exc.status in _REQUEST_REFUSED:
                    self._breaker.success(self._clock())  # the endpoint answered; this request was refused
                else:
                    self._breaker.failure(self._clock())
                _log.warning("judge call failed: %s", exc)
                return _Called(None, "error", _cause(exc), calls)
            else:
                self._breaker.success(self._clock())
                return _Called(completion, outcome, "", calls)
            if attempt < len(delays):
                await asyncio.sleep(delays[attempt])
        return _Called(None, outcome, cause, calls)

    def _charge(self, completion: Completion, request: JudgeRequest) -> tuple[int, int, float | None]:
        """The reply's tokens (estimated where it reported none: a prompt is never 0 tokens, nor
        a non-empty reply) and their price as ``judge.model``, added to the totals."""
        input_tokens, output_tokens = completion.input_tokens, completion.output_tokens
        estimated = False
        if not input_tokens:
            input_tokens, estimated = request.input_tokens_estimate, True
        if output_tokens is None or (output_tokens == 0 and completion.text):
            output_tokens, estimated = estimate_tokens(completion.text), True
        if estimated:
            self._usage_estimated += 1
        usd = self._price(input_tokens, output_tokens)
        if usd is None:
            self._unpriced_tokens += input_tokens + output_tokens
        else:
            self._cost += usd
        return input_tokens, output_tokens, usd

    # -- helpers -------------------------------------------------------------------------------

    def _failed(self, item: _Item, outcome: Outcome, cause: str = "", calls: int = 0) -> Judgement:
        return Judgement(item.evaluators, outcome, None, 0, 0, None, self._config.model, cause=cause, calls=calls)

    def _count(self, evaluators: tuple[Evaluator, ...], outcome: Outcome) -> None:
        for evaluator in evaluators:
            self._counts[(evaluator, outcome)] = self._counts.get((evaluator, outcome), 0) + 1

    def _remember(self, key: str, judgement: Judgement) -> None:
        if self._config.cache_size <= 0:
            return
        self._cache[key] = replace(judgement, cached=True, input_tokens=0, output_tokens=0, cost_usd=0.0)
        self._cache.move_to_end(key)
        while len(self._cache) > self._config.cache_size:
            self._cache.popitem(last=False)

    def _deliver(self, record: RagRecord, judgement: Judgement) -> None:
        try:
            self._on_result(record, judgement)
        except Exception as exc:
            _log_bug("judge on_result callback failed", exc)


def _cause(exc: JudgeCallError) -> str:
    """A failed call's cause for a report: its kind and status, then the first message."""
    return f"{exc}: {exc.detail}" if exc.detail else str(exc)


def _log_bug(what: str, exc: BaseException) -> None:
    """Log a bug by exception type and traceback frames, never its message (it may quote content)."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    _log.error("%s: %s\nTraceback (message withheld):\n%s", what, type(exc).__name__, frames.rstrip())


def _evaluators_from_config(names: tuple[str, ...]) -> tuple[Evaluator, ...]:
    """``names`` as evaluators in canonical order; ``ValueError`` on an unknown one."""
    unknown = sorted(set(names) - set(EVALUATORS))
    if unknown:
        raise ValueError(f"judge.evaluators: unknown evaluator(s) {unknown}; known: {list(EVALUATORS)}")
    return tuple(e for e in EVALUATORS if e in names)
