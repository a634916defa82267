"""Connections are files: the open-file limit ``ragmon run`` raises, and the connection caps
lowered to fit under it so ``/healthz`` can always accept."""

from __future__ import annotations

import logging
import resource

from ragmon.config import Config
from ragmon.net.listeners import BACKLOG

__all__ = ["RESERVED_FILES", "connection_caps", "open_files_limit", "raise_open_files_limit"]

log = logging.getLogger("ragmon")


RESERVED_FILES = 2 * BACKLOG + 128
"""Open files kept out of the connection caps' reach: an accept burst on each aiohttp listener
(asyncio accepts up to the backlog before a refused or evicted connection is closed), logs,
sockets to the judge, files."""


_NR_OPEN = 1 << 20
"""Linux's default ceiling on open files per process (``fs.nr_open``)."""


def open_files_limit() -> int | None:
    """The soft limit on open files; None when unlimited or unknown."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def connection_caps(config: Config, open_files: int | None) -> tuple[int, int]:
    """The connection caps of each OTLP receiver and of the metrics server: the configured
    ones, lowered (with a warning) when together they could use up ``open_files`` and leave
    /healthz unable to accept."""
    receiver, metrics = config.receiver.max_connections, config.metrics.max_connections
    if open_files is None or 2 * receiver + metrics + RESERVED_FILES <= open_files:
        return receiver, metrics
    room = max(open_files - RESERVED_FILES, 48)
    metrics_cap = min(metrics, max(16, room // 8))
    receiver_cap = min(receiver, max(16, (room - metrics_cap) // 2))
    log.warning(
        "the open-file limit (%d) is too low for receiver.max_connections = %d and "
        "metrics.max_connections = %d: using %d and %d (raise the limit: ulimit -n)",
        open_files, receiver, metrics, receiver_cap, metrics_cap)
    return receiver_cap, metrics_cap


def raise_open_files_limit() -> str:
    """Raise the soft limit on open files to the hard limit (connections are files); says what
    it is now, for the start-up line (a failure is logged as a warning)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = _NR_OPEN if hard == resource.RLIM_INFINITY else hard  # the kernel caps "unlimited"
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit: %s", exc)
        return f"open-file limit {open_files_limit() or 'unlimited'}"
    now = open_files_limit()
    shown = "unlimited" if now is None else str(now)
    return f"open-file limit {shown if now == soft else f'raised from {soft} to {shown}'}"
