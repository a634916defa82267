"""``/metrics`` answers are bounded in memory per connection and in total, with a write
timeout (issue 23: 60 clients that never read pinned a 10.9 MB answer each, RSS 127 -> 1,384 MB,
and a normal scrape timed out).

Served by ragmon's metrics handler on a real aiohttp server on 127.0.0.1; the clients are raw
sockets with a small receive buffer that send ``GET /metrics`` and read nothing (or a trickle).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from net_helpers import wait_until
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import LoopThread

from ragmon.export.server import ScrapeLimits, ScrapeStats, metrics_handler
from ragmon.net.listeners import ByteBudget

SERIES = 60_000
"""Series of the test registry: a text answer of about 4 MB."""


class _Big:
    """A collector with ``SERIES`` series: an answer too large for the sockets' buffers."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("ragmon_test_series", "Many series.", labels=["series", "padding"])
        for i in range(SERIES):
            family.add_metric([str(i), "p" * 40], float(i))
        yield family


def _serve(loop: LoopThread, limits: ScrapeLimits) -> tuple[int, ScrapeStats, web.AppRunner]:
    stats = ScrapeStats(ByteBudget(limits.max_inflight_bytes))

    async def start() -> tuple[int, web.AppRunner]:
        app = web.Application()
        app.router.add_get("/metrics", metrics_handler(_Big(), limits=limits, stats=stats))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1]), runner  # type: ignore[union-attr]

    port, runner = loop.run(start())
    return port, stats, runner


def _silent_client(port: int, gzip_ok: bool = False) -> socket.socket:
    """Asks for /metrics and reads nothing (a tiny receive buffer: the answer stays server-side)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    encoding = b"Accept-Encoding: gzip\r\n" if gzip_ok else b""
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + encoding + b"\r\n")
    return sock


def _status(port: int, *, parse: bool = True) -> int:
    """A scrape's status, its whole body read and (``parse``) parsed as Prometheus text (the
    parse takes seconds on a slow machine: a test that times the server reads without it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            body = response.read().decode()
            if parse:
                assert len(list(text_string_to_metric_families(body))) == 1
            return int(response.status)
    except urllib.error.HTTPError as exc:
        assert exc.headers["Retry-After"] == "1"
        return int(exc.code)


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_clients_that_never_read_hold_at_most_the_budget_then_are_cut(loop: LoopThread) -> None:
    """Each answer waiting for its client is charged to ``max_inflight_bytes``: past it new
    scrapes get 503 + Retry-After before anything is rendered; after ``write_timeout`` the
    silent clients are cut, their answers freed, and scrapes are answered again. Counted."""
    began = time.monotonic()
    size = len(_Big_text())
    render = time.monotonic() - began
    # The first answer's write must outlast the second one's render, or the first client is cut
    # before the second is charged (a render takes seconds on a slow machine).
    limits = ScrapeLimits(max_inflight_bytes=2 * size, write_timeout=max(1.5, 4 * render))
    port, stats, runner = _serve(loop, limits)
    clients = []
    try:
        for _ in range(2):
            clients.append(_silent_client(port))
            wait_until(lambda: stats.budget.used == len(clients) * size)
        began = time.monotonic()
        refused = [_status(port) for _ in range(3)]
        assert refused == [503, 503, 503] and time.monotonic() - began < 1.0  # not rendered, not waited
        assert stats.dropped["inflight_bytes"] == 3 and stats.budget.used == 2 * size
        wait_until(lambda: stats.dropped["write_timeout"] == 2, timeout=limits.write_timeout + 10)
        assert stats.budget.used == 0
        assert _status(port) == 200
        assert stats.budget.used == 0
    finally:
        for sock in clients:
            sock.close()
        loop.run(runner.cleanup())


def _Big_text() -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(_Big())  # type: ignore[arg-type]
    return generate_latest(registry)


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_a_client_reading_a_trickle_is_cut_at_the_write_timeout(loop: LoopThread) -> None:
    """1 KB every half second on a 4 MB answer: cut at ``write_timeout`` (not held for an
    hour), its answer freed, counted. (The client still reads what the kernel had buffered.)"""
    port, stats, runner = _serve(loop, ScrapeLimits(write_timeout=1.0))
    stop = threading.Event()

    def trickle(sock: socket.socket) -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                if not sock.recv(1024):
                    return
            except (TimeoutError, OSError):
                pass
            time.sleep(0.5)

    try:
        sock = _silent_client(port)
        reader = threading.Thread(target=trickle, args=(sock,), daemon=True)
        reader.start()
        wait_until(lambda: stats.budget.used > 0)
        began = time.monotonic()
        wait_until(lambda: stats.dropped["write_timeout"] == 1, timeout=5.0)
        assert time.monotonic() - began < 2.0 and stats.budget.used == 0
        stop.set()
        reader.join(5)
        sock.close()
    finally:
        loop.run(runner.cleanup())


class _Recording(ByteBudget):
    """A budget noting every charge."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.taken: list[int] = []

    def take(self, n: int, mine: int = 0) -> bool:
        self.taken.append(n)
        return super().take(n, mine)


def test_a_gzip_answer_is_compressed_before_it_is_held(loop: LoopThread) -> None:
    """What a client that accepts gzip (Prometheus does) holds is the compressed answer."""
    text = _Big_text()
    budget = _Recording(64 << 20)
    stats = ScrapeStats(budget)

    async def run() -> bytes:
        app = web.Application()
        app.router.add_get("/metrics", metrics_handler(_Big(), stats=stats))
        async with TestServer(app) as server, ClientSession(auto_decompress=False) as session:
            async with session.get(server.make_url("/metrics"), headers={"Accept-Encoding": "gzip"}) as response:
                assert response.headers["Content-Encoding"] == "gzip"
                return await response.read()

    body = loop.run(run())
    assert gzip.decompress(body) == text
    assert budget.taken == [len(body)] and len(body) < len(text) / 5 and budget.used == 0


def test_one_answer_larger_than_the_budget_is_still_served_alone(loop: LoopThread) -> None:
    port, stats, runner = _serve(loop, ScrapeLimits(max_inflight_bytes=1000))
    try:
        assert _status(port) == 200 and stats.budget.used == 0 and not stats.dropped
    finally:
        loop.run(runner.cleanup())


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_the_handler_never_awaits_a_client_under_the_scrape_lock() -> None:
    """Writing happens after the scrape lock is released: a silent client does not hold up the
    next scrape's rendering (it is refused by the budget, or served, at once)."""

    async def run() -> None:
        stats = ScrapeStats(ByteBudget(64 << 20))
        app = web.Application()
        app.router.add_get("/metrics", metrics_handler(_Big(), limits=ScrapeLimits(write_timeout=5.0), stats=stats))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        silent = await asyncio.to_thread(_silent_client, port)
        while not stats.budget.used:
            await asyncio.sleep(0.01)
        began = time.monotonic()
        assert await asyncio.to_thread(functools.partial(_status, port, parse=False)) == 200
        assert time.monotonic() - began < 3.0  # rendering 60,000 series and reading them, not the silent client's 5 s
        silent.close()
        await runner.cleanup()

    asyncio.run(run())
