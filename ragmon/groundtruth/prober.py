"""The prober (SPEC §5, source ``probe``): replay golden queries against the service over HTTP.

Each ``[[probe]]`` makes one pass over its dataset per ``interval``, with at most
``concurrency`` requests in flight. Every request carries a W3C ``traceparent`` with a fresh
trace id ragmon chose (sampled flag set, so a ParentBased sampler records it); the id is
remembered with the query's golden labels in a ``ProbeRegistry``, bounded in entries (full:
the oldest is dropped) and in time (``retention``: then the trace is *missing*). When the
service's trace with that id is scored, ``Probes.take`` hands the labels to the scorer: the
trace is scored once (``ragmon_traces_total``) and gets a ``probe`` retrieval score besides
its ``label``/``golden`` ones. With ``response_ids`` / ``response_answer`` (paths such as
``documents[*].id``, see ``parse_path``) the ranking / answer come from the JSON response
instead of the trace.

Request outcomes: ``ok`` (2xx), ``http_error`` (another status), ``timeout``, ``error``
(connection and other client errors). Trace results: ``joined``, ``missing``, ``dropped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from prometheus_client.metrics_core import Metric

from ragmon.config import Config, ProbeConfig, probe_name
from ragmon import catalogue as cat
from ragmon.export.series import HistogramFamily
from ragmon.formats.jsonpath import parse_path, select
from ragmon.formats.relevance import GoldenQuery, as_id, read_golden_queries
from ragmon.scoring.records import ProbeLabels

__all__ = [
    "OUTCOMES",
    "RESULTS",
    "ProbeRegistry",
    "Prober",
    "Probes",
    "fill_template",
]

log = logging.getLogger("ragmon")

OUTCOMES: Final = ("ok", "http_error", "timeout", "error")
"""``outcome`` label values of ``ragmon_probe_requests_total``."""
RESULTS: Final = ("joined", "missing", "dropped")
"""``result`` label values of ``ragmon_probe_traces_total``."""
MAX_PENDING: Final = 10_000
"""Probe trace ids awaiting their trace, across all probes; past it the oldest is dropped."""
EXPORT_SLACK: Final = 30.0
"""Seconds allowed for the service to export its spans (batch delay, retries): part of the retention."""
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024
"""Response bodies read at most; a longer one is not parsed (the trace's ranking is used)."""
_NO_BODY: Final = frozenset({"GET", "HEAD"})
_OWN_HEADERS: Final = frozenset({"traceparent", "tracestate"})

def _ranking(values: list[Any]) -> tuple[str, ...] | None:
    """Document ids (strings or integers; a selected list gives its items); ``None`` if any is not an id."""
    ids = []
    for value in values:
        for item in value if isinstance(value, list) else (value,):
            try:
                ids.append(as_id(item, "a document id"))
            except ValueError:
                return None
    return tuple(ids)


def fill_template(template: Any, query: str) -> Any:
    """``template`` (parsed JSON) with ``{query}`` replaced by ``query`` in every string value;
    the result is encoded as JSON afterwards, so quotes and backslashes in the query stay text."""
    if isinstance(template, str):
        return template.replace("{query}", query)
    if isinstance(template, list):
        return [fill_template(item, query) for item in template]
    if isinstance(template, dict):
        return {key: fill_template(item, query) for key, item in template.items()}
    return template


class ProbeRegistry:
    """Trace ids of probe requests awaiting their trace; bounded in entries and in time.

    Pure and synchronous (``now`` passed in, seconds of the sidecar's clock). ``counts`` holds
    ``(probe, result)`` -> traces: ``joined`` by ``take``; ``missing`` once ``retention`` passed
    (``expire``); ``dropped`` when an ``add`` found ``capacity`` entries (the oldest goes).
    """

    def __init__(self, capacity: int, retention: float) -> None:
        if capacity < 1 or not retention > 0:
            raise ValueError(f"capacity must be >= 1 and retention > 0, got {capacity!r}, {retention!r}")
        self.capacity = capacity
        self.retention = retention
        self.counts: Counter[tuple[str, str]] = Counter()
        self._pending: OrderedDict[bytes, tuple[float, ProbeLabels]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._pending

    def add(self, trace_id: bytes, labels: ProbeLabels, now: float) -> None:
        """Remember ``trace_id`` until ``now + retention``."""
        self.expire(now)
        while len(self._pending) >= self.capacity:
            _, (_, oldest) = self._pending.popitem(last=False)
            self.counts[(oldest.probe, "dropped")] += 1
        self._pending[trace_id] = (now + self.retention, labels)

    def update(self, trace_id: bytes, ranking: tuple[str, ...] | None, answer: str | None) -> None:
        """Add what the response said, if the trace id is still pending."""
        entry = self._pending.get(trace_id)
        if entry is not None:
            self._pending[trace_id] = (entry[0], replace(entry[1], ranking=ranking, answer=answer))

    def discard(self, trace_id: bytes) -> None:
        """Forget a trace id without counting it (the request never reached the service)."""
        self._pending.pop(trace_id, None)

    def take(self, trace_id: bytes) -> ProbeLabels | None:
        """The labels of a probe's trace (counted ``joined``), or ``None`` for any other trace."""
        entry = self._pending.pop(trace_id, None)
        if entry is None:
            return None
        self.counts[(entry[1].probe, "joined")] += 1
        return entry[1]

    def expire(self, now: float) -> None:
        """Count and forget the entries past their retention (insertion order is deadline order)."""
        pending = self._pending
        while pending:
            deadline, labels = next(iter(pending.values()))
            if deadline > now:
                return
            pending.popitem(last=False)
            self.counts[(labels.probe, "missing")] += 1


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or ``None`` (read to the end, not kept) when it is longer than ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
    return b"".join(chunks) if size <= limit else None


class Prober:
    """One ``[[probe]]``: ``run`` makes a pass per interval until cancelled.

    ``clock`` (monotonic seconds) paces the passes, polled every ``tick`` real seconds, and
    times the requests; ``rng`` makes the trace and span ids.
    """

    def __init__(
        self,
        config: ProbeConfig,
        queries: Sequence[GoldenQuery],
        registry: ProbeRegistry,
        durations: HistogramFamily,
        clock: Callable[[], float],
        rng: random.Random,
        tick: float = 0.25,
    ) -> None:
        self.name = probe_name(config)
        self.queries = tuple(queries)
        self.outcomes: Counter[str] = Counter(dict.fromkeys(OUTCOMES, 0))
        self.last = ""
        """The last probe's outcome ("" before the first): for the status page."""
        self._config = config
        self._method = config.method.upper()
        self.interval = config.interval
        self._interval = config.interval
        self._timeout = aiohttp.ClientTimeout(total=config.timeout)
        self._ids = parse_path(config.response_ids) if config.response_ids else None
        self._answer = parse_path(config.response_answer) if config.response_answer else None
        self._headers = {k: v for k, v in config.headers.items() if k.lower() not in _OWN_HEADERS}
        if self._method not in _NO_BODY and not any(k.lower() == "content-type" for k in self._headers):
            self._headers["Content-Type"] = "application/json"
        self._registry = registry
        self._durations = durations
        self._series = durations.series((self.name,))
        self._clock = clock
        self._rng = rng
        self._tick = tick
        self._warned = False

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Passes over the dataset, each ``interval`` after the previous one began (right after
        it ended when it overran: missed passes are skipped, not caught up), until cancelled."""
        while True:
            next_pass = self._clock() + self._interval
            await self.run_pass(session)
            while (left := next_pass - self._clock()) > 0:
                await asyncio.sleep(min(left, self._tick))

    async def run_pass(self, session: aiohttp.ClientSession) -> None:
        """One request per query, ``concurrency`` at a time."""
        queries: Iterator[GoldenQuery] = iter(self.queries)

        async def worker() -> None:
            for query in queries:  # shared: each worker takes the next query
                try:
                    await self._send(session, query)
                except Exception:  # one bad response must not stop the probe
                    log.exception("probe %s: could not handle a response", self.name)

        await asyncio.gather(*(worker() for _ in range(min(self._config.concurrency, len(self.queries)))))

    def _new_id(self, size: int) -> bytes:
        return (self._rng.getrandbits(8 * size) or 1).to_bytes(size, "big")

    async def _send(self, session: aiohttp.ClientSession, query: GoldenQuery) -> None:
        trace_id, span_id = self._new_id(16), self._new_id(8)
        labels = ProbeLabels(self.name, query.grades, query.reference_answer)
        self._registry.add(trace_id, labels, self._clock())
        headers = {**self._headers, "traceparent": f"00-{trace_id.hex()}-{span_id.hex()}-01"}
        url = self._config.url.replace("{query}", quote(query.query, safe=""))
        body = None if self._method in _NO_BODY else json.dumps(fill_template(self._config.body, query.query)).encode()
        started = self._clock()
        try:
            async with session.request(self._method, url, data=body, headers=headers, timeout=self._timeout) as response:
                content = await _read_capped(response, MAX_RESPONSE_BYTES)
                ok = 200 <= response.status < 300
        except TimeoutError:
            self._outcome("timeout")
            return
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            self._outcome("error")
            self._registry.discard(trace_id)
            log.info("probe %s: %s", self.name, exc)
            return
        self._durations.add(self._series, [self._clock() - started], None, 0.0)
        self._outcome("ok" if ok else "http_error")
        if ok and (self._ids is not None or self._answer is not None):
            self._read_response(trace_id, content)

    def _outcome(self, outcome: str) -> None:
        """Count one probe request's ``outcome``; it is now the last one."""
        self.outcomes[outcome] += 1
        self.last = outcome

    def _read_response(self, trace_id: bytes, content: bytes | None) -> None:
        """Put the response's ranking and answer in the registry; the trace's are used when it
        has none (logged)."""
        try:
            data = json.loads(content) if content is not None else None
        except (ValueError, RecursionError):
            data = None
        ranking = answer = None
        if data is not None and self._ids is not None:
            found = select(data, self._ids)
            ranking = _ranking(found) if found is not None else None
        if data is not None and self._answer is not None:
            found = select(data, self._answer)
            answer = next((v for v in found or () if isinstance(v, str)), None)
        if not self._warned and ((self._ids is not None and ranking is None) or (self._answer is not None and answer is None)):
            self._warned = True
            log.warning("probe %s: the response has no %s; using the trace's", self.name,
                        "JSON body" if data is None else "value at response_ids/response_answer")
        self._registry.update(trace_id, ranking, answer)


class Probes:
    """Every configured prober, the shared registry and their self-metrics.

    ``start`` and ``stop`` with the sidecar; ``take`` from the scorer (by trace id); ``collect``
    at scrape time.
    """

    def __init__(
        self,
        probes: Sequence[tuple[ProbeConfig, Sequence[GoldenQuery]]],
        registry: ProbeRegistry,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.registry = registry
        self._clock = clock
        rng = rng or random.Random()
        spec = cat.PROBE_DURATION
        self.durations = HistogramFamily(spec.name, spec.help, spec.labels, spec.buckets, time.time)
        self.probers = [Prober(c, queries, registry, self.durations, clock, rng) for c, queries in probes]
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_config(
        cls,
        config: Config,
        clock: Callable[[], float],
        *,
        rng: random.Random | None = None,
        capacity: int = MAX_PENDING,
        retention: float | None = None,
    ) -> Probes:
        """From ``[[probe]]`` (datasets read now; ``InputError`` if unreadable). ``retention``
        defaults to the longest probe timeout + ``EXPORT_SLACK`` + ``traces.max_wait`` + ``traces.grace``."""
        if retention is None:
            timeout = max((p.timeout for p in config.probe), default=0.0)
            retention = timeout + EXPORT_SLACK + config.traces.max_wait + config.traces.grace
        datasets: dict[str, list[GoldenQuery]] = {}
        for probe in config.probe:
            path = probe.dataset or config.scoring.golden
            if path not in datasets:
                datasets[path] = read_golden_queries(path)
        probes = [(p, datasets[p.dataset or config.scoring.golden]) for p in config.probe]
        return cls(probes, ProbeRegistry(capacity, retention), clock, rng)

    async def start(self) -> None:
        """Open the HTTP client and start every prober's schedule."""
        if not self.probers or self._tasks:
            return
        self._session = aiohttp.ClientSession()
        self._tasks = [
            asyncio.create_task(p.run(self._session), name=f"ragmon-probe-{p.name}") for p in self.probers
        ]

    async def stop(self, timeout: float = 1.0) -> None:
        """Stop sending: cancel the schedules and the requests in flight, close the client."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None

    def take(self, trace_id: bytes) -> ProbeLabels | None:
        """The labels of a probe's trace (counted ``joined``), or ``None``."""
        return self.registry.take(trace_id)

    def expects(self, trace_id: bytes) -> bool:
        """Whether ``trace_id`` is a probe's trace not scored yet (a probe registers its trace id
        before it sends the request, so before any of its spans can arrive)."""
        return trace_id in self.registry

    def collect(self) -> Iterable[Metric]:
        """``ragmon_probe_requests_total{probe,outcome}``, ``ragmon_probe_duration_seconds{probe}``,
        ``ragmon_probe_traces_total{probe,result}`` (every probe and known outcome or result
        from the start, at 0) and ``ragmon_probe_traces_pending``."""
        self.registry.expire(self._clock())
        requests = cat.PROBE_REQUESTS.empty()
        traces = cat.PROBE_TRACES.empty()
        counts = self.registry.counts
        for prober in self.probers:
            for outcome in OUTCOMES:
                requests.add_metric([prober.name, outcome], prober.outcomes[outcome])
            for result in RESULTS:
                traces.add_metric([prober.name, result], counts[(prober.name, result)])
        pending = cat.PROBE_TRACES_PENDING.empty()
        pending.add_metric([], len(self.registry))
        return [requests, self.durations.collect(), traces, pending]
