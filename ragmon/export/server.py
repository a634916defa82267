"""The metrics server's HTTP side: ``/metrics``, ``/healthz``, ``/readyz``, the status page ``/``
(rendered by ``ragmon.export.status``).

``/metrics`` is prometheus_client's aiohttp handler (``make_aiohttp_handler``): it negotiates
the format (Prometheus text, or OpenMetrics with exemplars) and applies the ``name[]`` filter.
It encodes synchronously, so a scrape collects the families on the event loop one at a time
(``collect_families``: each a cheap copy) and runs the handler over that snapshot in a worker
thread: ingest and probes go on while a big scrape renders. The same thread gzips the body
when ``Accept-Encoding`` accepts gzip with a q-value above 0 (``gzip_accepted``: aiohttp's own
choice ignores q-values and prefers deflate), so only the compressed answer is held.

Memory (``ScrapeLimits``): a rendered answer is held until the client has read it, so answers
are charged to a budget (``metrics.max_inflight_bytes``; one may always proceed alone): past it
a scrape gets 503 + ``Retry-After`` before it is rendered, or once rendered if it does not fit.
The answer is written in pieces, each waiting for the client to take the last (the socket's
buffer holds at most one piece), within ``metrics.write_timeout``: a client that stops reading
is cut off and its answer freed. Both are counted (``ScrapeStats``).

``metrics.token``, when set, is required as a bearer token on ``/metrics`` and ``/``
(``bearer_guard``); ``/healthz`` and ``/readyz`` stay open (kubelet probes).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ragmon import catalogue as cat
from ragmon.config import MetricsConfig
from ragmon.export.status import CSP
from ragmon.net.auth import bearer_token_matches
from ragmon.net.listeners import ByteBudget
from ragmon.net.routes import Hint, local_base

__all__ = [
    "CUT",
    "DROP_REASONS",
    "GUARDED_PATHS",
    "PIECE_BYTES",
    "ScrapeLimits",
    "ScrapeStats",
    "bearer_guard",
    "collect_families",
    "gzip_accepted",
    "metrics_app",
    "metrics_handler",
    "snapshot_registry",
]

GUARDED_PATHS = frozenset({"/metrics", "/"})
"""Paths that need ``metrics.token`` when one is set."""
CUT: web.ResponseKey[bool] = web.ResponseKey("ragmon_cut")
"""Set on a ``/metrics`` answer cut off at ``metrics.write_timeout``."""
PIECE_BYTES = 64 * 1024
"""An answer is written this many bytes at a time, each after the client has taken the last."""
DROP_REASONS = ("inflight_bytes", "write_timeout")
"""``reason`` values of ``ragmon_scrapes_dropped_total``."""
_METRICS = MetricsConfig()


@dataclass(frozen=True, slots=True)
class ScrapeLimits:
    """``[metrics]`` bounds of answers being written: bytes held at once, time to write one."""

    max_inflight_bytes: int = _METRICS.max_inflight_bytes
    write_timeout: float = _METRICS.write_timeout

    @classmethod
    def from_config(cls, metrics: MetricsConfig) -> ScrapeLimits:
        return cls(metrics.max_inflight_bytes, metrics.write_timeout)


@dataclass(slots=True)
class ScrapeStats:
    """Answers dropped by reason, and the byte budget of answers being written."""

    budget: ByteBudget
    dropped: Counter[str] = field(default_factory=Counter)

    def collect(self) -> Iterable[Metric]:
        """``ragmon_scrapes_dropped_total{reason}`` and ``ragmon_scrape_bytes`` (for a ``StatsCollector``)."""
        dropped = cat.SCRAPES_DROPPED.empty()
        for reason in DROP_REASONS:
            dropped.add_metric([reason], self.dropped[reason])
        held = cat.SCRAPE_BYTES.empty()
        held.add_metric([], self.budget.used)
        return (dropped, held)


class _Snapshot(Collector):
    """Families already collected (never changed afterwards): what a worker thread encodes.

    Read once: each family is let go once the encoder has moved past it, so its samples (built
    by that reading, ``DeferredFamily``) are freed one family at a time, not all at the end.
    """

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        families, self._families = self._families, []
        families.reverse()
        while families:
            yield families.pop()


async def collect_families(registry: Collector) -> list[Metric]:
    """Every family of ``registry``, built on the event loop one at a time (each bounded by its
    series budget), yielding to the loop between them so that ingest and probes go on."""
    families = []
    for family in registry.collect():
        families.append(family)
        await asyncio.sleep(0)
    return families


def snapshot_registry(families: list[Metric]) -> CollectorRegistry:
    """A registry serving ``families`` once, with prometheus_client's ``restricted_registry``
    (the ``name[]`` filter) working on it. Takes ``families`` over."""
    registry = CollectorRegistry(support_collectors_without_names=True)
    registry.register(_Snapshot(families))
    return registry


def gzip_accepted(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header value accepts gzip (``gzip;q=0`` does not)."""
    for part in accept_encoding.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() == "gzip":
            q = params.strip().lower().removeprefix("q=")
            try:
                return not params.strip() or float(q) > 0
            except ValueError:
                return True
    return False


async def _answer(handler: Handler, request: web.Request) -> web.StreamResponse:
    return await handler(request)


def _render(handler: Handler, request: web.Request) -> web.StreamResponse:
    """Run prometheus_client's handler to its end in this thread. It never awaits (0.26), so
    one step finishes it; no event loop is needed (nor its file descriptors)."""
    step = _answer(handler, request)
    try:
        step.send(None)
    except StopIteration as done:
        response: web.StreamResponse = done.value
        return response
    step.close()
    raise RuntimeError("prometheus_client's aiohttp handler awaited: it cannot run in a worker thread")


def _baked(handler: Handler, request: web.Request, compress: bool) -> tuple[int, dict[str, str], bytes]:
    """The library's answer rendered in this thread (``_render``): status, headers, body; the
    body gzipped here when ``compress`` (the uncompressed one is freed at once)."""
    response = _render(handler, request)
    assert isinstance(response, web.Response)
    body = bytes(response.body or b"")  # type: ignore[arg-type]
    headers = {key: value for key, value in response.headers.items() if key.lower() not in ("content-length", "content-encoding")}
    if compress:
        body = gzip.compress(body, compresslevel=6, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return response.status, headers, body


def _refusal(stats: ScrapeStats) -> web.Response:
    stats.dropped["inflight_bytes"] += 1
    return web.Response(
        status=503, text="too many /metrics answers are being written; retry later\n", headers={"Retry-After": "1"},
    )


async def _write(request: web.Request, status: int, headers: dict[str, str], body: bytes,
                 timeout: float, stats: ScrapeStats) -> web.StreamResponse:
    """Write ``body`` a piece at a time within ``timeout`` seconds; cut the connection past it."""
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = len(body)
    if request.method == "HEAD":
        await response.prepare(request)
        return response
    view = memoryview(body)
    try:
        async with asyncio.timeout(timeout):
            await response.prepare(request)
            for start in range(0, len(view), PIECE_BYTES):
                await response.write(view[start:start + PIECE_BYTES])  # waits while the socket's buffer is full
            await response.write_eof()
    except TimeoutError:
        stats.dropped["write_timeout"] += 1
        response[CUT] = True
        if request.transport is not None:
            request.transport.abort()  # frees what the socket still buffers
    finally:
        view.release()
    return response


def metrics_handler(
    registry: Collector, *, quiet_gc: bool = False, limits: ScrapeLimits | None = None, stats: ScrapeStats | None = None,
) -> Handler:
    """``/metrics`` for ``registry``: families collected on the loop, then prometheus_client's
    handler over them in a worker thread; one scrape at a time; the answer held within
    ``limits`` and written as the client reads it (the module docstring), counted in ``stats``.
    ``quiet_gc`` (for a
    process of ragmon's own: ``ragmon run``) holds the cycle collector off while a scrape
    collects and renders: its tens of thousands of short-lived objects, freed by reference
    counting, would otherwise start full collections that stop the event loop for a quarter of
    a second."""
    scraping = asyncio.Lock()
    limits = limits or ScrapeLimits()
    stats = stats or ScrapeStats(ByteBudget(limits.max_inflight_bytes))
    budget = stats.budget

    async def metrics(request: web.Request) -> web.StreamResponse:
        if budget.used >= budget.limit:  # refused before the work of rendering
            return _refusal(stats)
        compress = gzip_accepted(request.headers.get("Accept-Encoding", ""))
        async with scraping, _gc_held(quiet_gc):
            families = await collect_families(registry)
            snapshot = snapshot_registry(families)
            library = make_aiohttp_handler(snapshot, disable_compression=True)
            status, headers, body = await asyncio.to_thread(_baked, library, request, compress)
        if not budget.take(len(body)):
            return _refusal(stats)
        try:
            return await _write(request, status, headers, body, limits.write_timeout, stats)
        finally:
            budget.give(len(body))

    return metrics


@contextlib.asynccontextmanager
async def _gc_held(hold: bool) -> AsyncIterator[None]:
    """The cycle collector off inside (when ``hold`` and it was on), back on after."""
    if not hold or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def bearer_guard(token: str, paths: Collection[str] = GUARDED_PATHS) -> Middleware:
    """A middleware answering 401 on ``paths`` to a request without ``token`` as its bearer
    token (no check when ``token`` is empty; a request the router refuses, e.g. 405, keeps
    its answer)."""

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        routed = request.match_info.http_exception is None
        if token and routed and request.path in paths and not bearer_token_matches(request.headers.get("Authorization"), token):
            return web.Response(
                status=401, text="missing or wrong bearer token\n", headers={"WWW-Authenticate": "Bearer"}
            )
        return await handler(request)

    return guard


def misrouted(otlp: Callable[[], tuple[str, int] | None]) -> Hint:
    """The metrics port's answer to a path or method it does not serve (``net.routes.Unrouted``):
    OTLP sent here is pointed at the receiver, ``otlp()`` (its listen host and bound port; None
    when it is off)."""

    def hint(request: web.Request, status: int) -> str:
        base = local_base(request)
        if request.path.startswith("/v1/"):
            receiver = otlp()
            if receiver is None:
                return "this is ragmon's metrics port, and its OTLP/HTTP receiver is off (receiver.http)"
            host, port = receiver
            where = local_base(request, port, host)
            return f"this is ragmon's metrics port: send OTLP/HTTP traces to {where}{request.path if request.path in ('/v1/traces', '/v1/feedback') else '/v1/traces'}"
        if status == 405:
            return f"{request.method} is not served here: GET {base}/metrics, /healthz, /readyz or / (the status page)"
        return f"no such path: this port serves {base}/metrics, /healthz, /readyz and / (the status page)"

    return hint


def metrics_app(
    registry: Collector, *, token: str, status_page: Callable[[], str], ready: Callable[[], bool],
    quiet_gc: bool = False,
    limits: ScrapeLimits | None = None, stats: ScrapeStats | None = None,
) -> web.Application:
    """The aiohttp app serving ``/metrics`` (``metrics_handler``), ``/healthz``, ``/readyz``
    (``ready()``, else 503) and the status page ``/`` (``status_page()``, with a
    Content-Security-Policy that forbids loading anything), behind ``bearer_guard(token)``;
    ``quiet_gc``, ``limits`` and ``stats`` as in ``metrics_handler``."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if not ready():
            return web.Response(status=503, text="not running\n")
        return web.Response(text="ready\n")

    async def status(_: web.Request) -> web.Response:
        page = status_page().encode("utf-8", "replace")  # text from traffic may hold a lone surrogate
        return web.Response(
            body=page, content_type="text/html", charset="utf-8",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    app = web.Application(middlewares=[bearer_guard(token)])
    app.router.add_get("/metrics", metrics_handler(
        registry, quiet_gc=quiet_gc, limits=limits, stats=stats,
    ))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", status)
    return app
