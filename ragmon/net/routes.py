"""Requests no handler serves (a wrong path or method): counted, answered and logged with where to go.

Sending OTLP to ``:4318/``, ``:4318/v1/trace`` or the metrics port is the most common set-up
mistake, and a bare 404 leaves it unseen. Each listening port's app gets ``Unrouted.middleware``:
such a request is counted in ``ragmon_http_requests_unrouted_total{listener,reason}``, answered
with its status (404 or 405) and a one-line hint naming the URL to use, and logged at most once
per path and listener per ``interval`` (paths from traffic: at most ``MAX_PATHS`` kept apart,
the rest share one line).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.metrics_core import Metric

from ragmon import catalogue as cat
from ragmon.net.ratelog import RateLimitedLog, format_peer, held_back

__all__ = ["LISTENERS", "REASONS", "WILDCARDS", "Hint", "Unrouted", "local_base"]

LISTENERS = ("metrics", "otlp_http")
REASONS = ("unknown_path", "wrong_method")
MAX_PATHS = 64
"""Distinct paths logged apart per listener; later ones share one rate-limited line."""
MAX_PATH_CHARS = 120
"""A logged path is cut here (it comes from traffic)."""
INTERVAL = 60.0
"""Seconds between two log lines for the same path on the same listener."""

Hint = Callable[[web.Request, int], str]
"""What a misrouted request (and its status, 404 or 405) should have been: one line naming the URL to use."""


WILDCARDS = frozenset({"0.0.0.0", "::", ""})
"""Listen hosts that stand for every address: a URL names the one the client reached instead."""


def local_base(request: web.Request, port: int | None = None, host: str | None = None) -> str:
    """``http://host:port`` of the address the client reached (the socket's, never the Host
    header's), with another ``port`` and a listen ``host`` (unless a wildcard) when given."""
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    reached, own = (str(sockname[0]), int(sockname[1])) if isinstance(sockname, tuple) and len(sockname) >= 2 else ("localhost", 0)
    name = reached if host is None or host in WILDCARDS else host
    name = f"[{name}]" if ":" in name else name
    return f"http://{name}:{port if port is not None else own}"


@dataclass
class Unrouted:
    """Counts and logs the requests no route serves, for every listener of one sidecar."""

    log: logging.Logger
    interval: float = INTERVAL
    clock: Callable[[], float] = time.monotonic
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(listener, reason) -> requests."""
    _lines: RateLimitedLog | None = field(default=None, init=False, repr=False)
    _paths: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False)

    def middleware(self, listener: str, hint: Hint) -> Middleware:
        """The aiohttp middleware of ``listener``: a request the router refuses (404, 405) is
        counted and answered with ``hint``'s line; every other request passes untouched."""

        @web.middleware
        async def unrouted(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        ) -> web.StreamResponse:
            refused = request.match_info.http_exception
            if refused is None or refused.status not in (404, 405):
                return await handler(request)
            reason = "unknown_path" if refused.status == 404 else "wrong_method"
            self.counts[(listener, reason)] += 1
            line = hint(request, refused.status)
            self._note(listener, request, refused.status, line)
            return web.Response(status=refused.status, text=line + "\n", headers=refused.headers)

        return unrouted

    def _note(self, listener: str, request: web.Request, status: int, line: str) -> None:
        if self._lines is None:
            self._lines = RateLimitedLog(self.log, self.interval, self.clock)
        seen = self._paths.setdefault(listener, set())
        path = request.path
        if path not in seen and len(seen) < MAX_PATHS:
            seen.add(path)
        key = f"{listener} {path if path in seen else '(other paths)'}"
        held = self._lines.admit(key)
        if held is None:
            return
        shown = path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "…"
        self.log.warning(
            "%d for %s %r on the %s port (from %s): %s%s", status, request.method, shown,
            "metrics" if listener == "metrics" else "OTLP/HTTP", format_peer(request.remote), line, held_back(held),
        )

    def collect(self) -> Iterator[Metric]:
        """``ragmon_http_requests_unrouted_total``, every (listener, reason) at 0 before the first."""
        family = cat.HTTP_REQUESTS_UNROUTED.empty()
        for listener in LISTENERS:
            for reason in REASONS:
                family.add_metric([listener, reason], self.counts[(listener, reason)])
        yield family
