"""``ragmon run``: the sidecar as its own process. It tunes the collector, the allocator, the
GIL switch interval and the open-file limit, serves until SIGTERM or SIGINT, then stops
accepting, finishes the traces it holds, lingers for a final scrape, and exits 0."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from ragmon import __version__
from ragmon.config import Config
from ragmon.net.ratelog import RateLimitedLog, held_back
from ragmon.sidecar.openfiles import raise_open_files_limit
from ragmon.sidecar.wiring import DRAIN_TIMEOUT, Sidecar, shutdown_bound

__all__ = ["run", "tune_gc", "tune_malloc"]

log = logging.getLogger("ragmon")


_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _on_loop_error(limiter: RateLimitedLog) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An asyncio exception handler that logs each kind of error at most once per interval
    (out of file descriptors, asyncio would log every failed ``accept``)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "unhandled error in the event loop")
        held = limiter.admit(f"asyncio: {message}")
        if held is None:
            return
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in _RESOURCE_ERRORS:  # no traceback: not a bug
            log.error("%s: %s%s", message, error, held_back(held))
        else:
            loop.default_exception_handler({**context, "message": message + held_back(held)})

    return handle


async def _run(config: Config, files: str = "") -> int:
    stopping, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (hurry if stopping.is_set() else stopping).set()  # a second signal cuts the linger

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    sidecar = Sidecar(config, own_process=True)
    loop.set_exception_handler(_on_loop_error(RateLimitedLog(log)))
    try:
        await sidecar.start()
    except BaseException:
        await sidecar.stop(quiet=True)
        raise
    log.info("ragmon %s running: %s", __version__, "; ".join([*sidecar.summary, *([files] if files else [])]))
    worker = sidecar.worker
    signalled = asyncio.create_task(stopping.wait())
    await asyncio.wait({signalled, *([worker] if worker else [])}, return_when=asyncio.FIRST_COMPLETED)
    if worker is not None and worker.done():
        signalled.cancel()
        error = None if worker.cancelled() else worker.exception()
        log.error("the pipeline stopped unexpectedly: %r", error)
        await sidecar.stop()
        return 1
    started = loop.time()
    linger = config.metrics.linger
    log.info("stopping: no new requests; finishing the traces held (at most %.0fs)", shutdown_bound(linger))
    await sidecar.stop_ingest()
    await sidecar.drain(DRAIN_TIMEOUT)
    if linger > 0 and sidecar.ports.metrics is not None:
        log.info("shutdown: /metrics answers until a scrape has read the final values (at most %gs)", linger)
        scraped = await sidecar.linger(linger, hurry)
        log.info("shutdown: %s", "final values scraped" if scraped else "no scrape came; not waiting longer")
    await sidecar.close()
    log.info("stopped in %.1fs", loop.time() - started)
    return 0


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections in ``ragmon run`` (CPython's default: 700)."""


SWITCH_INTERVAL = 0.001
"""Seconds a thread holds the GIL while another waits for it, in ``ragmon run`` (CPython's
default: 0.005). A scrape renders in a worker thread; each time the event loop wakes (every
socket read and write of an OTLP request) it waits for the GIL at most this long."""


def tune_gc() -> None:
    """Collect less often: each span allocates a few short-lived objects, nearly all freed by
    reference counting; at CPython's default threshold the cycle collector took ~14% of the
    pipeline's time (bench/ingest.py). Objects alive at start-up (modules, config) are frozen
    out of every collection (the price table too, once it has loaded: ``Sidecar.own_process``).
    For ``ragmon run`` only: an embedding process keeps its own policy."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
"""glibc's ``mallopt`` parameters (malloc.h)."""
MALLOC_ARENAS = 2
MALLOC_MMAP_THRESHOLD = 128 * 1024
MALLOC_TRIM_THRESHOLD = 1024 * 1024


def tune_malloc() -> str:
    """Make the C allocator give freed memory back, for ``ragmon run`` (glibc only; elsewhere
    nothing changes). Request bodies, decoded batches and rendered scrapes are large and
    short-lived, and some are made in worker threads: with glibc's defaults each thread gets
    an arena of its own (up to 8 a core) and, once a large block has been freed, the threshold
    for mapping large blocks rises up to 32 MiB, so later ones come from the arenas and their
    freed pages stay in the process (peak RSS after a burst stayed high: docs/explanation/reliability.md).
    Fixed: ``MALLOC_ARENAS`` arenas, blocks from ``MALLOC_MMAP_THRESHOLD`` mapped (and unmapped
    when freed), free memory past ``MALLOC_TRIM_THRESHOLD`` at the top of the heap returned.
    The environment's ``MALLOC_*_`` variables win. Says what it did, for the start-up line."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "malloc as is"
    for option, value, variable in (
        (_M_ARENA_MAX, MALLOC_ARENAS, "MALLOC_ARENA_MAX"),
        (_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
        (_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_"),
    ):
        if variable not in os.environ and not mallopt(option, value):
            return "malloc as is"
    return f"malloc arenas {MALLOC_ARENAS}"


def run(config: Config) -> int:
    """``ragmon run``: serve until SIGTERM or SIGINT; returns the exit code."""
    malloc = tune_malloc()
    tune_gc()
    sys.setswitchinterval(SWITCH_INTERVAL)
    files = raise_open_files_limit()
    return asyncio.run(_run(config, f"{files}; {malloc}"))
