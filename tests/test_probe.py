"""The prober end to end: a real ``Sidecar`` probes a small aiohttp RAG app on 127.0.0.1 that is
instrumented with the real OpenTelemetry SDK (it continues the probe's ``traceparent`` and
exports over OTLP/HTTP to the sidecar); exact values on the scraped ``/metrics``. Plus the
path syntax, the body template and the registry's bounds."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import generate_latest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from net_helpers import wait_until
from judge_server import judge_server_thread, verdict_for
from e2e_stack import free_port
from server_helpers import LoopThread, sidecar_thread
from test_sidecar import FakeClock, samples, scrape, value

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import (
    Config, JudgeConfig, MetricsConfig, ProbeConfig, ReceiverConfig, ScoringConfig, config_from_mapping,
)
from ragmon.errors import ConfigError
from ragmon.errors import InputError
from ragmon.judge.lexical import lexical_faithfulness
from ragmon.formats.jsonpath import parse_path, select
from ragmon.groundtruth.prober import OUTCOMES, RESULTS, ProbeRegistry, fill_template
from ragmon.formats.relevance import read_golden_queries
from ragmon.scoring.records import ProbeLabels

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

# (query, the app's ranking for it, golden relevant ids): reciprocal ranks 1, 1/2, 0, 1/3
QUERIES = [
    ("what is the refund window?", ["d1", "d2", "d3"], ["d1"]),
    ('say "hi" \\ then {braces} \u00e9', ["x", "d5", "y"], ["d5"]),
    ("how long is shipping?", ["a", "b", "c"], ["z"]),
    ("can gift cards be refunded?", ["g1", "g2", "g3"], ["g3"]),
]
RANKINGS = {q: ranking for q, ranking, _ in QUERIES}
CONTENT = "The refund window is 30 days from delivery."
TRACE_ANSWER = "Refunds are paid in bitcoin on the moon."
MRR_SUM = 1 + 1 / 2 + 0 + 1 / 3
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01")


@dataclass
class RagApp:
    """What the app saw per route: JSON bodies, headers (lower-case names), questions, trace ids
    of its server spans, and the most requests in flight at once."""

    bodies: dict[str, list[Any]] = field(default_factory=dict)
    headers: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    questions: dict[str, list[str]] = field(default_factory=dict)
    trace_ids: dict[str, list[str]] = field(default_factory=dict)
    in_flight: Counter[str] = field(default_factory=Counter)
    max_in_flight: Counter[str] = field(default_factory=Counter)
    port: int = 0


def _provider(service: str, endpoint: str, *, parent_based: bool) -> TracerProvider:
    sampler = ParentBased(ALWAYS_OFF) if parent_based else None  # records only sampled remote parents
    provider = TracerProvider(resource=Resource.create({"service.name": service}), sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
    return provider


def _rag_spans(tracer: Tracer, question: str, ranking: list[str], *, ids: bool) -> None:
    """Retriever and LLM spans under the current (server) span, with OpenInference attributes."""
    with tracer.start_as_current_span("retrieve") as span:
        span.set_attribute("openinference.span.kind", "RETRIEVER")
        span.set_attribute("input.value", question)
        for rank, doc in enumerate(ranking):
            if ids:
                span.set_attribute(f"retrieval.documents.{rank}.document.id", doc)
            span.set_attribute(f"retrieval.documents.{rank}.document.content", f"{CONTENT} ({doc})")
    with tracer.start_as_current_span("llm") as span:
        span.set_attribute("openinference.span.kind", "LLM")
        span.set_attribute("llm.model_name", "gpt-4o-mini")
        span.set_attribute("llm.token_count.prompt", 100)
        span.set_attribute("llm.token_count.completion", 20)


def rag_app(seen: RagApp, endpoint: str) -> tuple[web.Application, list[TracerProvider]]:
    """Routes: ``/ask`` (continues the caller's trace; documents with ids), ``/bare`` (continues
    it; spans carry no document ids, the response has them), ``/plain`` (does not propagate
    ``traceparent``), ``/fail`` (500), ``/slow`` (answers after 1.5 s)."""
    providers = {
        "/ask": _provider("rag-api", endpoint, parent_based=True),
        "/bare": _provider("bare-api", endpoint, parent_based=True),
        "/plain": _provider("plain-api", endpoint, parent_based=False),
    }
    propagator = TraceContextTextMapPropagator()

    async def handle(request: web.Request) -> web.Response:
        route = request.path
        body = await request.json() if request.can_read_body else None
        seen.bodies.setdefault(route, []).append(body)
        seen.headers.setdefault(route, []).append({k.lower(): v for k, v in request.headers.items()})
        if route == "/fail":
            return web.json_response({"error": "boom"}, status=500)
        if route == "/slow":
            await asyncio.sleep(1.5)
            return web.json_response({})
        question = body["question"] if isinstance(body, dict) else request.query["q"]
        seen.questions.setdefault(route, []).append(question)
        ranking = RANKINGS.get(question, ["n1", "n2"])
        seen.in_flight[route] += 1
        seen.max_in_flight[route] = max(seen.max_in_flight[route], seen.in_flight[route])
        try:
            await asyncio.sleep(0.05)
        finally:
            seen.in_flight[route] -= 1
        tracer = providers[route].get_tracer("rag-app")
        context = None if route == "/plain" else propagator.extract(request.headers)
        with tracer.start_as_current_span(f"POST {route}", context=context, kind=SpanKind.SERVER) as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", question)
            root.set_attribute("output.value", TRACE_ANSWER if route == "/bare" else CONTENT)
            _rag_spans(tracer, question, ranking, ids=route != "/bare")
            seen.trace_ids.setdefault(route, []).append(f"{root.get_span_context().trace_id:032x}")
        return web.json_response({"answer": CONTENT, "documents": [{"id": d, "score": 1.0} for d in ranking]})

    app = web.Application()
    app.router.add_route("*", "/{route}", handle)
    return app, list(providers.values())


@contextmanager
def running_app(endpoint: str) -> Iterator[RagApp]:
    """The RAG app on its own event loop (its SDK exports block it, not the sidecar's loop)."""
    seen = RagApp()
    loop = LoopThread()
    app, providers = rag_app(seen, endpoint)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    seen.port = loop.run(start())
    try:
        yield seen
    finally:
        loop.run(runner.cleanup())
        for provider in providers:
            provider.shutdown()
        loop.close()


def write_golden(path: Path, queries: list[tuple[str, list[str], list[str]]]) -> str:
    path.write_text("".join(
        json.dumps({"query": q, "relevant_document_ids": relevant, "reference_answer": CONTENT}) + "\n"
        for q, _, relevant in queries
    ))
    return str(path)


@contextmanager
def sidecar(http_port: int, probes: tuple[ProbeConfig, ...], golden: str, **judge: Any) -> Iterator[tuple[Sidecar, FakeClock, LoopThread]]:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http=f"127.0.0.1:{http_port}", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        scoring=ScoringConfig(golden=golden),
        judge=JudgeConfig(**judge),
        probe=probes,
    )
    with sidecar_thread(config, clock) as (car, loop):
        yield car, clock, loop


def outcomes(car: Sidecar) -> int:
    return sum(sum(p.outcomes.values()) for p in car.probes.probers)


# -- end to end ------------------------------------------------------------------------------------


def test_probes_are_joined_scored_judged_and_counted(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", QUERIES)
    one = write_golden(tmp_path / "one.jsonl", QUERIES[:1])
    http = free_port()
    closed = free_port()
    with running_app(f"http://127.0.0.1:{http}/v1/traces") as app:
        base = f"http://127.0.0.1:{app.port}"
        probes = (
            ProbeConfig(name="ask", url=f"{base}/ask", headers={"Authorization": "Bearer t0k", "traceparent": "ignored"},
                        interval=3600.0, concurrency=2),
            ProbeConfig(name="bare", url=f"{base}/bare", interval=3600.0, concurrency=4,
                        response_ids="documents[*].id", response_answer="answer"),
            ProbeConfig(name="plain", url=f"{base}/plain", interval=3600.0, dataset=one),
            ProbeConfig(name="fail", url=f"{base}/fail", interval=3600.0, dataset=one),
            ProbeConfig(name="slow", url=f"{base}/slow", interval=3600.0, timeout=0.3, dataset=one),
            ProbeConfig(name="down", url=f"http://127.0.0.1:{closed}/ask", interval=3600.0, dataset=one),
        )
        # no share of other traffic judged, no lexical estimate for it: a probe's still is
        with sidecar(http, probes, golden, sample_rate=0.0, lexical_max_per_second=0) as (car, clock, _):
            wait_until(lambda: outcomes(car) == 4 + 4 + 1 + 1 + 1 + 1)
            wait_until(lambda: car.assembler.stats().spans_held == 3 * (4 + 4 + 1))
            clock.now += 3.0  # past the grace
            wait_until(lambda: car.pipeline.stats().records == 9)
            v = samples(scrape(car.ports.metrics))
            with urllib.request.urlopen(f"http://127.0.0.1:{car.ports.metrics}/", timeout=10) as response:
                page = response.read().decode()
            clock.now += car.probes.registry.retention  # the unanswered probe traces go missing
            after = samples(scrape(car.ports.metrics))

    # the status page shows each probe's last outcome
    for name, last in (("ask", "ok"), ("bare", "ok"), ("plain", "ok"), ("fail", "http_error"), ("slow", "timeout"),
                       ("down", "error")):
        assert f"<tr><td>{name}</td><td>{last}</td>" in page

    # the app received the golden queries, JSON-escaped inside the template, with our headers
    assert sorted(b["question"] for b in app.bodies["/ask"]) == sorted(q for q, _, _ in QUERIES)
    probe_traces = set()
    for headers in app.headers["/ask"]:
        assert headers["authorization"] == "Bearer t0k" and headers["content-type"] == "application/json"
        match = TRACEPARENT.fullmatch(headers["traceparent"])  # ours, not the configured one
        assert match is not None
        probe_traces.add(match.group(1))
    assert probe_traces == set(app.trace_ids["/ask"])  # the app's server spans continued our traces
    assert app.max_in_flight["/ask"] == 2 and app.max_in_flight["/bare"] == 4  # the concurrency caps

    # source probe: hit rate and MRR from the golden labels vs the app's rankings; counted once
    rag = {"service": "rag-api", "variant": "default"}
    assert value(v, "ragmon_traces_total", **rag) == 4
    for source in ("probe", "golden"):  # the golden source applies as usual
        assert value(v, "ragmon_retrieval_queries_total", **rag, source=source) == 4
        assert value(v, "ragmon_retrieval_hits_total", **rag, source=source, k="1") == 1
        assert value(v, "ragmon_retrieval_hits_total", **rag, source=source, k="3") == 3
        assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **rag, source=source) == pytest.approx(MRR_SUM, abs=1e-12)
    assert value(v, "ragmon_retrieval_mrr", **rag, source="probe", window="5m") == pytest.approx(MRR_SUM / 4, abs=1e-12)
    assert value(v, "ragmon_retrieval_hit_rate", **rag, source="probe", k="1", window="5m") == pytest.approx(0.25, abs=1e-12)

    # /bare: the spans carry no ids (content hashes: golden misses); response_ids gives the ranking
    bare = {"service": "bare-api", "variant": "default"}
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **bare, source="probe") == pytest.approx(MRR_SUM, abs=1e-12)
    assert value(v, "ragmon_retrieval_reciprocal_rank_sum", **bare, source="golden") == 0
    # probes are always judged (sample_rate 0, lexical_max_per_second 0); /bare's answer comes
    # from the response
    docs = [f"{CONTENT} ({d})" for d in QUERIES[0][1]]
    lexical = {"source": "judge", "judge": "lexical"}
    assert lexical_faithfulness(CONTENT, docs) == 1.0 and lexical_faithfulness(TRACE_ANSWER, docs) == 0.0
    assert value(v, "ragmon_faithfulness_count", **bare, **lexical) == 4
    assert value(v, "ragmon_faithfulness_sum", **bare, **lexical) == 4.0
    assert value(v, "ragmon_faithfulness_count", **rag, **lexical) == 4
    plain = {"service": "plain-api", "variant": "default"}
    assert value(v, "ragmon_traces_total", **plain) == 1
    assert (("ragmon_faithfulness_count", frozenset({**plain, **lexical}.items()))) not in v  # not a probe: sampled at 0
    assert ("ragmon_retrieval_queries_total", frozenset({**plain, "source": "probe"}.items())) not in v

    requests = {
        "ask": {"ok": 4}, "bare": {"ok": 4}, "plain": {"ok": 1}, "fail": {"http_error": 1},
        "slow": {"timeout": 1}, "down": {"error": 1},
    }
    for probe, expected in requests.items():
        for outcome in OUTCOMES:
            assert value(v, "ragmon_probe_requests_total", probe=probe, outcome=outcome) == expected.get(outcome, 0), (probe, outcome)
    assert value(v, "ragmon_probe_duration_seconds_count", probe="ask") == 4
    assert value(v, "ragmon_probe_duration_seconds_count", probe="fail") == 1  # an HTTP answer
    assert value(v, "ragmon_probe_duration_seconds_count", probe="slow") == 0
    joined = {"ask": 4, "bare": 4}
    for probe in requests:
        assert value(v, "ragmon_probe_traces_total", probe=probe, result="joined") == joined.get(probe, 0)
        assert value(v, "ragmon_probe_traces_total", probe=probe, result="missing") == 0
    assert value(v, "ragmon_probe_traces_pending") == 3  # plain, fail, slow: "down" never reached the app
    missing = {"plain": 1, "fail": 1, "slow": 1}
    for probe in requests:
        for result in RESULTS:
            expected_after = {"joined": joined.get(probe, 0), "missing": missing.get(probe, 0), "dropped": 0}[result]
            assert value(after, "ragmon_probe_traces_total", probe=probe, result=result) == expected_after, (probe, result)
    assert value(after, "ragmon_probe_traces_pending") == 0


def test_probe_metrics_start_at_zero_and_the_interval_paces_passes(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", QUERIES[:2])
    http = free_port()
    with running_app(f"http://127.0.0.1:{http}/v1/traces") as app:
        probes = (
            ProbeConfig(name="ask", url=f"http://127.0.0.1:{app.port}/ask", interval=60.0),
            ProbeConfig(name="get", url=f"http://127.0.0.1:{app.port}/ask?q={{query}}", method="GET", interval=60.0),
        )
        with sidecar(http, probes, golden) as (car, clock, _):
            ask, get = car.probes.probers
            wait_until(lambda: ask.outcomes["ok"] == 2 and get.outcomes["ok"] == 2)
            clock.now += 30.0
            time.sleep(0.6)  # a few ticks of the schedule: no pass before the interval
            assert ask.outcomes["ok"] == 2
            clock.now += 30.0
            wait_until(lambda: ask.outcomes["ok"] == 4 and get.outcomes["ok"] == 4)
            clock.now += 120.0  # overran by a whole interval: one pass now, not a burst of two
            wait_until(lambda: ask.outcomes["ok"] == 6)
            time.sleep(0.6)
            assert ask.outcomes["ok"] == 6
    # 3 passes x (POST + GET); GET has no body, its query (quotes, backslash, braces, non-ASCII)
    # percent-encoded into the URL's {query}
    assert Counter(app.questions["/ask"]) == {q: 6 for q, _, _ in QUERIES[:2]}
    posts = [h for h, b in zip(app.headers["/ask"], app.bodies["/ask"], strict=True) if b is not None]
    assert len(posts) == 6 and all(h["content-type"] == "application/json" for h in posts)


def test_probes_are_always_judged_by_the_llm_judge(tmp_path: Path) -> None:
    """Sample rate 0 and a per-minute cap of 0 stop every other trace, not the probes'; the
    golden reference answer reaches the judge (answer correctness)."""
    golden = write_golden(tmp_path / "golden.jsonl", QUERIES[:2])
    http = free_port()
    with judge_server_thread(responder=verdict_for) as server, running_app(f"http://127.0.0.1:{http}/v1/traces") as app:
        probes = (ProbeConfig(name="ask", url=f"http://127.0.0.1:{app.port}/ask", interval=3600.0),)
        judge = {"base_url": server.base_url, "model": "judge-model", "sample_rate": 0.0, "max_per_minute": 0}
        with sidecar(http, probes, golden, **judge) as (car, clock, _):
            wait_until(lambda: car.assembler.stats().spans_held == 6)
            clock.now += 3.0
            wait_until(lambda: car.pipeline.stats().records == 2)
            assert car.judge.judge is not None
            wait_until(lambda: car.judge.judge.stats().counts.get(("answer_correctness", "ok"), 0) == 2)
            v = samples(scrape(car.ports.metrics))
    assert len(server.requests) == 2
    for evaluator in ("faithfulness", "answer_relevance", "context_relevance", "answer_correctness"):
        assert value(v, "ragmon_judge_requests_total", evaluator=evaluator, outcome="ok") == 2
        assert value(v, "ragmon_judge_requests_total", evaluator=evaluator, outcome="skipped_rate") == 0
    assert value(v, "ragmon_answer_correctness_count", service="rag-api", variant="default", source="judge", judge="llm") == 2


def test_probe_series_are_exported_at_zero_before_the_first_request(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", QUERIES[:1])
    probes = tuple(ProbeConfig(name=name, url="http://127.0.0.1:9/ask") for name in ("a", "b"))
    car = Sidecar(Config(scoring=ScoringConfig(golden=golden), probe=probes), clock=FakeClock(), environ={})
    v = samples(generate_latest(car.registry).decode())  # not started: no request yet
    for probe in ("a", "b"):
        for outcome in OUTCOMES:
            assert value(v, "ragmon_probe_requests_total", probe=probe, outcome=outcome) == 0
        for result in RESULTS:
            assert value(v, "ragmon_probe_traces_total", probe=probe, result=result) == 0
        assert value(v, "ragmon_probe_duration_seconds_count", probe=probe) == 0
    assert value(v, "ragmon_probe_traces_pending") == 0
    plain = samples(generate_latest(Sidecar(Config(), environ={}).registry).decode())
    assert not any(name.startswith("ragmon_probe") for name, _ in plain)  # no probes, no series


def test_stop_does_not_wait_for_requests_in_flight(tmp_path: Path) -> None:
    golden = write_golden(tmp_path / "golden.jsonl", QUERIES[:1])
    http = free_port()
    with running_app(f"http://127.0.0.1:{http}/v1/traces") as app:
        probes = (ProbeConfig(name="slow", url=f"http://127.0.0.1:{app.port}/slow", interval=3600.0, timeout=30.0),)
        with sidecar(http, probes, golden) as (car, clock, loop):
            wait_until(lambda: len(app.bodies.get("/slow", [])) == 1)
            started = time.monotonic()
            loop.run(car.probes.stop(timeout=1.0))
            assert time.monotonic() - started < 1.0
            clock.now += 3600.0
            time.sleep(0.5)
            assert len(app.bodies["/slow"]) == 1 and sum(car.probes.probers[0].outcomes.values()) == 0


# -- units -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("answer", ("answer",)),
        ("documents[*].id", ("documents", None, "id")),
        ("data.results[0].metadata.doc_id", ("data", "results", 0, "metadata", "doc_id")),
        ("[*]", (None,)),
        ("hits[*][1]", ("hits", None, 1)),
        ("answer text", ("answer text",)),
    ],
)
def test_path_syntax(text: str, steps: tuple[object, ...]) -> None:
    assert parse_path(text) == steps


@pytest.mark.parametrize("text", ["", ".a", "a.", "a..b", "a[", "a[x]", "a[-1]", "a.[0]", "a]"])
def test_bad_paths_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a path"):
        parse_path(text)


def test_select() -> None:
    data = {"documents": [{"id": "a"}, {"title": "no id"}, {"id": 7}], "answer": "yes", "nested": {"list": [[1, 2], [3]]}}
    assert select(data, parse_path("documents[*].id")) == ["a", 7]  # elements lacking the key are skipped
    assert select(data, parse_path("answer")) == ["yes"]
    assert select(data, parse_path("documents[2].id")) == [7]
    assert select(data, parse_path("nested.list[*][0]")) == [1, 3]
    assert select(data, parse_path("missing[*].id")) is None  # not found before [*]: no answer
    assert select(data, parse_path("documents[5].id")) is None
    assert select({"documents": []}, parse_path("documents[*].id")) == []  # found nothing: an empty ranking


def test_body_template_substitutes_inside_the_json() -> None:
    query = 'say "hi" \\ {x}\n'
    template = {"question": "{query}", "messages": [{"role": "user", "content": "Q: {query}"}], "k": 5, "stream": False}
    body = fill_template(template, query)
    assert body == {"question": query, "messages": [{"role": "user", "content": f"Q: {query}"}], "k": 5, "stream": False}
    assert json.loads(json.dumps(body))["question"] == query
    assert template["question"] == "{query}"  # the template is not changed


def _labels(probe: str) -> ProbeLabels:
    return ProbeLabels(probe, {"d1": 1})


def test_registry_bounds_joins_and_counts() -> None:
    registry = ProbeRegistry(capacity=2, retention=10.0)
    registry.add(b"a" * 16, _labels("p"), 0.0)
    registry.add(b"b" * 16, _labels("p"), 1.0)
    registry.add(b"c" * 16, _labels("q"), 2.0)  # full: the oldest ("a") is dropped
    assert len(registry) == 2 and registry.counts[("p", "dropped")] == 1
    assert registry.take(b"a" * 16) is None
    registry.update(b"c" * 16, ("d2", "d1"), "an answer")
    assert registry.take(b"c" * 16) == ProbeLabels("q", {"d1": 1}, None, ("d2", "d1"), "an answer")
    assert registry.take(b"c" * 16) is None and registry.counts[("q", "joined")] == 1  # joined once
    registry.add(b"d" * 16, _labels("q"), 5.0)
    registry.discard(b"d" * 16)  # never reached the service: not missing
    registry.expire(10.9)
    assert len(registry) == 1 and registry.counts[("p", "missing")] == 0
    registry.expire(11.0)
    assert len(registry) == 0 and registry.counts[("p", "missing")] == 1
    assert dict(registry.counts) == {("p", "dropped"): 1, ("q", "joined"): 1, ("p", "missing"): 1}
    with pytest.raises(ValueError):
        ProbeRegistry(capacity=0, retention=1.0)


def test_probe_labels_give_the_judge_the_response_answer_and_the_reference() -> None:
    from ragmon.model import RagRecord

    record = RagRecord(b"t" * 16, "svc", "default", 0, 1, answer="trace answer")
    assert ProbeLabels("p", None).apply(record) is record
    joined = ProbeLabels("p", None, "the reference", None, "response answer").apply(record)
    assert joined.answer == "response answer" and joined.reference_answer == "the reference"


def test_probe_labels_replace_the_record_when_only_one_of_answer_and_reference_changes() -> None:
    """The record is kept as is only when both the answer and the reference are unchanged."""
    from ragmon.model import RagRecord

    record = RagRecord(b"t" * 16, "svc", "default", 0, 1, answer="trace answer", reference_answer="trace reference")
    answered = ProbeLabels("p", None, "probe reference", None, "response answer").apply(record)
    assert (answered.answer, answered.reference_answer) == ("response answer", "trace reference")
    bare = RagRecord(b"t" * 16, "svc", "default", 0, 1, answer="trace answer")
    referenced = ProbeLabels("p", None, "probe reference").apply(bare)
    assert (referenced.answer, referenced.reference_answer) == ("trace answer", "probe reference")


def test_golden_queries_file(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text('{"query": "a", "relevance": {"d1": 2}, "reference_answer": "r"}\n\n{"query": "b"}\n')
    queries = read_golden_queries(str(path))
    assert [(q.query, q.grades, q.reference_answer) for q in queries] == [("a", {"d1": 2}, "r"), ("b", None, None)]
    path.write_text('{"query_id": "q1", "relevant_document_ids": ["d1"]}\n')
    with pytest.raises(InputError, match=r'g.jsonl:1: needs "query"'):
        read_golden_queries(str(path))


@pytest.mark.parametrize(
    ("probe", "problem"),
    [
        ({"url": "ftp://x"}, "probe[0].url: must be an http:// or https:// URL"),
        ({"url": "http://x", "method": "FETCH"}, "probe[0].method: expected one of"),
        ({"url": "http://x", "response_ids": "documents[*]."}, "probe[0].response_ids: 'documents[*].' is not a path"),
        ({"url": "http://x", "response_answer": "a..b"}, "probe[0].response_answer:"),
    ],
)
def test_probe_config_problems_name_their_key(probe: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"scoring": {"golden": "g.jsonl"}, "probe": [probe]})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_probes_need_a_dataset_and_distinct_names() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"probe": [{"url": "http://x"}, {"url": "http://x", "dataset": "d.jsonl"}]})
    assert info.value.problems == [
        "probe[0].dataset: required when [scoring] golden is not set",
        "probe[1].name: 'http://x' is also probe[0]'s name",
    ]
    config = config_from_mapping({"probe": [{"url": "http://x", "dataset": "d.jsonl", "method": "get"}]})
    assert config.probe[0].method == "get"
