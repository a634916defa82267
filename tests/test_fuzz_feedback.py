"""Hostile ``POST /v1/feedback`` bodies through the whole sidecar: every answer is 202, 400, 404
or 409 (413 past the body cap), never a 500; ``ragmon_feedback_total`` counts each; good
feedback sent afterwards is scored exactly."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value
from test_sidecar_feedback import SV, make, scored, send

from prometheus_client.parser import text_string_to_metric_families

from ragmon.sidecar.wiring import Sidecar
from ragmon.groundtruth.feedback import OUTCOMES

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ANSWERS = {202, 400, 404, 409, 413}

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[Sidecar, FakeClock, LoopThread, list[str]]]:
    clock = FakeClock()
    with sidecar_thread(make(clock, retention=3600.0, max_traces=100), clock) as (car, loop):
        ids = send(car, [["d1", "d2", "d3"], ["d4", "d5"]])
        scored(car, clock, 2, 2)
        yield car, clock, loop, ids


def _bodies(ids: list[str]) -> st.SearchStrategy[Any]:
    trace_id = st.sampled_from(ids) | st.text(max_size=40) | _json
    fields = st.fixed_dictionaries({}, optional={
        "trace_id": trace_id,
        "relevant_document_ids": st.lists(st.text(max_size=5) | _json, max_size=4) | _json,
        "relevance": st.dictionaries(st.text(max_size=5), st.integers(-2, 3) | _json, max_size=3) | _json,
        "name": st.text(max_size=70) | _json,
        "score": st.floats(allow_nan=True) | st.integers() | _json,
    })
    docs = st.lists(st.sampled_from(["d1", "d2", "d3", "d4", "d5", "d9"]), max_size=3)
    good = st.fixed_dictionaries({"trace_id": st.sampled_from(ids)}).flatmap(
        lambda head: st.one_of(
            st.fixed_dictionaries({"relevant_document_ids": docs}),
            st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10), "score": st.floats(0, 1)}),
        ).map(lambda rest: {**head, **rest})
    )
    return good | fields | _json


@pytest.mark.parametrize("mode", ["json", "bytes"])
def test_no_body_gets_a_500_and_good_feedback_is_scored_after(
    running: tuple[Sidecar, FakeClock, LoopThread, list[str]], mode: str,
) -> None:
    car, _, _, ids = running
    url = f"http://127.0.0.1:{car.ports.http}/v1/feedback"
    answered: list[int] = []
    strategy = _bodies(ids).map(lambda b: json.dumps(b).encode()) if mode == "json" else st.binary(max_size=200)

    @FUZZ
    @given(strategy)
    def one(body: bytes) -> None:
        status, _, raw = post(url, body, {"Content-Type": "application/json"})
        assert status in ANSWERS, (status, body, raw)
        answer = json.loads(raw)
        assert set(answer) <= {"status", "error", "note"}
        answered.append(status)

    before = _counted(car)
    one()
    assert _counted(car) == before + len(answered)
    assert mode == "bytes" or {202, 400} <= set(answered)


def _counted(car: Sidecar) -> float:
    v = samples(scrape(car.ports.metrics))
    return sum(value(v, "ragmon_feedback_total", outcome=o) for o in OUTCOMES)


_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
"""Any string JSON can write: lone surrogates, controls, bidirectional overrides included."""
_NUMBER_TEXT = st.one_of(
    st.integers().map(str),
    st.integers(300, 4000).map(lambda digits: "9" * digits),  # past a float; past int() at 4,300 digits
    st.integers(300, 4000).map(lambda digits: "-" + "1" * digits),
    st.sampled_from(["1e308", "1.7976931348623157e308", "-1e308", "5e-324", "1e-400", "1e400", "-0.0", "0.0",
                     "Infinity", "-Infinity", "NaN", "0", "1", "1.0", "0.5", "2"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
"""Any number JSON (and Python's json module) may carry, as written in the body."""


def _raw_bodies(ids: list[str]) -> st.SearchStrategy[bytes]:
    """Feedback bodies as JSON text: any names and any numbers in every place a number goes."""
    trace = st.sampled_from(ids).map(json.dumps)
    name = _ANY_TEXT.map(lambda t: json.dumps(t))  # \\uXXXX escapes: lone surrogates survive as JSON
    grades = st.lists(st.tuples(st.sampled_from(["d1", "d2", "d3", "d4", "d5"]), _NUMBER_TEXT), max_size=3).map(
        lambda pairs: "{" + ",".join(f'"{doc}": {n}' for doc, n in pairs) + "}")
    scored = st.tuples(trace, name, _NUMBER_TEXT).map(lambda t: f'{{"trace_id": {t[0]}, "name": {t[1]}, "score": {t[2]}}}')
    graded = st.tuples(trace, grades).map(lambda t: f'{{"trace_id": {t[0]}, "relevance": {t[1]}}}')
    return st.one_of(scored, graded).map(str.encode)


def test_any_string_and_any_number_never_get_a_500_and_metrics_always_parse(
    running: tuple[Sidecar, FakeClock, LoopThread, list[str]],
) -> None:
    """Issue 23's surfaces: a lone surrogate in a name blinded /metrics (500 on every scrape);
    grades of 309 to 4,300 digits gave a 500, uncounted, and used up a slot; 10^308 grades made
    a sum NaN. Invariants after every body: an answer in the documented set (never a 500),
    ``/metrics`` parses in both formats with every value finite, every answer counted."""
    car, clock, _, _ = running
    records = car.pipeline.stats().records
    ids = send(car, [["d1", "d2", "d3"], ["d4", "d5"], ["d1", "d5"]])  # fresh: no slot taken yet
    scored(car, clock, records + 3, 3)
    url = f"http://127.0.0.1:{car.ports.http}/v1/feedback"
    answered: list[int] = []
    before = _counted(car)

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(_raw_bodies(ids))
    def one(body: bytes) -> None:
        status, _, raw = post(url, body, {"Content-Type": "application/json"})
        assert status in ANSWERS, (status, body[:200], raw)
        answered.append(status)
        for openmetrics in (False, True):
            text = scrape(car.ports.metrics, openmetrics)
            for family in text_string_to_metric_families(text.replace("# EOF\n", "")):
                for sample in family.samples:
                    assert math.isfinite(sample.value), (sample, body[:200])

    one()
    assert _counted(car) == before + len(answered)
    assert {202, 400, 409} <= set(answered)


def test_good_feedback_after_the_fuzz_is_scored_exactly(running: tuple[Sidecar, FakeClock, LoopThread, list[str]]) -> None:
    car, clock, _, _ = running
    records = car.pipeline.stats().records
    (fresh,) = send(car, [["x1", "x2", "x3"]])
    scored(car, clock, records + 1, 1)
    before = samples(scrape(car.ports.metrics))
    fb = {**SV, "source": "feedback"}
    queries = before.get(("ragmon_retrieval_queries_total", frozenset(fb.items())), 0.0)
    rr_sum = before.get(("ragmon_retrieval_reciprocal_rank_sum", frozenset(fb.items())), 0.0)
    status, _, _ = post(f"http://127.0.0.1:{car.ports.http}/v1/feedback",
                        json.dumps({"trace_id": fresh, "relevant_document_ids": ["x3"]}).encode(),
                        {"Content-Type": "application/json"})
    assert status == 202
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_retrieval_queries_total", **fb) == queries + 1
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **fb) == pytest.approx(rr_sum + 1 / 3)
