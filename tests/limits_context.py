"""What the drivers of tests/shipped_limits.py share: the ``Context`` of a run (the process,
its configuration, memory, an HTTP session, the bodies), ragmon's own gauges read through
/metrics's ``name[]`` filter, and ``until``, the loop that fills a bound."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from limits_bodies import Bodies
from limits_configs import MiB
from limits_memory import Memory, Run
from process_helpers import RagmonProcess
from ragmon.config import Config


async def read_metrics(session: aiohttp.ClientSession, port: int, names: Sequence[str], timeout: float = 30.0) -> dict[str, float]:
    """The samples of the families ``names`` (``name{label="v",…}`` -> value), read with
    /metrics's ``name[]`` filter; empty if /metrics cannot be read."""
    query = "&".join(f"name[]={n}" for n in names)
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics?{query}", timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            text = await response.text()
            if response.status != 200:
                return {}
    except (aiohttp.ClientError, TimeoutError):
        return {}
    samples: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    except ValueError:
        return {}
    return samples


HELD = (
    "ragmon_feedback_traces_bytes", "ragmon_span_bytes_pending", "ragmon_queue_bytes", "ragmon_judge_queue",
    "ragmon_judge_queue_bytes", "ragmon_judge_in_flight", "ragmon_scrape_bytes", "ragmon_scrapes_dropped_total",
)
"""Gauges of what ragmon holds (those its version exports), read at the end of each phase."""


def describe_held(samples: Mapping[str, float]) -> str:
    """``held: …`` from the ``HELD`` samples present (bytes in MiB)."""
    parts = []
    for name in HELD:
        if any(key == name or key.startswith(name + "{") for key in samples):
            value = total(samples, name)
            short = name.removeprefix("ragmon_")
            parts.append(f"{short} {value / MiB:.1f} MiB" if "bytes" in name else f"{short} {value:.0f}")
    return "held: " + (", ".join(parts) if parts else "(/metrics not read)")


def total(samples: Mapping[str, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        v for key, v in samples.items()
        if (key == name or key.startswith(name + "{")) and all(w in key for w in wanted)
    )


@dataclass
class Context:
    """What every driver needs."""

    config: Config
    process: RagmonProcess
    memory: Memory
    session: aiohttp.ClientSession
    bodies: Bodies
    token: str
    ceiling: int
    """RSS past which a phase stops growing its bound (the container's limit by default)."""
    deadline: float
    """Monotonic time past which the drivers stop (a run must stay short)."""
    run: Run

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.process.ports['OTLP/HTTP']}"

    @property
    def metrics_port(self) -> int:
        return self.process.ports["metrics"]

    def headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        return {**extra, **({"Authorization": f"Bearer {self.token}"} if self.token else {})}

    @property
    def over(self) -> bool:
        """RSS is past the ceiling."""
        return self.memory.rss > self.ceiling

    @property
    def exited(self) -> bool:
        return self.process.process.poll() is not None

    async def gauges(self, *names: str) -> dict[str, float]:
        """Samples by their names (a counter's end in ``_total``)."""
        return await read_metrics(self.session, self.metrics_port, names)

    async def post(self, path: str, body: bytes, headers: Mapping[str, str], timeout: float = 60.0) -> int:
        """POST and read the answer; its status (0: no answer)."""
        try:
            async with self.session.post(self.http + path, data=body, headers=self.headers(headers),
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return 0

    async def export(self, body: bytes, *, tries: int = 120) -> int:
        """POST an OTLP protobuf body as an exporter does: retried after a 503 (Retry-After)."""
        status = 0
        for _ in range(tries):
            status = await self.post("/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            if status not in (0, 429, 503) or time.monotonic() > self.deadline or self.over or self.exited:
                return status
            await asyncio.sleep(0.25)
        return status


async def until(ctx: Context, read: Callable[[], Awaitable[float]], step: Callable[[], Awaitable[None]], *,
                done: Callable[[], bool], flat_seconds: float, limit_seconds: float) -> tuple[float, str]:
    """Run ``step`` until ``done()`` (after a ``read``), ``read()`` has not grown for
    ``flat_seconds``, RSS passes the ceiling or ``limit_seconds`` pass; the last value read and
    why it stopped."""
    best, since, started = -1.0, time.monotonic(), time.monotonic()
    while True:
        await step()
        value = await read()
        now = time.monotonic()
        if done():
            return value, "at its cap"
        if value > best:
            best, since = value, now
        elif now - since > flat_seconds:
            return value, "stopped growing"
        if ctx.over:
            return value, "RSS past the limit"
        if ctx.exited:
            return value, "ragmon exited"
        if now - started > limit_seconds or now > ctx.deadline:
            return value, "out of time"


async def wait_scored(ctx: Context, traces: int, timeout: float = 30.0) -> float:
    """Wait until ``ragmon_traces_total`` reaches ``traces``; its value."""
    deadline = time.monotonic() + timeout
    seen = 0.0
    while time.monotonic() < deadline:
        seen = total(await ctx.gauges("ragmon_traces_total"), "ragmon_traces_total")
        if seen >= traces:
            break
        await asyncio.sleep(0.5)
    return seen


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel a driver's background task and wait for it."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
