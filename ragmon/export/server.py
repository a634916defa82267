"""The metrics server's HTTP side: ``/metrics``, ``/healthz``, ``/readyz``, the status page ``/``
(rendered by ``ragmon.export.status``).

``/metrics`` is prometheus_client's aiohttp handler (``make_aiohttp_handler``): it negotiates
the format (Prometheus text, or OpenMetrics with exemplars) and applies the ``name[]`` filter.
It encodes synchronously, so a scrape collects the families on the event loop one at a time
(``collect_families``: each a cheap copy) and runs the handler over that snapshot in a worker
thread: ingest and probes go on while a big scrape renders. aiohttp gzips the body (in its
executor when large) when ``Accept-Encoding`` accepts gzip with a q-value above 0
(``gzip_accepted``: aiohttp's own choice ignores q-values and prefers deflate).

``metrics.token``, when set, is required as a bearer token on ``/metrics`` and ``/``
(``bearer_guard``); ``/healthz`` and ``/readyz`` stay open (kubelet probes).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ragmon.export.status import CSP
from ragmon.receivers.auth import bearer_token_matches

__all__ = [
    "GUARDED_PATHS",
    "bearer_guard",
    "collect_families",
    "gzip_accepted",
    "metrics_app",
    "metrics_handler",
    "snapshot_registry",
]

GUARDED_PATHS = frozenset({"/metrics", "/"})
"""Paths that need ``metrics.token`` when one is set."""


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


def metrics_handler(
    registry: Collector, *, after_collect: Callable[[Sequence[Metric]], Awaitable[None]] | None = None,
    quiet_gc: bool = False,
) -> Handler:
    """``/metrics`` for ``registry``: families collected on the loop, then prometheus_client's
    handler over them in a worker thread; one scrape at a time. ``after_collect`` is awaited
    with the collected families first. ``quiet_gc`` (for a process of ragmon's own:
    ``ragmon run``) holds the cycle collector off while a scrape collects and renders: its
    tens of thousands of short-lived objects, freed by reference counting, would otherwise
    start full collections that stop the event loop for a quarter of a second."""
    scraping = asyncio.Lock()

    async def metrics(request: web.Request) -> web.StreamResponse:
        async with scraping, _gc_held(quiet_gc):
            families = await collect_families(registry)
            if after_collect is not None:
                await after_collect(families)
            snapshot = snapshot_registry(families)
            library = make_aiohttp_handler(snapshot, disable_compression=True)
            response = await asyncio.to_thread(_render, library, request)
        if gzip_accepted(request.headers.get("Accept-Encoding", "")):
            response.enable_compression(web.ContentCoding.gzip)
        return response

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


def metrics_app(
    registry: Collector, *, token: str, status_page: Callable[[], str], ready: Callable[[], bool],
    after_collect: Callable[[Sequence[Metric]], Awaitable[None]] | None = None, quiet_gc: bool = False,
) -> web.Application:
    """The aiohttp app serving ``/metrics`` (``metrics_handler``), ``/healthz``, ``/readyz``
    (``ready()``, else 503) and the status page ``/`` (``status_page()``, with a
    Content-Security-Policy that forbids loading anything), behind ``bearer_guard(token)``;
    ``after_collect`` and ``quiet_gc`` as in ``metrics_handler``."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if not ready():
            return web.Response(status=503, text="not running\n")
        return web.Response(text="ready\n")

    async def status(_: web.Request) -> web.Response:
        return web.Response(
            text=status_page(), content_type="text/html",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    app = web.Application(middlewares=[bearer_guard(token)])
    app.router.add_get("/metrics", metrics_handler(registry, after_collect=after_collect, quiet_gc=quiet_gc))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", status)
    return app
