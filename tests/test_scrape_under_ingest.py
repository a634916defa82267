"""Scrapes taken while OTLP posts keep arriving: each is a valid exposition (it parses, one
block per family) and no counter goes backwards from one scrape to the next."""

from __future__ import annotations

import re
import threading

from prometheus_client.parser import text_string_to_metric_families
from server_helpers import post, sidecar_thread
from test_scrape import _get, _spans_body
from test_sidecar import FakeClock

from ragmon.config import Config, MetricsConfig, ReceiverConfig


def _counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    names = re.findall(r"^# TYPE (\S+)", text, flags=re.MULTILINE)
    assert names and len(names) == len(set(names))  # no family split or repeated
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    values[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return values


def test_scrapes_during_ingest_are_valid_and_counters_never_go_back() -> None:
    config = Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0"))
    with sidecar_thread(config, FakeClock()) as (car, _):
        port, http, body = car.ports.metrics or 0, car.ports.http or 0, _spans_body()
        stop = threading.Event()
        posted = []

        def ingest() -> None:
            while not stop.is_set():
                status, _, _ = post(f"http://127.0.0.1:{http}/v1/traces", body, {"Content-Type": "application/x-protobuf"})
                posted.append(status)

        client = threading.Thread(target=ingest)
        client.start()
        try:
            scrapes = []
            for _ in range(15):
                status, _, text = _get(port, "/metrics")
                assert status == 200
                scrapes.append(_counters(text.decode()))
        finally:
            stop.set()
            client.join()
    assert posted and set(posted) == {200}
    for before, after in zip(scrapes, scrapes[1:]):
        for key, value in before.items():
            assert after.get(key, 0.0) >= value, key
    assert any(scrapes[-1][key] > value for key, value in scrapes[0].items())  # ingest moved counters
