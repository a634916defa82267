"""A family whose samples take long to build (300 ms) does not hold the event loop: they are
built in the scrape's worker thread, so /healthz answers meanwhile far sooner than that."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from ragmon.export.series import DeferredFamily
from ragmon.export.server import metrics_app

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

SLOW = 0.3


def _slow_fill(family: GaugeMetricFamily) -> None:
    time.sleep(SLOW)
    family.add_metric([], 7.0)


class _SlowCollector:
    def collect(self) -> list[DeferredFamily[GaugeMetricFamily]]:
        return [DeferredFamily(GaugeMetricFamily("slow_gauge", "built slowly"), _slow_fill)]


def test_a_slow_family_does_not_hold_the_loop_while_a_scrape_renders() -> None:
    async def run() -> tuple[str, float, list[float]]:
        app = metrics_app(_SlowCollector(), token="", status_page=lambda: "", ready=lambda: True)
        async with TestServer(app) as server, ClientSession() as client:
            scrape = asyncio.create_task(client.get(server.make_url("/metrics")))
            await asyncio.sleep(0.05)
            waits: list[float] = []
            while not scrape.done():
                start = time.perf_counter()
                async with client.get(server.make_url("/healthz")) as probe:
                    assert probe.status == 200
                waits.append(time.perf_counter() - start)
                await asyncio.sleep(0.02)
            started = time.perf_counter()
            response = await scrape
            text = await response.text()
            return text, time.perf_counter() - started, waits

    text, _, waits = asyncio.run(run())
    assert [s.value for f in text_string_to_metric_families(text) for s in f.samples] == [7.0]
    assert len(waits) >= 3  # probes were answered while the slow family was being built
    assert max(waits) < SLOW / 2
