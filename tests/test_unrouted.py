"""OTLP sent to a wrong path or port is answered with the URL to use, counted and logged once per
path per minute (``ragmon.net.routes``): the most common set-up mistake is never a bare 404."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator

import pytest
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.config import Config, MetricsConfig, ReceiverConfig
from ragmon.net.routes import MAX_PATHS
from ragmon.sidecar.wiring import Sidecar

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def running() -> Iterator[tuple[Sidecar, LoopThread, FakeClock]]:
    clock = FakeClock()
    config = Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0"))
    with sidecar_thread(config, clock) as (car, loop):
        yield car, loop, clock


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _unrouted(car: Sidecar) -> dict[tuple[str, str], float]:
    v = samples(scrape(car.ports.metrics))
    return {
        (listener, reason): value(v, "ragmon_http_requests_unrouted_total", listener=listener, reason=reason)
        for listener in ("metrics", "otlp_http") for reason in ("unknown_path", "wrong_method")
    }


def test_wrong_paths_and_ports_are_answered_with_the_url_to_use_and_counted(running: tuple[Sidecar, LoopThread, FakeClock]) -> None:
    car, _, _ = running
    otlp, metrics = f"http://127.0.0.1:{car.ports.http}", f"http://127.0.0.1:{car.ports.metrics}"
    traces = f"send OTLP/HTTP traces to {otlp}/v1/traces"
    assert _unrouted(car) == {(l, r): 0.0 for l in ("metrics", "otlp_http") for r in ("unknown_path", "wrong_method")}
    for path in ("/", "/v1/trace", "/v1/traces/"):
        status, _, body = post(otlp + path, b"", PB)
        assert (status, body.decode()) == (404, f"no such path: {traces} (user feedback: {otlp}/v1/feedback)\n"), path
    assert _get(otlp + "/v1/traces") == (405, f"GET is not served here: POST OTLP/HTTP traces (protobuf or JSON) to {otlp}/v1/traces\n".encode())
    status, _, body = post(metrics + "/v1/traces", b"", PB)
    assert (status, body.decode()) == (404, f"this is ragmon's metrics port: {traces}\n")
    status, _, body = post(metrics + "/v1/feedback", b"", PB)
    assert (status, body.decode()) == (404, f"this is ragmon's metrics port: send OTLP/HTTP traces to {otlp}/v1/feedback\n")
    assert _get(metrics + "/metric") == (
        404, f"no such path: this port serves {metrics}/metrics, /healthz, /readyz and / (the status page)\n".encode())
    status, _, _ = post(metrics + "/metrics", b"", PB)
    assert status == 405
    assert _unrouted(car) == {
        ("otlp_http", "unknown_path"): 3.0, ("otlp_http", "wrong_method"): 1.0,
        ("metrics", "unknown_path"): 3.0, ("metrics", "wrong_method"): 1.0,
    }
    assert post(otlp + "/v1/traces", b"", PB)[0] == 200  # the right path is untouched


def _otlp_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "on the OTLP/HTTP port" in r.getMessage()]


def test_each_path_is_logged_once_a_minute_with_what_was_held_back(
    running: tuple[Sidecar, LoopThread, FakeClock], caplog: pytest.LogCaptureFixture,
) -> None:
    car, _, clock = running
    otlp = f"http://127.0.0.1:{car.ports.http}"
    caplog.set_level(logging.WARNING, logger="ragmon")
    for _ in range(3):
        post(otlp + "/v1/trace", b"", PB)
    post(otlp + "/", b"", PB)
    lines = _otlp_lines(caplog)
    assert [line.split(" (from ")[0] for line in lines] == [
        "404 for POST '/v1/trace' on the OTLP/HTTP port", "404 for POST '/' on the OTLP/HTTP port"]
    assert lines[0].endswith(f"send OTLP/HTTP traces to {otlp}/v1/traces (user feedback: {otlp}/v1/feedback)")
    caplog.clear()
    clock.now += 59.0
    post(otlp + "/v1/trace", b"", PB)
    assert not [r for r in caplog.records if "/v1/trace'" in r.getMessage()]
    clock.now += 1.0
    post(otlp + "/v1/trace", b"", PB)
    [line] = [r.getMessage() for r in caplog.records if "/v1/trace'" in r.getMessage()]
    assert line.endswith("(and 3 more since the last such line)")


def test_paths_from_traffic_share_one_line_past_the_cap(
    running: tuple[Sidecar, LoopThread, FakeClock], caplog: pytest.LogCaptureFixture,
) -> None:
    car, _, _ = running
    otlp = f"http://127.0.0.1:{car.ports.http}"
    caplog.set_level(logging.WARNING, logger="ragmon")
    for i in range(MAX_PATHS + 10):
        post(f"{otlp}/p{i}", b"", PB)
    lines = _otlp_lines(caplog)
    assert len(lines) == MAX_PATHS + 1  # one per kept path, then one for every other path
    assert len(car.unrouted._paths["otlp_http"]) == MAX_PATHS
    long = "/" + "x" * 500
    caplog.clear()
    car.unrouted._paths["otlp_http"].clear()
    post(otlp + long, b"", PB)
    [line] = _otlp_lines(caplog)
    assert "'/" + "x" * 119 + "…'" in line and "x" * 121 not in line
