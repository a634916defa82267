"""What decoding a body may take, known before it is decoded (``ragmon.receivers.weight``): an
upper bound of tracemalloc's peak for JSON of every shape, and the receiver admitting a JSON
body at that weight (413 when it could never fit, naming the setting)."""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock
from test_receiver_http import JS, SELECTION, _start, loop  # noqa: F401  (loop: the fixture)

from ragmon.config import Config, MetricsConfig, ReceiverConfig
from ragmon.otlp.decode import decode_json
from ragmon.receivers.ingest import IngestGate
from ragmon.receivers.weight import json_tree_bytes


def _peak(work: Callable[[], Any]) -> int:
    """Bytes ``work`` holds at its peak (tracemalloc), its result included. The cycle collector
    is held off meanwhile: tracemalloc counts only what is allocated while it traces, so nothing
    collected before matters, and no collection runs inside the measure (a full one walks the
    whole test process: a second and more, late in the suite)."""
    enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = work()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        if enabled:
            gc.enable()
    del result
    return peak


def _loads(body: bytes) -> Callable[[], Any]:
    return lambda: json.loads(body.decode("utf-8-sig"))


_loads(b"0")()  # the utf-8-sig codec loaded (its module, ~30 KB) before any measure


def _otlp(attributes: list[dict[str, Any]], spans: int) -> bytes:
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"spans": [
            {"traceId": "ab" * 16, "spanId": f"{i + 1:016x}", "name": "n", "startTimeUnixNano": "1",
             "endTimeUnixNano": "2", "attributes": attributes} for i in range(spans)
        ]}],
    }]}).encode()


SHAPES = {
    "tiny objects in arrays": json.dumps({"a": [{"intValue": "1"}] * 100_000}).encode(),
    "small ints": json.dumps([1] * 400_000).encode(),
    "large ints": json.dumps([123456789] * 200_000).encode(),
    "floats": json.dumps([1.5] * 200_000).encode(),
    "empty objects": b"[" + b",".join([b"{}"] * 200_000) + b"]",
    "empty arrays": b"[" + b",".join([b"[]"] * 200_000) + b"]",
    "one-key objects": b"[" + b",".join([b'{"":0}'] * 150_000) + b"]",
    "distinct keys": b"[" + b",".join(b'{"k%d":1000}' % i for i in range(100_000)) + b"]",
    "six-key objects": b"[" + b",".join([b'{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}'] * 50_000) + b"]",
    "object of lists": b"[" + b",".join([b'{"a":[]}'] * 100_000) + b"]",
    "two-char strings": json.dumps(["ab"] * 200_000).encode(),
    "distinct strings": json.dumps([str(i) for i in range(200_000)]).encode(),
    "one long string": json.dumps(["x" * 2_000_000]).encode(),
    "an emoji in a long string": json.dumps(["x" * 500_000 + "\U0001f600"], ensure_ascii=False).encode(),
    "an escaped emoji in a long string": json.dumps(["x" * 500_000 + "\U0001f600"]).encode(),
    "a two-byte character in a long string": json.dumps(["x" * 500_000 + "\u0101"], ensure_ascii=False).encode(),
    "emoji strings": json.dumps(["x\U0001f600"] * 100_000, ensure_ascii=False).encode(),
    "literals": json.dumps([True, None, False] * 100_000).encode(),
    "OTLP spans": _otlp([{"key": f"k{j}", "value": {"stringValue": "v" * 30}} for j in range(10)], 1_000),
    "OTLP documents": _otlp([
        {"key": f"retrieval.documents.{j}.document.content", "value": {"stringValue": "v" * 300}} for j in range(10)
    ], 500),
    "OTLP int arrays": _otlp([{"key": "retrieval.documents.0.document.id", "value": {"arrayValue": {
        "values": [{"intValue": "1"}] * 200}}}], 500),
}


@pytest.mark.parametrize("name", SHAPES)
def test_the_weight_bounds_the_tree_and_the_decode(name: str) -> None:
    body = SHAPES[name]
    bound = json_tree_bytes(body)
    assert _peak(_loads(body)) <= bound
    if name.startswith("OTLP"):
        assert _peak(lambda: decode_json(body, SELECTION)) <= bound
        assert _peak(lambda: decode_json(body, SELECTION)) * 4 >= bound  # an upper bound, not a wild one


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(inner, max_size=30), st.dictionaries(st.text(max_size=8), inner, max_size=12))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    _containers,
    max_leaves=200,
)


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_JSON, st.booleans())
def test_the_weight_bounds_the_tree_of_any_json(value: Any, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return  # a lone surrogate written raw: not UTF-8, refused before any tree
    assert _peak(_loads(body)) <= json_tree_bytes(body) + 4096  # + the interpreter's own small allocations


def test_a_json_body_whose_tree_could_never_fit_gets_413_naming_the_setting(loop: LoopThread) -> None:
    """The issue's overshoot: ~16 MB OTLP/JSON bodies of small-integer arrays took 25x their bytes
    while decoding, uncounted. A decode holds at most its turn's bytes (``slot_bytes``): a body
    whose tree cannot fit is refused before any tree is built; one that fits is decoded."""
    body = SHAPES["OTLP int arrays"]
    tree = json_tree_bytes(body)
    for receiver in _start(loop, max_body=len(body), gate=IngestGate(slot_bytes=tree)):
        code, _, answer = post(receiver.url, body, JS)
        assert code == 413
        message = json.loads(answer)["message"]
        assert "receiver.max_inflight_bytes / 2" in message and "send smaller batches or protobuf" in message
        assert receiver.stats.requests_rejected[("http", "too_large")] == 1 and not receiver.sink.spans
        assert receiver.server.budget.used == 0
    for receiver in _start(loop, max_body=len(body), gate=IngestGate(slot_bytes=tree + (8 << 20))):
        assert post(receiver.url, body, JS)[0] == 200
        assert len(receiver.sink.spans) == 500 and receiver.server.budget.used == 0


def _sidecar(inflight: int, max_body: int) -> Config:
    return Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc="", max_inflight_bytes=inflight, max_body_bytes=max_body),
                  metrics=MetricsConfig(listen=""))


def test_the_sidecar_gives_each_decode_half_the_in_flight_bytes() -> None:
    """``ragmon run``'s gate: two turns, each holding at most ``receiver.max_inflight_bytes / 2``
    of decoding: the same JSON body is refused (413) under twice its tree and decoded over it."""
    body = SHAPES["OTLP int arrays"]
    tree = json_tree_bytes(body)
    for inflight, answer in ((2 * tree - 2, 413), (2 * tree + (16 << 20), 200)):
        with sidecar_thread(_sidecar(inflight, len(body)), FakeClock()) as (car, _):
            assert car._life.http is not None and car._life.http.gate.slot_bytes == inflight // 2
            assert post(f"http://127.0.0.1:{car.ports.http}/v1/traces", body, JS)[0] == answer


@pytest.mark.system  # bounds real waits: the server's timeouts run on its event loop's clock
def test_a_feedback_body_is_parsed_in_a_turn_within_its_bytes() -> None:
    """Feedback bodies are parsed in a turn of the gate too (they were not gated: six 16 MB
    bodies parsed at once took 1 GB), their tree checked before it is built."""
    body = json.dumps({"trace_id": "ab" * 16, "relevant_document_ids": ["x" * 30] * 9_000}).encode()
    tree = json_tree_bytes(body)
    with sidecar_thread(_sidecar(2 * tree - 2, len(body)), FakeClock()) as (car, _):
        code, _, answer = post(f"http://127.0.0.1:{car.ports.http}/v1/feedback", body, JS)
        assert (code, json.loads(answer)["error"]) == (
            413, "body too large to decode: its JSON tree would take more than receiver.max_inflight_bytes / 2")
        assert car.ingest.requests_rejected[("http", "too_large")] == 1
    with sidecar_thread(_sidecar(2 * tree, len(body)), FakeClock(), ) as (car, loop):
        assert post(f"http://127.0.0.1:{car.ports.http}/v1/feedback", body, JS)[0] == 404  # parsed: no such trace
        gate = car._life.http.gate if car._life.http is not None else None
        assert gate is not None
        for _ in range(gate.slots):
            assert loop.run(gate.enter())
        began = time.monotonic()
        code, _, answer = post(f"http://127.0.0.1:{car.ports.http}/v1/feedback", body, JS)
        assert (code, json.loads(answer)) == (503, {"error": "busy; retry later"})
        assert time.monotonic() - began >= gate.wait - 0.1  # it waited for a turn
        for _ in range(gate.slots):
            loop.loop.call_soon_threadsafe(gate.leave)
