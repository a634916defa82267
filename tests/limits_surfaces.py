"""The surfaces tests/shipped_limits.py drives while the bounds are held: scrapers that never
read (``Scrapers``), ingest at its caps over HTTP and gRPC (``drive_ingest``) and slow senders
(``SlowSenders``)."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections import Counter
from collections.abc import Sequence

import grpc

from limits_configs import MiB
from limits_context import Context, cancel
from limits_memory import PhaseFigure
from ragmon.config import Config
from ragmon.otlp.decode import SpanSelection
from ragmon.receivers.ingest import ReceiverSettings
from ragmon.net.listeners import ListenerLimits
from ragmon.receivers.otlp_grpc import SERVICE, concurrent_rpcs


def _peek(sock: socket.socket) -> str:
    """What arrived on ``sock``, looked at without reading it: ``closed`` (ragmon closed or cut
    it, even with bytes left unread), ``waiting`` (no status line yet), ``pinned`` (a 200 answer
    has begun) or ``refused`` (another status)."""
    if sock.fileno() < 0:
        return "closed"
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLRDHUP)
    for _, events in poller.poll(0):
        if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
            return "closed"
    try:
        head = sock.recv(12, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return "waiting"
    except OSError:
        return "closed"
    if not head:
        return "closed"
    if len(head) < 12:
        return "waiting"
    return "pinned" if head.endswith(b" 200") else "refused"


class Scrapers:
    """Connections to the metrics port that each send ``GET /metrics`` (no gzip) and never read
    (a 4 KiB receive buffer). ``ramp`` opens them one at a time up to ``target`` (a scrape
    renders under a lock: one waiting at a time keeps the harness's own gauge reads a render
    away), and reopens, a quarter of a second apart, any that ragmon closes or refuses."""

    REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nAccept-Encoding: identity\r\n\r\n"

    def __init__(self, port: int) -> None:
        self.port = port
        self.target = 0
        self.sockets: list[socket.socket] = []
        self.reopened = 0
        self.paused = False
        """No scraper opened or reopened while set (those open stay as they are)."""
        self._task: asyncio.Task[None] | None = None

    async def _open(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", self.port))
            await loop.sock_sendall(sock, self.REQUEST)
        except OSError:
            sock.close()
            raise
        return sock

    def states(self) -> Counter[str]:
        return Counter(_peek(s) for s in self.sockets)

    def describe(self) -> str:
        states = self.states()
        return (f"scrapers: {states['pinned']} answered 200 and not read, {states['refused']} refused, "
                f"{states['waiting']} waiting, {states['closed']} closed by ragmon; {self.reopened} reopened "
                f"(target {self.target})")

    def ramp(self, target: int) -> None:
        self.target = target
        if self._task is None:
            self._task = asyncio.create_task(self._ramp())

    async def _ramp(self) -> None:
        while True:
            if self.paused:
                await asyncio.sleep(0.25)
                continue
            for i, sock in enumerate(self.sockets):
                if _peek(sock) in ("closed", "refused"):
                    sock.close()
                    await asyncio.sleep(0.25)
                    with contextlib.suppress(OSError):
                        self.sockets[i] = await self._open()
                        self.reopened += 1
                        await self._answered(self.sockets[i])
            if len(self.sockets) < self.target:
                with contextlib.suppress(OSError):
                    self.sockets.append(await self._open())
                    await self._answered(self.sockets[-1])
            else:
                await asyncio.sleep(0.25)

    @staticmethod
    async def _answered(sock: socket.socket, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while _peek(sock) == "waiting" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        await cancel(self._task)
        for sock in self.sockets:
            sock.close()
        self.sockets = []


NO_ANSWER = "no scraper was answered"


async def ramp_scrapers(ctx: Context, scrapers: Scrapers, target: int, figure: PhaseFigure, seconds: float) -> None:
    """Scrapers up to ``target``, for at most ``seconds`` (the ramp goes on afterwards)."""
    scrapers.ramp(target)
    started = time.monotonic()
    why = f"{seconds:.0f} s passed"
    while time.monotonic() - started < seconds:
        if len(scrapers.sockets) >= target and not scrapers.states()["waiting"]:
            why = "every scraper answered"
            break
        if ctx.over:
            why = "RSS past the limit"
            break
        await asyncio.sleep(0.25)
    states = scrapers.states()
    figure.why = why if why == "RSS past the limit" or len(scrapers.sockets) > states["waiting"] else NO_ANSWER
    figure.reached.append(f"{scrapers.describe()} ({figure.why})")


# -- d: ingest at its caps ------------------------------------------------------------


async def _grpc_exports(ctx: Context, calls: int, body: bytes, gzipped: int, statuses: Counter[str]) -> None:
    """``calls`` concurrent gRPC exports of ``body`` (the first ``gzipped`` compressed)."""
    port = ctx.process.ports["OTLP/gRPC"]
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(4)]
    metadata = (("authorization", f"Bearer {ctx.token}"),) if ctx.token else None

    async def one(i: int) -> None:
        export = channels[i % len(channels)].unary_unary(f"/{SERVICE}/Export")
        compression = grpc.Compression.Gzip if i < gzipped else grpc.Compression.NoCompression
        try:
            await export(body, timeout=60, metadata=metadata, compression=compression)
            statuses["OK"] += 1
        except grpc.aio.AioRpcError as exc:
            statuses[exc.code().name] += 1

    try:
        await asyncio.gather(*(one(i) for i in range(calls)))
    finally:
        for channel in channels:
            await channel.close()


GRPC_GZIP = 4
"""gRPC exports per round sent gzip (the client compresses each one: about half a second of CPU)."""


def at_once(config: Config) -> tuple[int, int]:
    """Requests sent at once over HTTP and over gRPC: what the in-flight caps admit, plus a few."""
    receiver = config.receiver
    settings = ReceiverSettings(SpanSelection(), receiver.max_body_bytes)
    return (receiver.max_inflight_bytes // receiver.max_body_bytes + 2,
            concurrent_rpcs(settings, ListenerLimits.from_config(receiver)) + 4)


async def drive_ingest(ctx: Context, figure: PhaseFigure, shapes: Sequence[str] = ()) -> None:
    """For each HTTP shape (those named in ``shapes``, else all): ``at_once`` requests of it and,
    once they are read, a round of ``at_once`` gRPC exports (``GRPC_GZIP`` of them gzip), whose
    bodies wait for a decoding turn while the HTTP bodies are decoded."""
    http_at_once, grpc_at_once = at_once(ctx.config)
    http: dict[str, Counter[int]] = {}
    grpc_statuses: Counter[str] = Counter()
    rounds = 0
    for shape, path, body, headers in ctx.bodies.http_shapes():
        if shapes and shape not in shapes:
            continue
        posts = asyncio.gather(*(ctx.post(path, body, headers) for _ in range(http_at_once)))
        await asyncio.sleep(0.3)
        await _grpc_exports(ctx, grpc_at_once, ctx.bodies.protobuf, GRPC_GZIP, grpc_statuses)
        rounds += 1
        http.setdefault(shape, Counter()).update(await posts)
        if ctx.exited:
            break
    unanswered = [shape for shape, c in http.items() if not sum(n for status, n in c.items() if status)]
    if unanswered or not grpc_statuses:
        ctx.run.problems.append(f"{figure.name}: no answer to {', '.join(unanswered) or 'any gRPC export'}")
    figure.reached.append(f"HTTP {http_at_once} at once: " + "; ".join(f"{shape} {dict(c)}" for shape, c in http.items()))
    figure.reached.append(
        f"gRPC {grpc_at_once} at once ({GRPC_GZIP} gzip) x {rounds}: {dict(grpc_statuses)}; "
        f"{ctx.bodies.max_body / MiB:.0f} MiB bodies (gzip: protobuf {len(ctx.bodies.protobuf_gzip) / MiB:.2f} MiB, "
        f"JSON {len(ctx.bodies.json_objects_gzip) / MiB:.2f} MiB)"
    )


class SlowSenders:
    """HTTP connections that each declare ``Content-Length: max_body_bytes`` and send a byte a second."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.sockets: list[socket.socket] = []
        self.failed = 0
        self._task: asyncio.Task[None] | None = None

    async def open(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        port = self.ctx.process.ports["OTLP/HTTP"]
        auth = f"Authorization: Bearer {self.ctx.token}\r\n" if self.ctx.token else ""
        body = self.ctx.bodies.protobuf
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n{auth}"
            f"Content-Length: {self.ctx.config.receiver.max_body_bytes}\r\n\r\n"
        ).encode() + body[:1]
        for _ in range(n):
            sock = socket.socket()
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, ("127.0.0.1", port))
                await loop.sock_sendall(sock, head)
            except OSError:
                sock.close()
                self.failed += 1
                continue
            self.sockets.append(sock)

        async def trickle() -> None:
            offset = 1
            while True:
                await asyncio.sleep(1.0)
                for sock in self.sockets:
                    with contextlib.suppress(OSError):
                        sock.send(body[offset:offset + 1])
                offset += 1

        self._task = asyncio.create_task(trickle())

    def held(self) -> int:
        """Connections still waiting for their answer (ragmon neither answered nor closed them)."""
        return sum(_peek(s) == "waiting" for s in self.sockets)

    async def close(self) -> None:
        await cancel(self._task)
        for sock in self.sockets:
            sock.close()
