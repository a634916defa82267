"""aiohttp listeners behind limits: a connection cap, a header timeout, a keep-alive timeout.

``Listener`` serves an aiohttp app with ``loop.create_server`` through a protocol that wraps
aiohttp's own (``AppRunner.server`` is the protocol factory). The wrapper:

- caps open connections: at the cap, a new connection takes the place of the one idle the
  longest (no request in a handler), as nginx reuses idle connections; when none is idle, the
  new one is answered 503 and closed at once. Both are counted.
- cuts a connection that has not delivered a request's line and headers within
  ``header_timeout`` of connecting, or of the first byte of a following request (slowloris);
- leaves idle keep-alive connections to aiohttp's ``keepalive_timeout`` (``idle_timeout``).

aiohttp's server logger is replaced by one that turns malformed HTTP (a bad request line, bad
chunked encoding, oversized headers, TLS or garbage bytes) into one rate-limited WARNING line
with the peer address, never a traceback; errors of ragmon's own still log a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http import HttpProcessingError
from prometheus_client.core import Metric

from ragmon.config import ReceiverConfig
from ragmon.errors import ListenError
from ragmon import catalogue as cat
from ragmon.net.ratelog import RateLimitedLog, format_peer

__all__ = [
    "BACKLOG", "ByteBudget", "Listener", "ListenerLimits", "ListenerStats", "CLOSE_REASONS", "Reservation", "SLOW_SENDER_SECONDS",
    "check_free", "listen_error",
]

BACKLOG = 512
"""Listen backlog: also the most connections one accept burst opens before any is closed."""
CLOSE_REASONS = ("header_timeout", "evicted", "malformed")
"""``reason`` values of ``ragmon_connections_closed_total`` (exported at 0)."""
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: 21\r\n\r\ntoo many connections\n"
)
_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: 23\r\n\r\nrequest head too slow.\n"
)
_MALFORMED = {
    "BadHttpMethod": "not HTTP (a bad method; TLS to a plain-HTTP port?)",
    "BadStatusLine": "a bad request line",
    "LineTooLong": "a request line or header too long",
    "InvalidHeader": "an invalid header",
    "InvalidURLError": "an invalid URL",
    "TransferEncodingError": "bad chunked encoding",
    "ContentLengthError": "a bad Content-Length",
    "ContentEncodingError": "a bad Content-Encoding",
}
"""Fixed descriptions of aiohttp's parse errors: their messages quote the client's bytes."""


_RECEIVER = ReceiverConfig()
"""Where ``ListenerLimits``' defaults come from."""


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """Per-listener limits (``[receiver]`` keys; the metrics server has its own cap)."""

    max_connections: int = _RECEIVER.max_connections
    header_timeout: float = _RECEIVER.header_timeout
    body_timeout: float = _RECEIVER.body_timeout
    idle_timeout: float = _RECEIVER.idle_timeout
    max_inflight_bytes: int = _RECEIVER.max_inflight_bytes

    @classmethod
    def from_config(cls, receiver: ReceiverConfig, max_connections: int | None = None) -> ListenerLimits:
        """The receiver's limits; ``max_connections`` overrides its cap (the metrics server's)."""
        return cls(
            max_connections=receiver.max_connections if max_connections is None else max_connections,
            header_timeout=receiver.header_timeout,
            body_timeout=receiver.body_timeout,
            idle_timeout=receiver.idle_timeout,
            max_inflight_bytes=receiver.max_inflight_bytes,
        )


@dataclass(slots=True)
class ListenerStats:
    """Connection counters of every listener, keyed by listener name."""

    open: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    closed: Counter[tuple[str, str]] = field(default_factory=Counter)
    names: list[str] = field(default_factory=list)

    def collect(self) -> Iterable[Metric]:
        """``ragmon_connections_{open,refused_total,closed_total}`` (for a ``StatsCollector``)."""
        opened = cat.CONNECTIONS_OPEN.empty()
        refused = cat.CONNECTIONS_REFUSED.empty()
        closed = cat.CONNECTIONS_CLOSED.empty()
        for name in self.names:
            opened.add_metric([name], self.open[name])
            refused.add_metric([name], self.refused[name])
            for reason in CLOSE_REASONS:
                closed.add_metric([name, reason], self.closed[(name, reason)])
        return (opened, refused, closed)


SLOW_SENDER_SECONDS = 1.0
"""A body reserved before it arrives (a gRPC message: its size is known only once whole) and
still not arrived after this long loses its reservation when another request needs the bytes."""


class Reservation:
    """Bytes reserved for a body not yet received (``ByteBudget.reserve``)."""

    __slots__ = ("bytes", "since", "cut", "_on_cut")

    def __init__(self, n: int, since: float, on_cut: Callable[[], None]) -> None:
        self.bytes = n
        self.since = since
        self.cut = False
        """Whether another request took the bytes back (the body must be refused)."""
        self._on_cut = on_cut

    def take_back(self) -> int:
        """Cut the reservation: its bytes, now free, and the holder told (``on_cut``)."""
        n, self.bytes, self.cut = self.bytes, 0, True
        self._on_cut()
        return n


class ByteBudget:
    """Request bytes held at once across connections and protocols (``max_inflight_bytes``):
    bodies charged as their bytes arrive, what decoding them takes (``ragmon.receivers.weight``),
    and reservations for bodies whose size is known only once whole (gRPC messages).

    A reservation whose body has not arrived within ``slow_after`` seconds is cut when another
    request needs the bytes: a client that declares much and sends little cannot hold ingest
    for others. ``clock`` is monotonic seconds.
    """

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic,
                 slow_after: float = SLOW_SENDER_SECONDS) -> None:
        self.limit = limit
        self.used = 0
        self._clock = clock
        self._slow_after = slow_after
        self._waiting: dict[Reservation, None] = {}
        """Reservations for bodies still arriving, oldest first."""

    def take(self, n: int, mine: int = 0) -> bool:
        """Charge ``n`` bytes to a request already holding ``mine``; False past the limit, once
        slow reservations have been cut to make room. A request alone (nothing charged but its
        own bytes) may always proceed: ``max_body_bytes`` bounds it."""
        if self.used > mine and self.used + n > self.limit and not self._make_room(n):
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        """Return ``n`` charged bytes."""
        self.used -= n

    def reserve(self, n: int, on_cut: Callable[[], None]) -> Reservation | None:
        """Reserve ``n`` bytes for a body that has not arrived (``take``'s rule); ``on_cut`` is
        called if the reservation is cut. ``settle`` it once the body is whole, ``release`` it
        at the end."""
        if not self.take(n):
            return None
        reservation = Reservation(n, self._clock(), on_cut)
        self._waiting[reservation] = None
        return reservation

    def settle(self, reservation: Reservation, n: int) -> bool:
        """The body arrived with ``n`` bytes: charge those instead (False, nothing charged, if
        the reservation was cut or ``n`` does not fit)."""
        self._waiting.pop(reservation, None)
        if reservation.cut:
            return False
        self.used -= reservation.bytes
        reservation.bytes = 0
        if not self.take(n):
            return False
        reservation.bytes = n
        return True

    def release(self, reservation: Reservation) -> None:
        """Return whatever ``reservation`` still holds."""
        self._waiting.pop(reservation, None)
        self.used -= reservation.bytes
        reservation.bytes = 0

    def _make_room(self, n: int) -> bool:
        """Cut reservations older than ``slow_after``, oldest first, until ``n`` more bytes fit."""
        now = self._clock()
        for reservation in list(self._waiting):
            if now - reservation.since < self._slow_after:
                break
            del self._waiting[reservation]
            self.used -= reservation.take_back()
            if self.used + n <= self.limit:
                return True
        return False


def _client_error(error: BaseException | None) -> str | None:
    """The name of the HTTP parse error behind ``error`` (its cause chain), if it is one."""
    for _ in range(4):
        if error is None:
            return None
        if isinstance(error, HttpProcessingError):
            return type(error).__name__
        if isinstance(error, web.RequestPayloadError) and error.__cause__ is None:
            return "TransferEncodingError"
        error = error.__cause__ or error.__context__
    return None


class _ServerLog(logging.Logger):
    """aiohttp's ``logger`` for one listener: client parse errors become a rate-limited line,
    a client gone mid-request none; anything else goes to ``aiohttp.server`` as before."""

    def __init__(self, listener: Listener) -> None:
        super().__init__("aiohttp.server", logging.DEBUG)
        self._listener = listener
        self._forward = logging.getLogger("aiohttp.server")

    def handle(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        parse_error = _client_error(error)
        if parse_error is not None:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else None
            self._listener.malformed(parse_error, format_peer(peer))
        elif isinstance(error, ConnectionError):
            return
        elif self._forward.isEnabledFor(record.levelno):
            self._forward.handle(record)


class _Guard(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: admission, header timeout, idle order."""

    __slots__ = ("_listener", "inner", "transport", "_timer", "active")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.active = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.inner = self._listener.admit(self)
        if self.inner is None:
            transport.write(_REFUSAL)
            transport.close()
            return
        self.arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if not self.active:
            self._listener.touch(self)
            if self._timer is None:
                self.arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.inner is None else self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.inner is not None:
            self._listener.forget(self)
            self.inner.connection_lost(exc)
            self.inner = None

    def arm(self) -> None:
        """Start the header timeout (at connect, or at the first byte after a response)."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._listener.limits.header_timeout, self._expired)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.active or self.transport is None or self.transport.is_closing():
            return
        self._listener.timed_out(self)
        self.transport.write(_TIMEOUT)
        self.transport.close()

    def peer(self) -> str:
        return format_peer(None if self.transport is None else self.transport.get_extra_info("peername"))


class Listener:
    """One aiohttp app on one address, behind ``limits``; counts into ``stats`` as ``name``.

    ``app`` gains a middleware (so build the app, then the ``Listener``, then ``start``).
    ``handler_args`` go to aiohttp's ``AppRunner`` (e.g. ``auto_decompress=False``).
    """

    def __init__(
        self, name: str, app: web.Application, limits: ListenerLimits, stats: ListenerStats,
        log: RateLimitedLog, *, shutdown_timeout: float = 2.0, **handler_args: Any,
    ) -> None:
        self.name = name
        self.limits = limits
        self.stats = stats
        self.log = log
        self.port = 0
        if name not in stats.names:
            stats.names.append(name)
        self._guards: dict[object, _Guard] = {}
        """Admitted connections, by the aiohttp protocol each wraps."""
        self._idle: dict[_Guard, None] = {}
        """Admitted connections with no request in a handler, least recently active first."""
        self._server: asyncio.Server | None = None
        self._factory: Callable[[], asyncio.Protocol] | None = None
        app.middlewares.append(self._middleware())
        self._runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=limits.idle_timeout, logger=_ServerLog(self),
            shutdown_timeout=shutdown_timeout, lingering_time=2.0, **handler_args,
        )

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); returns the bound port."""
        await self._runner.setup()
        self._factory = self._runner.server
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Guard(self), host, port, backlog=BACKLOG)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    @property
    def connections(self) -> int:
        """Open connections right now."""
        return len(self._guards)

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections go on."""
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting, close idle connections, give requests in handlers the shutdown
        timeout, then close every connection."""
        self.stop_accepting()
        await self._runner.cleanup()
        for guard in list(self._guards.values()):
            guard.disarm()
            if guard.transport is not None:
                guard.transport.abort()

    # -- called by _Guard ---------------------------------------------------------------------

    def admit(self, guard: _Guard) -> asyncio.Protocol | None:
        """aiohttp's protocol for a new connection, or None when it must be refused. At the
        cap the connection idle the longest makes room, if there is one."""
        if len(self._guards) >= self.limits.max_connections:
            victim = next(iter(self._idle), None)
            if victim is None:
                self.stats.refused[self.name] += 1
                self.log.warn("connection", guard.peer(),
                              f"{self.name} is at max_connections ({self.limits.max_connections}), none idle")
                return None
            self.forget(victim)
            victim.disarm()
            self.stats.closed[(self.name, "evicted")] += 1
            self.log.warn("idle connection", victim.peer(),
                          f"closed for a new one: {self.name} is at max_connections ({self.limits.max_connections})")
            if victim.transport is not None:
                victim.transport.close()
        assert self._factory is not None
        inner = self._factory()
        self._guards[inner] = guard
        self._idle[guard] = None
        self.stats.open[self.name] += 1
        return inner

    def forget(self, guard: _Guard) -> None:
        if self._guards.pop(guard.inner, None) is not None:
            self.stats.open[self.name] -= 1
        self._idle.pop(guard, None)

    def touch(self, guard: _Guard) -> None:
        """``guard`` received bytes: it becomes the most recently active."""
        if guard in self._idle:
            del self._idle[guard]
            self._idle[guard] = None

    def timed_out(self, guard: _Guard) -> None:
        self.stats.closed[(self.name, "header_timeout")] += 1
        self.log.warn("header_timeout", guard.peer(), f"no complete request head within {self.limits.header_timeout:g}s")

    def malformed(self, error: str, peer: str) -> None:
        self.stats.closed[(self.name, "malformed")] += 1
        self.log.warn("malformed", peer, _MALFORMED.get(error, "a malformed request"))

    def _middleware(self) -> Any:
        """Marks a connection busy while a request is in a handler (not idle, no header timeout)."""

        @web.middleware
        async def busy(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        ) -> web.StreamResponse:
            guard = self._guards.get(request.protocol)
            if guard is None:
                return await handler(request)
            guard.active = True
            guard.disarm()
            self._idle.pop(guard, None)
            try:
                return await handler(request)
            finally:
                guard.active = False
                if guard.inner is not None:
                    self._idle[guard] = None

        return busy


def listen_error(setting: str, host: str, port: int, error: OSError) -> ListenError:
    """One line naming ``setting``, the address and why it cannot be listened on."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    why = {
        errno.EADDRINUSE: "is in use",
        errno.EACCES: "is not allowed (ports below 1024 need privileges)",
        errno.EADDRNOTAVAIL: "is not an address of this machine",
    }.get(error.errno or 0, f"cannot be listened on: {error.strerror or error}")
    return ListenError(f"{setting} {address} {why}")


def check_free(setting: str, host: str, port: int) -> None:
    """``ListenError`` when ``host:port`` cannot be listened on now (bound and let go at once, as
    a listener binds: address reuse on, so a closed connection's TIME_WAIT does not count)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"{setting} {host}:{port}: no such host ({exc.strerror})") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise listen_error(setting, host, port, exc) from None
