"""Running ragmon's asyncio servers in a background thread for synchronous tests."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from prometheus_client.registry import Collector

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config
from ragmon.export.server import metrics_handler

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread; ``run`` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


@contextmanager
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    try:
        yield thread
    finally:
        thread.close()


@contextmanager
def sidecar_thread(
    config: Config, clock: Callable[[], float], environ: Mapping[str, str] | None = None, **options: Any,
) -> Iterator[tuple[Sidecar, LoopThread]]:
    """A started ``Sidecar`` on its own event loop thread (no judge endpoint from the
    environment unless ``environ`` gives one; ``options``: more of its fields); stopped on exit."""
    loop = LoopThread()

    async def start() -> Sidecar:
        started = Sidecar(config, clock=clock, environ=dict(environ or {}), **options)
        await started.start()
        return started

    car = loop.run(start())
    try:
        yield car, loop
    finally:
        loop.run(car.stop(timeout=10))
        loop.close()


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """POST and return (status, headers, body), also for error statuses."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def call_soon(thread: LoopThread, fn: Callable[[], Any]) -> Any:
    async def wrapper() -> Any:
        return fn()

    return thread.run(wrapper())


CONTENT_HEADERS = ("Content-Type", "Content-Encoding")


async def scrape_async(
    registry: Collector, accept: str = "", accept_encoding: str = "", query: str = "",
) -> tuple[bytes, dict[str, str]]:
    """One GET ``/metrics?query`` of an app serving ``registry`` through ragmon's metrics
    handler: the body as sent (not decompressed) and its Content-Type and Content-Encoding."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(registry))
    headers = {"Accept": accept, "Accept-Encoding": accept_encoding}
    async with TestServer(app) as server, ClientSession(auto_decompress=False) as session:
        async with session.get(server.make_url("/metrics" + (f"?{query}" if query else "")), headers=headers) as response:
            assert response.status == 200, response.status
            return await response.read(), {k: response.headers[k] for k in CONTENT_HEADERS if k in response.headers}


def scrape(registry: Collector, accept: str = "", accept_encoding: str = "", query: str = "") -> tuple[bytes, dict[str, str]]:
    """``scrape_async`` on a new event loop."""
    return asyncio.run(scrape_async(registry, accept, accept_encoding, query))
