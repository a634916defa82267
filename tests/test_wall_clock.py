"""A wall-clock step (NTP, a VM resumed) changes nothing ragmon computes: deadlines, windows and
budgets follow the monotonic clock; the wall clock only stamps exemplars and ``_created``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from net_helpers import wait_until
from server_helpers import LoopThread
from test_sidecar import FakeClock, samples, scrape, send_rag_traces, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, ReceiverConfig


class JumpingWall:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def _sidecar(clock: FakeClock, wall: JumpingWall) -> Iterator[Sidecar]:
    loop = LoopThread()
    config = Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0"))

    async def start() -> Sidecar:
        car = Sidecar(config, clock=clock, environ={}, wall=wall)
        await car.start()
        return car

    car = loop.run(start())
    try:
        yield car
    finally:
        loop.run(car.stop(timeout=10))
        loop.close()


def test_wall_clock_steps_change_no_value_and_drive_no_deadline() -> None:
    clock, wall = FakeClock(), JumpingWall()
    with _sidecar(clock, wall) as car:
        url = f"http://127.0.0.1:{car.ports.http}/v1/traces"
        for step, jump in enumerate((-86_400.0, 365 * 86_400.0, -10 * 365 * 86_400.0), start=1):
            send_rag_traces(HttpExporter(endpoint=url, timeout=10), "svc")
            wait_until(lambda: car.assembler.stats().spans_held == 9)
            wall.now += jump  # the wall clock steps a day back, a year on, ten years back ...
            scrape(car.ports.metrics)
            assert car.pipeline.stats().records == 3 * (step - 1)  # ... and no trace finishes by it
            clock.now += 3.0  # the monotonic clock passes the grace
            wait_until(lambda: car.pipeline.stats().records == 3 * step)
        v = samples(scrape(car.ports.metrics))
        src = {"service": "svc", "variant": "B", "source": "label"}
        assert value(v, "ragmon_traces_total", service="svc", variant="B") == 9
        assert value(v, "ragmon_retrieval_mrr", **src, window="5m") == 0.5
        assert value(v, "ragmon_window_samples", **src, metric="retrieval_mrr", window="5m") == 9
        families = list(parse_openmetrics(scrape(car.ports.metrics, openmetrics=True)))  # still valid
        exemplars = [s.exemplar for f in families for s in f.samples if s.exemplar is not None]
        assert exemplars and all(e.timestamp is not None for e in exemplars)
