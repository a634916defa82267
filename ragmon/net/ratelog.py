"""Rate-limited warnings for bad input: one line per reason per interval, never a traceback.

A flood of bad requests (hostile framing, wrong tokens, oversized bodies) must not become a
flood of log lines. ``RateLimitedLog.warn`` writes at most one WARNING line per reason per
``interval``; the next line for that reason says how many were held back since the last one.
Callers pass a reason, the peer address and a fixed description: never request content or
header values (they may carry tokens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RateLimitedLog", "format_peer", "held_back"]

DEFAULT_INTERVAL = 10.0
"""Seconds between two lines for the same reason."""


def format_peer(peer: object) -> str:
    """``("10.0.0.1", 5000)`` -> ``"10.0.0.1:5000"``; anything else as text (``"?"`` when unknown)."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return "?" if peer is None else str(peer)


@dataclass(slots=True)
class _Reason:
    last: float
    held: int = 0


@dataclass
class RateLimitedLog:
    """One WARNING line per reason per ``interval`` seconds; counts the lines it held back."""

    logger: logging.Logger
    interval: float = DEFAULT_INTERVAL
    clock: Callable[[], float] = time.monotonic
    _reasons: dict[str, _Reason] = field(default_factory=dict, init=False, repr=False)

    def admit(self, reason: str) -> int | None:
        """None when a line for ``reason`` went out within the interval (this one is held back
        and counted); else the number held back since the last line, and the clock restarts."""
        now = self.clock()
        state = self._reasons.get(reason)
        if state is not None and now - state.last < self.interval:
            state.held += 1
            return None
        self._reasons[reason] = _Reason(now)
        return 0 if state is None else state.held

    def warn(self, reason: str, peer: str, detail: str) -> bool:
        """Log ``reason`` from ``peer`` unless a line for it went out within the interval;
        True when a line was written."""
        held = self.admit(reason)
        if held is None:
            return False
        self.logger.warning("rejected %s from %s: %s%s", reason, peer, detail, held_back(held))
        return True


def held_back(count: int) -> str:
    """The suffix of a line that stands for ``count`` held-back ones (empty for 0)."""
    return f" (and {count} more since the last such line)" if count else ""
