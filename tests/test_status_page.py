"""The status page: the renderer (structure, escaping, no external assets), its bounded
keepers (history, worst requests), and a real sidecar fed OTLP spans over HTTP."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from net_helpers import wait_until
from server_helpers import LoopThread, call_soon, sidecar_thread
from test_sidecar import PRICE, FakeClock, scrape, send_rag_traces

from ragmon.sidecar.snapshot import missing_why
from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, JudgeConfig, MetricsConfig, ReceiverConfig
from ragmon.conventions import ConventionOptions, read_trace
from ragmon import catalogue as cat
from ragmon.export.alerts import Holding
from ragmon.export.status import (
    read_rolling,
    show,
    value_name,
    CSP,
    History,
    JudgeView,
    SeriesView,
    StatusSnapshot,
    Worst,
    WorstRequest,
    render,
    sparkline,
)
from ragmon.export.windows import WindowReading
from ragmon.model import AttrValue, RagRecord, Span, Trace
from ragmon.scoring.records import RecordScores, RetrievalScore

HOSTILE = "<script>alert(1)</script>"


def _esc(text: str) -> str:
    import html

    return html.escape(text, quote=True)


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of h2 headings."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.h2: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_h2 = tag == "h2"

    def handle_endtag(self, tag: str) -> None:
        self._in_h2 = False

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.h2.append(data)


def parse(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    return tags


def hostile_snapshot() -> StatusSnapshot:
    return StatusSnapshot(
        rows=[(HOSTILE, HOSTILE)],
        series=[SeriesView(HOSTILE, HOSTILE, {HOSTILE: 0.5, "MRR label": 0.25}, {"MRR label": [0.1, 0.2, 0.3]}, {HOSTILE: HOSTILE})],
        received={HOSTILE: 3, "http": 9},
        rejected={("http", HOSTILE): 2},
        unmeasured=[HOSTILE],
        conventions={HOSTILE: 1, "genai": 2},
        judge=JudgeView(HOSTILE, HOSTILE, 0.125, 1.0, {HOSTILE: 4}),
        probes={HOSTILE: (HOSTILE, {HOSTILE: 1}), "p": ("", {})},
        worst=[WorstRequest(1.0, HOSTILE, HOSTILE, HOSTILE, HOSTILE)],
        alerts=[Holding(HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE)],
        windows=(HOSTILE, HOSTILE),
        k=5,
    )


def test_every_shown_string_is_escaped_and_nothing_is_loaded_from_outside() -> None:
    page = render(hostile_snapshot())
    assert "<script" not in page.lower()
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 29  # each of the 29 places it was put
    tags = parse(page)
    assert {t for t, _ in tags.tags} <= {
        "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "table", "tr", "th", "td", "b",
        "span", "svg", "polyline", "p", "a", "code",
    }
    # no external asset: the only link is /metrics, no src, no url() in the style
    assert [a.get("href") for t, a in tags.tags if t == "a"] == ["/metrics"]
    assert not any("src" in a for _, a in tags.tags)
    assert "url(" not in page and "@import" not in page


def test_the_page_has_its_sections_refreshes_itself_and_draws_a_sparkline() -> None:
    page = render(hostile_snapshot())
    tags = parse(page)
    assert tags.h2 == [
        "Rolling values", "Alerts that hold now", "Receivers", "Conventions detected", "Not measured", "Judge", "Probes",
        "Worst recent requests",
    ]
    assert "<span class='range'>0.100 – 0.300</span>" in page  # the sparkline's range, in the value's unit
    assert "<tr><td>OpenTelemetry GenAI</td><td>2</td></tr>" in page
    assert ("meta", {"http-equiv": "refresh", "content": "10"}) in tags.tags
    polylines = [a for t, a in tags.tags if t == "polyline"]
    assert len(polylines) == 1  # only MRR has >= 2 points
    points = [tuple(map(float, p.split(","))) for p in (polylines[0]["points"] or "").split()]
    assert [x for x, _ in points] == [1.0, 60.0, 119.0]
    assert [y for _, y in points] == [23.0, 12.0, 1.0]  # low at the bottom, high at the top
    assert "0.125" in page and "<td>spent USD</td><td>0.1250 (budget 1 USD/hour)</td>" in page
    assert "<th></th>" not in page
    assert "<tr><td>p</td><td>not run yet</td><td></td></tr>" in page


def test_an_empty_snapshot_says_so() -> None:
    page = render(StatusSnapshot(rows=[]))
    assert page.count("None yet.") == 2  # no convention, no bad request
    for text in ("No request scored yet.", "No spans received yet.", "Everything configured is measured.",
                 "No probes configured.", "None yet."):
        assert text in page


@pytest.mark.parametrize("points", [[], [0.5], [float("nan"), 1.0]])
def test_a_sparkline_needs_two_finite_points(points: Sequence[float]) -> None:
    assert sparkline(points) == ""


def test_a_flat_sparkline_stays_in_the_box() -> None:
    assert 'points="1.0,23.0 119.0,23.0"' in sparkline([2.0, 2.0])


def test_history_keeps_one_point_per_interval_the_last_n_and_at_most_max_series() -> None:
    history = History(interval=10, points=3, max_series=2)
    reads = 0

    def read() -> dict[tuple[str, str], dict[str, float]]:
        nonlocal reads
        reads += 1
        return {("s", "v"): {"a": float(reads), "b": 1.0, "c": 2.0}}

    assert history.sample(0, read)
    assert not history.sample(9.9, read)  # not due: not even read
    assert reads == 1
    for t in (10, 20, 30, 40):
        assert history.sample(t, read)
    assert history.of("s", "v") == {"a": [3.0, 4.0, 5.0], "b": [1.0, 1.0, 1.0]}
    assert history.kept_points() == 6 == history.max_series * history.points
    assert history.refused == 5  # "c" on each of the 5 samples


def _record(n: int, service: str = "s") -> RagRecord:
    return RagRecord(trace_id=n.to_bytes(16, "big"), service=service, variant="v", start_ns=0, end_ns=1)


def _missed(k: int) -> RecordScores:
    score = RetrievalScore("label", 0.0, {1: 0.0, k: 0.0}, {}, {}, {})
    return RecordScores(retrieval=(score,), unlabelled=False, calls=())


def test_worst_keeps_the_worst_few_worst_first_and_cuts_long_strings() -> None:
    worst = Worst(size=3)
    for n, value in enumerate([0.9, 0.1, 0.5, 0.3, 1.0, 0.7]):
        worst.judged(_record(n), "judge", "lexical", {"faithfulness": value})
    worst.judged(_record(9), "judge", "lexical", {"coherence": 0.0})  # not faithfulness: not kept
    assert [(w.trace_id[-1], w.what) for w in worst.entries()] == [
        ("1", "faithfulness 0.10 (judge, lexical)"),
        ("3", "faithfulness 0.30 (judge, lexical)"),
        ("2", "faithfulness 0.50 (judge, lexical)"),
    ]
    worst.scored(_record(7, service="x" * 5000), _missed(5))
    top = worst.entries()[0]
    assert top.what == "missed retrieval: no relevant document in the top 5 (label)"
    assert len(top.service) == 200 and len(worst.entries()) == 3


def test_of_equally_bad_requests_the_newest_are_kept_newest_first() -> None:
    """Every missed retrieval is equally bad: the recent ones are kept, whatever their trace ids."""
    worst = Worst(size=2)
    for n in (9, 8, 7, 6):  # trace ids falling as requests arrive
        worst.scored(_record(n), _missed(5))
    assert [w.trace_id[-1] for w in worst.entries()] == ["6", "7"]


def test_a_hit_is_not_a_missed_retrieval() -> None:
    worst = Worst()
    worst.scored(_record(1), RecordScores(retrieval=(RetrievalScore("label", 0.5, {1: 0.0, 3: 1.0}, {}, {}, {}),), unlabelled=False, calls=()))
    assert worst.entries() == []


# -- a real sidecar ----------------------------------------------------------------------------


class _Recording(HttpExporter):
    """The SDK's OTLP/HTTP exporter, remembering the trace ids it sent."""

    trace_ids: list[str]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.trace_ids.extend(f"{s.context.trace_id:032x}" for s in spans if s.parent is None and s.context)
        return super().export(spans)


@pytest.fixture
def fed() -> Iterator[tuple[Sidecar, FakeClock, LoopThread, list[str]]]:
    """A sidecar that scored the three test traces of a hostile-named service."""
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        pricing={"gpt-4o-mini": PRICE},
        judge=JudgeConfig(sample_rate=1.0),
    )
    with sidecar_thread(config, clock) as (car, loop):
        exporter = _Recording(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
        exporter.trace_ids = []
        send_rag_traces(exporter, HOSTILE)
        wait_until(lambda: car.assembler.stats().spans_held == 9)
        clock.now += 3.0
        wait_until(lambda: car.pipeline.stats().records == 3)
        yield car, clock, loop, exporter.trace_ids


def get_page(port: int) -> tuple[str, dict[str, str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
        return response.read().decode(), dict(response.headers)


def test_a_real_sidecar_shows_its_values_history_receivers_and_worst_requests(
    fed: tuple[Sidecar, FakeClock, LoopThread, list[str]],
) -> None:
    car, clock, loop, trace_ids = fed
    for _ in range(3):  # three points of history, 10 s apart
        assert call_soon(loop, car.board.sample_history)
        clock.now += 10.0
    page, headers = get_page(car.ports.metrics or 0)
    assert headers["Content-Security-Policy"] == CSP
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "<script" not in page.lower()
    assert "<h3>&lt;script&gt;alert(1)&lt;/script&gt; / B</h3>" in page
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td><span class='num'>([^<]+)</span>", page))
    # hit@5 label: 2 of 3 (the third ranking misses); MRR (1 + 1/2 + 0) / 3; no errors
    assert rows["hit rate@5 label"] == "0.667"
    assert rows["MRR label"] == "0.500"
    assert rows["error ratio"] == "0.000"
    assert rows["cost per request"] == f"{(100 * 0.15 + 20 * 0.60) / 1e6:.7f} USD"  # 2.7e-05: three digits, no exponent
    assert re.fullmatch(r"\d+(\.\d+)? ms", rows["latency p95"])
    assert sorted(rows) == sorted([
        "MRR label", "NDCG@5 label", "cost per request", "error ratio", "hit rate@5 label", "precision@5 label",
        "recall@5 label", "latency p50", "latency p95", "latency p99", "latency generation p95", "latency retrieval p95",
    ])  # no faithfulness: the documents carry no text for the lexical estimate
    assert page.count("<polyline") == len(rows)  # every value has 3 points of history
    assert page.count("<span class='range'>") == len(rows)
    # each relevance source without a value says why; the one shown (label) says nothing
    assert "retrieval quality from label" not in page
    for source, why in (
        ("golden", "no golden set (scoring.golden)"), ("probe", "no probes ([[probes]])"),
        ("feedback", "no feedback joined to a scored request (POST /v1/feedback)"),
        ("judge", "needs the LLM judge with context_relevance among judge.evaluators"),
    ):
        assert f"<p>retrieval quality from {source}: not measured over the last 5m: {_esc(why)}.</p>" in page
    assert "<h2>Alerts that hold now</h2>" in page and "the last 5m against the last 1h" in page
    assert "<tr><td>http</td><td>9</td><td>none</td></tr>" in page
    assert "<tr><td>OpenInference</td><td>3</td></tr>" in page
    # the missed retrieval is the worst request, with its trace id
    missed = re.findall(r"<code>([0-9a-f]{32})</code></td><td>[^<]*</td><td>B</td><td><span class='bad'>missed retrieval", page)
    assert missed == [trace_ids[2]]
    assert set(re.findall(r"<code>([0-9a-f]{32})</code>", page)) <= set(trace_ids)
    assert "lexical" in page and "No probes configured." in page


def test_the_timer_samples_the_history_and_page_views_scrapes_and_ingest_do_not() -> None:
    clock = FakeClock()
    config = Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0"))
    with sidecar_thread(config, clock, history_interval=0.05) as (car, _):
        send_rag_traces(HttpExporter(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10), "timed")
        wait_until(lambda: car.assembler.stats().spans_held == 9)
        clock.now += 3.0
        wait_until(lambda: car.pipeline.stats().records == 3)
        clock.now += 0.1  # the fake clock makes one point due per step
        wait_until(lambda: len(car.history) > 0, what="the timer's first point with values")
        first = car.history.kept_points()
        assert first == len(car.history) > 0  # one point a series: no other is due until the clock moves
        get_page(car.ports.metrics or 0)
        scrape(car.ports.metrics or 0)
        assert car.history.kept_points() == first  # page views and scrapes add nothing
        clock.now += 0.1
        wait_until(lambda: car.history.kept_points() == 2 * first, what="the timer's second point")


def test_the_history_stays_within_its_bound(fed: tuple[Sidecar, FakeClock, LoopThread, list[str]]) -> None:
    car, clock, loop, _ = fed
    for _ in range(car.history.points + 5):
        call_soon(loop, car.board.sample_history)
        clock.now += 10.0
    history = car.history.of(HOSTILE, "B")
    assert history and all(len(points) == car.history.points for points in history.values())
    assert car.history.kept_points() == car.history.points * len(history)


def send_unmeasurable_traces(exporter: HttpExporter) -> None:
    """One request whose answer its documents do not support, one whose retriever span lists no
    documents, one whose model call reports no token counts."""
    provider = TracerProvider(resource=Resource.create({"service.name": "shop", "ragmon.variant": "A"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    for documents, usage in ((True, True), (False, True), (True, False)):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the refund window?")
            root.set_attribute("output.value", "The moon is made of green cheese.")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                if documents:
                    span.set_attribute("retrieval.documents.0.document.id", "d1")
                    span.set_attribute("retrieval.documents.0.document.content", "Refunds are accepted within 30 days.")
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "gpt-4o-mini")
                if usage:
                    span.set_attribute("llm.token_count.prompt", 100)
                    span.set_attribute("llm.token_count.completion", 20)
    provider.shutdown()


def test_the_page_names_the_unfaithful_answer_and_says_what_could_not_be_measured(
    fed: tuple[Sidecar, FakeClock, LoopThread, list[str]],
) -> None:
    car, clock, _, _ = fed
    exporter = _Recording(endpoint=f"http://127.0.0.1:{car.ports.http}/v1/traces", timeout=10)
    exporter.trace_ids = []
    send_unmeasurable_traces(exporter)
    wait_until(lambda: car.assembler.stats().spans_held == 9)
    clock.now += 3.0
    wait_until(lambda: car.pipeline.stats().records == 6)
    page, _ = get_page(car.ports.metrics or 0)
    assert "<p>1 of 6 requests: no document ids on retriever spans: set scoring.document_id" in page
    assert "<p>1 of 6 requests: model calls without token counts" in page
    # shop / A carried no relevance labels: the retrieval values B has show as missing, with why
    section = page.split("<h3>shop / A</h3>", 1)[1].split("</table>", 1)[0]
    assert ("<tr><td>hit rate@5 label</td><td><span class='num'>—</span></td>"
            "<td>no request of this variant carried relevance labels over the last 5m (other variants have this value)</td></tr>") in section
    assert "<td>latency p95</td><td><span class='num'>" in section and "latency p95</td><td><span class='num'>—" not in section
    unfaithful = re.findall(r"<code>([0-9a-f]{32})</code></td><td>shop</td><td>A</td><td><span class='bad'>faithfulness 0\.00 ", page)
    assert sorted(unfaithful) == sorted([exporter.trace_ids[0], exporter.trace_ids[2]])


def _trace(*children: dict[str, AttrValue]) -> Trace:
    tid = b"\x01" * 16
    root = Span(tid, b"\x01" * 8, b"", "root", 0, 10, attributes={"input.value": "q", "output.value": "a"})
    spans = [root] + [
        Span(tid, bytes([2 + i]) * 8, b"\x01" * 8, f"child{i}", 1 + i, 5 + i, attributes=attributes)
        for i, attributes in enumerate(children)
    ]
    return Trace(tid, tuple(spans), root)


_OI_RETRIEVER: dict[str, AttrValue] = {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "d"}


@pytest.mark.parametrize(
    ("children", "expected"),
    [
        ([_OI_RETRIEVER], {"openinference"}),
        ([{"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": "[]"}], {"genai"}),
        ([_OI_RETRIEVER, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}], {"openinference", "genai"}),
        ([_OI_RETRIEVER, {"llm.request.type": "chat", "gen_ai.request.model": "m"}], {"openinference", "openllmetry"}),
        ([_OI_RETRIEVER, {"gen_ai.request.model": "m"}], {"openinference", "genai"}),
    ],
)
def test_a_record_says_which_conventions_it_was_read_by(children: list[dict[str, AttrValue]], expected: set[str]) -> None:
    record = read_trace(_trace(*children), ConventionOptions())
    assert isinstance(record, RagRecord) and record.conventions == expected


def test_a_value_other_variants_have_shows_as_missing_with_why() -> None:
    page = render(StatusSnapshot(rows=[], series=[
        SeriesView("s", "A", {"MRR label": 0.5, "faithfulness llm": 0.9}),
        SeriesView("s", "B", {"MRR label": 0.4}, missing={"faithfulness llm": "no value for this variant over the last 5m"}),
    ], windows=("5m", "1h"), k=5))
    assert "<tr><td>faithfulness llm</td><td><span class='num'>—</span></td><td>no value for this variant over the last 5m</td></tr>" in page


@pytest.mark.parametrize(("name", "why"), [
    ("hit rate@5 label", "no request of this variant carried relevance labels"),
    ("MRR golden", "no query of this variant matched the golden set"),
    ("NDCG@5 probe", "no probe request reached this variant"),
    ("recall@5 feedback", "no feedback was joined to a request of this variant"),
    ("precision@5 judge", "no retrieval of this variant was judged (the judge reads a 10% sample)"),
    ("faithfulness llm", "no request of this variant was judged (the judge reads a 10% sample)"),
    ("latency retrieval p95", "no request of this variant had a retrieval stage"),
    ("feedback thumbs", "no 'thumbs' feedback for this variant"),
    ("cost per request", "no priced model call in this variant's requests"),
])
def test_a_missing_value_says_why_for_its_kind(name: str, why: str) -> None:
    assert missing_why(name, 0.1) == why


def test_pairs_past_the_series_budget_are_counted_not_shown() -> None:
    views = [SeriesView(f"s{i}", "v", {"MRR label": 0.5}) for i in range(2)]
    page = render(StatusSnapshot(rows=[], series=views, series_hidden=3))
    assert page.count("<h3>") == 2
    assert "<p>3 more service/variant pairs not shown (series budget).</p>" in page
    assert "not shown" not in render(StatusSnapshot(rows=[], series=views))


def test_a_sidecar_shows_and_keeps_no_more_than_its_series_budget() -> None:
    clock = FakeClock()
    config = Config(
        receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""),
        metrics=MetricsConfig(listen="127.0.0.1:0", max_series=1),
        pricing={"gpt-4o-mini": PRICE},
    )
    with sidecar_thread(config, clock) as (car, loop):
        endpoint = f"http://127.0.0.1:{car.ports.http}/v1/traces"
        send_rag_traces(HttpExporter(endpoint=endpoint, timeout=10), "first")
        send_rag_traces(HttpExporter(endpoint=endpoint, timeout=10), "second")
        wait_until(lambda: car.assembler.stats().spans_held == 18)
        clock.now += 3.0
        wait_until(lambda: car.pipeline.stats().records == 6)
        for _ in range(3):
            call_soon(loop, car.board.sample_history)
            clock.now += 10.0
        page, _ = get_page(car.ports.metrics or 0)
    assert page.count("<h3>") == 1
    assert "<p>1 more service/variant pairs not shown (series budget).</p>" in page
    assert len(car.history) == 1 and car.history.refused > 0
    assert car.history.kept_points() == 3


def _mean(gauge: str, source: str, detail: str, window: float, value: float, samples: int = 10) -> WindowReading[tuple[str, str, str, str, str]]:
    return WindowReading((gauge, "s", "a", source, detail), window, samples, value)


def test_read_rolling_shows_every_value_over_the_shortest_window_at_the_headline_k() -> None:
    means = {
        cat.RETRIEVAL_HIT_RATE.name: [
            _mean(cat.RETRIEVAL_HIT_RATE.name, "label", "1", 300.0, 0.1), _mean(cat.RETRIEVAL_HIT_RATE.name, "label", "5", 300.0, 0.5),
            _mean(cat.RETRIEVAL_HIT_RATE.name, "label", "5", 3600.0, 0.9), _mean(cat.RETRIEVAL_HIT_RATE.name, "golden", "5", 300.0, 0.25),
        ],
        cat.RETRIEVAL_MRR.name: [_mean(cat.RETRIEVAL_MRR.name, "feedback", "", 3600.0, 0.4)],
        cat.SCORE_MEANS["faithfulness"].name: [
            _mean(cat.SCORE_MEANS["faithfulness"].name, "judge", "llm", 300.0, 0.8),
            _mean(cat.SCORE_MEANS["faithfulness"].name, "app", "ragas", 300.0, 0.6),
        ],
        cat.USER_FEEDBACK_MEAN.name: [_mean(cat.USER_FEEDBACK_MEAN.name, "feedback", "thumbs", 300.0, 0.75)],
        cat.ERROR_RATIO.name: [WindowReading((cat.ERROR_RATIO.name, "s", "b", "", ""), 300.0, 0, None)],
    }
    latency = [
        WindowReading(("s", "a", "total"), 300.0, 4, None, {0.5: 1.5, 0.95: 2.5, 0.99: 3.0}),
        WindowReading(("s", "a", "retrieval"), 300.0, 4, None, {0.5: 0.1, 0.95: 0.2, 0.99: 0.3}),
        WindowReading(("s", "a", "total"), 3600.0, 9, None, {0.5: 9.0, 0.95: 9.0, 0.99: 9.0}),
    ]
    assert read_rolling(means, latency, 5) == {
        ("s", "a"): {
            "hit rate@5 label": 0.5, "hit rate@5 golden": 0.25, "MRR feedback": 0.4, "faithfulness llm": 0.8,
            "faithfulness ragas (app)": 0.6, "feedback thumbs": 0.75, "latency p50": 1.5, "latency p95": 2.5,
            "latency p99": 3.0, "latency retrieval p95": 0.2,
        },
    }
    assert read_rolling({}, [], 5) == {}


def test_every_rolling_family_ragmon_exports_has_a_row_on_the_page() -> None:
    """A new rolling gauge without a name on the page fails here."""
    for family in cat.MEAN_GAUGES:
        key = (family.name, "s", "a", "src", "5" if "k" in family.labels else "d")
        name = value_name(family.name, key, 5)
        assert name, family.name
        page = render(StatusSnapshot(rows=[], series=[SeriesView("s", "a", read_rolling(
            {family.name: [WindowReading(key, 300.0, 1, 0.5)]}, [], 5)[("s", "a")])]))
        assert f"<td>{name}</td>" in page.replace("&#x27;", "'"), family.name
    rolling = read_rolling({}, [WindowReading(("s", "a", "total"), 300.0, 1, None, {0.5: 0.2, 0.95: 0.3, 0.99: 0.4})], 5)
    assert set(rolling["s", "a"]) == {"latency p50", "latency p95", "latency p99"}  # ragmon_latency_seconds


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("cost per request", 2.237e-05, "0.0000224 USD"),
    ("cost per request", 0.5, "0.500 USD"),
    ("cost per request", 12.345, "12.35 USD"),
    ("cost per request", 0.0, "0.00 USD"),
    ("latency p95", 0.0123, "12.3 ms"),
    ("latency p95", 0.25, "250 ms"),
    ("latency p95", 2.5, "2.50 s"),
    ("hit rate@5 label", 2 / 3, "0.667"),
    ("MRR label", float("nan"), "nan"),
])
def test_values_are_shown_in_their_units(name: str, value: float, shown: str) -> None:
    assert show(name, value) == shown
