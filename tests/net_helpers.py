"""Raw sockets for hostile clients: exact bytes out, whatever comes back."""

from __future__ import annotations

import logging
import resource
import socket
import time
from collections.abc import Callable
from typing import TypeVar


T = TypeVar("T")


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` to 127.0.0.1:``port`` and read until the server closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_all(sock, timeout)


def read_all(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read until EOF, a reset or ``timeout`` seconds."""
    sock.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def status(response: bytes) -> int:
    """The status code of a raw HTTP response (0 when there is none)."""
    parts = response.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """True when the server closes ``sock`` within ``timeout`` (anything it sent is skipped)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def wait_until(
    probe: Callable[[], T],
    timeout: float = 15.0,
    *,
    what: str = "the condition",
    interval: float = 0.02,
    details: Callable[[], object] | None = None,
    tolerate: tuple[type[Exception], ...] = (),
) -> T:
    """The tests' one wait: poll ``probe`` every ``interval`` seconds until it returns a true
    value, and return that value; after ``timeout`` seconds, ``AssertionError`` naming ``what``
    (with ``details()``, and the last exception tolerated). Exceptions of the ``tolerate``
    types count as "not yet" (a server not up yet); any other is raised at once."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
        except tolerate as exc:
            last_error, value = exc, None  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:g}s waiting for {what}"
            if last_error is not None:
                message += f" (last error: {last_error!r})"
            if details is not None:
                message += f"; {details()}"
            raise AssertionError(message)
        time.sleep(interval)


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards ``wanted`` (up to the hard limit); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def problem_lines(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """ragmon's records at WARNING or above (not asyncio's "Task was destroyed but it is
    pending!" about another test's event loop, which the collector may free during this one)."""
    return [r for r in records if r.levelno >= logging.WARNING and (r.name == "ragmon" or r.name.startswith("ragmon."))]


def has_traceback(records: list[logging.LogRecord]) -> bool:
    return any(r.exc_info or r.exc_text or "Traceback" in r.getMessage() for r in records)
