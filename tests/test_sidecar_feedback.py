"""``POST /v1/feedback`` through the real sidecar: RAG traces in with the OTel SDK's OTLP/HTTP
exporter, feedback posted with a real HTTP client, /metrics scraped, exact values checked."""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from net_helpers import wait_until
from server_helpers import LoopThread, post, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, FeedbackConfig, MetricsConfig, ReceiverConfig, ScoringConfig
from ragmon.groundtruth.feedback import MAX_SCORE_NAMES, entry_size, names_size

SV = {"service": "rag-api", "variant": "B"}


def send(car: Sidecar, rankings: list[list[str]]) -> list[str]:
    """One RAG trace per ranking (a retriever span with those document ids); their trace ids."""
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-api", "ragmon.variant": "B"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    ids = []
    for ranking in rankings:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the refund window?")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, doc in enumerate(ranking):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
            ids.append(format(root.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return ids


def scored(car: Sidecar, clock: FakeClock, records: int, new: int) -> None:
    wait_until(lambda: car.assembler.stats().spans_held == 2 * new)
    clock.now += 3.0  # past the grace
    wait_until(lambda: car.pipeline.stats().records == records)


def feedback(car: Sidecar, body: object, token: str = "") -> tuple[int, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, answer = post(f"http://127.0.0.1:{car.ports.http}/v1/feedback", raw, headers)
    return status, json.loads(answer)


def make(clock: FakeClock, **feedback_config: object) -> Config:
    return Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc="", **feedback_config.pop("receiver", {})),  # type: ignore[arg-type]
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        scoring=ScoringConfig(k=(1, 3)),
        feedback=FeedbackConfig(**feedback_config),  # type: ignore[arg-type]
    )


@pytest.fixture
def sidecar() -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    with sidecar_thread(make(clock, retention=600.0, max_traces=3), clock) as (car, loop):
        yield car, clock, loop


def test_relevance_feedback_gives_exact_feedback_metrics(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    a, b = send(car, [["d1", "d2", "d3"], ["d4", "d5", "d6"]])
    scored(car, clock, 2, 2)
    assert feedback(car, {"trace_id": a, "relevant_document_ids": ["d2", "d9"]}) == (202, {"status": "accepted"})
    assert feedback(car, {"trace_id": b, "relevance": {"d4": 2, "d6": 1}})[0] == 202
    # a second relevance feedback for a: refused (the first wins), counted
    assert feedback(car, {"trace_id": a, "relevant_document_ids": ["d1"]})[0] == 409
    v = samples(scrape(car.ports.metrics))
    fb = {**SV, "source": "feedback"}
    assert value(v, "ragmon_retrieval_queries_total", **fb) == 2
    # a: d2 at rank 2 of 2 relevant; b: d4 (grade 2) at 1, d6 (grade 1) at 3
    assert value(v, "ragmon_retrieval_mrr", **fb, window="5m") == (0.5 + 1.0) / 2
    assert value(v, "ragmon_retrieval_hit_rate", **fb, k="1", window="5m") == 0.5
    assert value(v, "ragmon_retrieval_hit_rate", **fb, k="3", window="5m") == 1.0
    assert value(v, "ragmon_retrieval_recall_mean", **fb, k="3", window="5m") == (0.5 + 1.0) / 2
    assert value(v, "ragmon_retrieval_precision_mean", **fb, k="3", window="5m") == pytest.approx((1 / 3 + 2 / 3) / 2)
    ndcg_a = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    ndcg_b = (2 + 1 / 2) / (2 + 1 / math.log2(3))  # gain = grade (trec_eval): 2 at rank 1, 1 at rank 3
    assert value(v, "ragmon_retrieval_ndcg_mean", **fb, k="3", window="5m") == pytest.approx((ndcg_a + ndcg_b) / 2)
    assert value(v, "ragmon_feedback_total", outcome="accepted") == 2
    assert value(v, "ragmon_feedback_total", outcome="duplicate") == 1


async def _current_thread() -> threading.Thread:
    return threading.current_thread()


class _WhereDecoded:
    """The sidecar's ``Feedback`` as the receiver sees it, noting the thread each body is decoded on."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.threads: list[threading.Thread] = []

    def decode(self, body: bytes) -> object:
        self.threads.append(threading.current_thread())
        return self._inner.decode(body)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def test_a_large_body_is_decoded_off_the_loop_and_scored(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, loop = sidecar
    (trace, other) = send(car, [["d1", "d2", "d3"], ["d1"]])
    scored(car, clock, 2, 2)
    receiver = car._life.http
    assert receiver is not None
    where = _WhereDecoded(receiver.feedback)
    receiver.feedback = where  # type: ignore[assignment]
    on_loop = loop.run(_current_thread())
    assert feedback(car, {"trace_id": other, "name": "thumbs", "score": 1})[0] == 202  # small: decoded on the loop
    many = [f"document-{i:024d}" for i in range(9_999)] + ["d3"]  # about 350 KB: decoded in a thread
    assert feedback(car, {"trace_id": trace, "relevant_document_ids": many})[0] == 202
    assert [t is on_loop for t in where.threads] == [True, False]
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **SV, source="feedback") == 1 / 3
    assert value(v, "ragmon_retrieval_recall_sum", **SV, source="feedback", k="3") == 1 / 10_000


def test_named_scores_give_histograms_and_means(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    a, b = send(car, [["d1"], ["d2"]])
    scored(car, clock, 2, 2)
    for trace, score in ((a, 1), (b, 0)):
        assert feedback(car, {"trace_id": trace, "name": "thumbs", "score": score})[0] == 202
    assert feedback(car, {"trace_id": b, "name": "thumbs", "score": 0.5})[0] == 409  # one per trace and name
    v = samples(scrape(car.ports.metrics))
    thumbs = {**SV, "name": "thumbs"}

    def user(sample: str, **labels: str) -> float:
        return v[(f"ragmon_user_feedback{sample}", frozenset({**thumbs, **labels}.items()))]

    assert user("_count") == 2
    assert user("_sum") == 1.0
    assert user("_bucket", le="0.5") == 1
    assert user("_mean", window="5m") == 0.5
    assert value(v, "ragmon_window_samples", **SV, source="feedback", metric="user_feedback_mean:thumbs", window="5m") == 2


def test_a_trace_takes_one_score_per_name_and_scores_of_at_most_eight_names(
    sidecar: tuple[Sidecar, FakeClock, LoopThread],
) -> None:
    """However often one trace's feedback is posted, it weighs one verdict per name in a mean; a
    flood of new names per trace stops at ``MAX_SCORE_NAMES``; each refusal is counted."""
    car, clock, _ = sidecar
    (a,) = send(car, [["d1"]])
    scored(car, clock, 1, 1)
    before = car.feedback.store.bytes
    assert feedback(car, {"trace_id": a, "name": "thumbs", "score": 1}) == (202, {"status": "accepted"})
    status, answer = feedback(car, {"trace_id": a, "name": "thumbs", "score": 0})
    assert (status, answer["error"]) == (409, "name: a score of this name was already taken for this trace (the first wins)")
    for i in range(MAX_SCORE_NAMES - 1):
        assert feedback(car, {"trace_id": a, "name": f"n{i}", "score": 0.5})[0] == 202
    status, answer = feedback(car, {"trace_id": a, "name": "one-more", "score": 0.5})
    assert (status, answer["error"]) == (409, f"name: this trace already has scores of {MAX_SCORE_NAMES} names")
    names = ("thumbs", *(f"n{i}" for i in range(MAX_SCORE_NAMES - 1)))
    assert car.feedback.store.bytes == before + names_size(names)  # the names taken are counted
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_feedback_total", outcome="accepted") == MAX_SCORE_NAMES
    assert value(v, "ragmon_feedback_total", outcome="duplicate") == 1
    assert value(v, "ragmon_feedback_total", outcome="limited") == 1
    thumbs = frozenset({**SV, "name": "thumbs"}.items())
    assert v[("ragmon_user_feedback_count", thumbs)] == 1 and v[("ragmon_user_feedback_sum", thumbs)] == 1.0


@pytest.mark.parametrize(
    ("name", "label"),
    [("\ud800", "\ufffd"), ("a\rb\x00c\u202ed\x1b", "a\ufffdb\ufffdc\ufffdd\ufffd"), ("\udfff\ud83d", "\ufffd\ufffd")],
)
def test_a_name_no_exposition_can_carry_is_cleaned_and_metrics_still_answer(
    sidecar: tuple[Sidecar, FakeClock, LoopThread], name: str, label: str,
) -> None:
    """Issue 23's critical finding: a lone surrogate (valid JSON) in a score's name made every
    later scrape a 500 until restart. Label values are cleaned where labels are made: the
    scrape answers in both formats, with U+FFFD where a character could not be kept, counted."""
    car, clock, _ = sidecar
    (a,) = send(car, [["d1"]])
    scored(car, clock, 1, 1)
    body = json.dumps({"trace_id": a, "name": name, "score": 1}).encode()  # ASCII: \uXXXX escapes
    assert feedback(car, body)[0] == 202
    for openmetrics in (False, True):
        assert f'name="{label}"' in scrape(car.ports.metrics, openmetrics)  # a 200, or urlopen raises
    v = samples(scrape(car.ports.metrics))
    assert v[("ragmon_user_feedback_count", frozenset({**SV, "name": label}.items()))] == 1
    assert value(v, "ragmon_label_values_replaced_total", label="name") == 1


@pytest.mark.parametrize("digits", [309, 4000])
def test_a_grade_past_the_count_bound_is_refused_whole_and_takes_no_slot(
    sidecar: tuple[Sidecar, FakeClock, LoopThread], digits: int,
) -> None:
    """A grade of 309 to 4,300 digits gave a 500 (``OverflowError``), uncounted, and used up the
    trace's one relevance slot; 10^308 on three documents made the NDCG sum NaN for good. Now a
    grade passes ``ragmon.numbers`` first: 400, counted, and a valid retry is scored."""
    car, clock, _ = sidecar
    (a,) = send(car, [["d1", "d2", "d3"]])
    scored(car, clock, 1, 1)
    huge = "9" * digits
    body = ('{"trace_id": "%s", "relevance": {"d1": %s}}' % (a, huge)).encode()
    status, answer = feedback(car, body)
    assert status == 400 and answer["error"].startswith("relevance: grade of 'd1' must be a whole number from 0 to")
    body = ('{"trace_id": "%s", "relevance": {"d1": 1e308, "d2": 1e308, "d3": 1e308}}' % a).encode()
    assert feedback(car, body)[0] == 400
    assert feedback(car, {"trace_id": a, "relevance": {"d1": 10**12, "d2": 10**12, "d3": 10**12}})[0] == 202
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_feedback_total", outcome="invalid") == 2
    assert value(v, "ragmon_feedback_total", outcome="accepted") == 1
    assert value(v, "ragmon_retrieval_ndcg_sum", **SV, source="feedback", k="3") == 1.0


@pytest.mark.parametrize(("body", "field"), [
    (b"{not json", "body"),
    ([1], "body"),
    ({"relevant_document_ids": ["d1"]}, "trace_id"),
    ({"trace_id": "xyz", "relevant_document_ids": ["d1"]}, "trace_id"),
    ({"trace_id": "0" * 32, "relevant_document_ids": ["d1"]}, "trace_id"),
    ({"trace_id": "ab" * 16}, "body"),
    ({"trace_id": "ab" * 16, "relevant_document_ids": "d1"}, "relevant_document_ids"),
    ({"trace_id": "ab" * 16, "relevant_document_ids": [1]}, "relevant_document_ids"),
    ({"trace_id": "ab" * 16, "relevance": {"d1": -1}}, "relevance"),
    ({"trace_id": "ab" * 16, "relevance": {"d1": 1.5}}, "relevance"),
    ({"trace_id": "ab" * 16, "relevance": ["d1"]}, "relevance"),
    ({"trace_id": "ab" * 16, "relevant_document_ids": [str(i) for i in range(10_001)]}, "relevant_document_ids"),
    ({"trace_id": "ab" * 16, "relevance": {str(i): 1 for i in range(10_001)}}, "relevance"),
    ({"trace_id": "ab" * 16, "name": "thumbs", "score": 2}, "score"),
    ({"trace_id": "ab" * 16, "name": "thumbs", "score": True}, "score"),
    ({"trace_id": "ab" * 16, "name": "thumbs", "score": "NaN"}, "score"),
    ({"trace_id": "ab" * 16, "name": "thumbs"}, "score"),
    ({"trace_id": "ab" * 16, "name": "", "score": 1}, "name"),
    ({"trace_id": "ab" * 16, "name": 3, "score": 1}, "name"),
    ({"trace_id": "ab" * 16, "name": "t", "score": 1, "relevant_document_ids": []}, "body"),
])
def test_bad_bodies_get_a_400_naming_the_field(sidecar: tuple[Sidecar, FakeClock, LoopThread], body: object, field: str) -> None:
    car, _, _ = sidecar
    status, answer = feedback(car, body)
    assert status == 400
    assert answer["error"].startswith(f"{field}: ")
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_feedback_total", outcome="invalid") == 1


def test_unknown_expired_and_evicted_traces_get_404(sidecar: tuple[Sidecar, FakeClock, LoopThread]) -> None:
    car, clock, _ = sidecar
    ids = send(car, [["d1"], ["d2"], ["d3"], ["d4"]])  # max_traces = 3: the first is evicted
    scored(car, clock, 4, 4)
    assert feedback(car, {"trace_id": "ab" * 16, "name": "thumbs", "score": 1})[0] == 404
    assert feedback(car, {"trace_id": ids[0], "name": "thumbs", "score": 1})[0] == 404
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_feedback_traces") == 3
    assert value(v, "ragmon_feedback_traces_bytes") == 3 * entry_size("d2", "rag-api", "B")
    assert value(v, "ragmon_feedback_traces_dropped_total", reason="evicted") == 1
    assert value(v, "ragmon_feedback_total", outcome="unknown_trace") == 2
    assert feedback(car, {"trace_id": ids[3], "name": "thumbs", "score": 1})[0] == 202
    clock.now += 601.0  # past the retention
    status, answer = feedback(car, {"trace_id": ids[3], "name": "thumbs", "score": 1})
    assert (status, answer["error"].split(":")[0]) == (404, "trace_id")
    v = samples(scrape(car.ports.metrics))
    assert value(v, "ragmon_feedback_total", outcome="expired") == 1
    assert value(v, "ragmon_feedback_traces_dropped_total", reason="expired") == 3
    assert value(v, "ragmon_feedback_traces") == 0
    assert value(v, "ragmon_feedback_traces_bytes") == 0


def test_the_ingest_token_guards_feedback_and_the_body_cap_holds() -> None:
    clock = FakeClock()
    config = make(clock, receiver={"token": "s3cret", "max_body_bytes": 1024})
    with sidecar_thread(config, clock) as (car, _):
        status, answer = feedback(car, {"trace_id": "ab" * 16, "name": "thumbs", "score": 1})
        assert status == 401
        assert feedback(car, {"trace_id": "ab" * 16, "name": "thumbs", "score": 1}, token="s3cret")[0] == 404
        big = {"trace_id": "ab" * 16, "relevant_document_ids": ["x" * 2000]}
        assert feedback(car, big, token="s3cret")[0] == 413
        # chunked, so no Content-Length: the cap holds while the body streams in
        connection = http.client.HTTPConnection("127.0.0.1", car.ports.http, timeout=10)
        headers = {"Content-Type": "application/json", "Authorization": "Bearer s3cret"}
        connection.request("POST", "/v1/feedback", body=iter([json.dumps(big).encode()[i:i + 100] for i in range(0, 2100, 100)]),
                           headers=headers, encode_chunked=True)
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())) == (413, {"error": "body too large"})
        connection.close()


def test_score_names_are_capped_like_traffic_labels() -> None:
    clock = FakeClock()
    config = dataclasses.replace(make(clock), metrics=MetricsConfig(listen="127.0.0.1:0", max_label_values=2))
    with sidecar_thread(config, clock) as (car, _):
        (trace,) = send(car, [["d1"]])
        scored(car, clock, 1, 1)
        for name in ("thumbs", "stars", "helpful"):
            assert feedback(car, {"trace_id": trace, "name": name, "score": 1})[0] == 202
        v = samples(scrape(car.ports.metrics))
        count = {name: v.get(("ragmon_user_feedback_count", frozenset({**SV, "name": name}.items())))
                 for name in ("thumbs", "stars", "helpful", "other")}
        assert count == {"thumbs": 1, "stars": 1, "helpful": None, "other": 1}
        assert value(v, "ragmon_label_values_folded_total", label="name") == 1
