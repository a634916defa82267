"""The metrics server: the bearer token on /metrics and the status page, the scrape's output
(the encoders' own, per Accept and Accept-Encoding, and the name[] filter; prometheus_client's
aiohttp handler), and ingest and health answering while a big scrape renders."""

from __future__ import annotations

import asyncio
import gc
import gzip
import re
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from opentelemetry.trace import Tracer
from otel_helpers import record_spans, to_protobuf
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from server_helpers import call_soon, post, scrape, scrape_async, sidecar_thread
from test_metrics_bounds import _observe_all
from test_sidecar import FakeClock

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config, MetricsConfig, ReceiverConfig
from ragmon.export.exporter import RagMetrics
from ragmon.export.server import gzip_accepted, metrics_app
from ragmon.export.status import StatusSnapshot, render

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

TOKEN = "s3cret-token"


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _raw_status(port: int, request: bytes) -> int:
    """The status code of a hand-written HTTP/1.1 request (any header bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        reply = b""
        while b"\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1])


@pytest.fixture
def guarded() -> Iterator[Sidecar]:
    config = Config(
        receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0", token=TOKEN)
    )
    with sidecar_thread(config, FakeClock()) as (car, _):
        yield car


@pytest.mark.parametrize("path", ["/metrics", "/"])
@pytest.mark.parametrize(
    "authorization",
    [None, "", f"Basic {TOKEN}", "Bearer wrong", f"Bearer {TOKEN}x", f"Bearer{TOKEN}", TOKEN, "Bearer"],
)
def test_metrics_and_status_page_refuse_a_missing_or_wrong_token(
    guarded: Sidecar, path: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    status, response_headers, body = _get(guarded.ports.metrics or 0, path, headers)
    assert status == 401
    assert response_headers.get("WWW-Authenticate") == "Bearer"
    assert b"ragmon_" not in body


@pytest.mark.parametrize("path", ["/metrics", "/"])
@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_token_opens_metrics_and_status_page_whatever_the_schemes_case(guarded: Sidecar, path: str, scheme: str) -> None:
    status, _, body = _get(guarded.ports.metrics or 0, path, {"Authorization": f"{scheme} {TOKEN}"})
    assert status == 200
    assert (b"ragmon_build_info" if path == "/metrics" else b"<h1>ragmon</h1>") in body


def test_health_probes_need_no_token(guarded: Sidecar) -> None:
    for path, want in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
        status, _, body = _get(guarded.ports.metrics or 0, path)
        assert (status, body) == (200, want)


def test_a_non_utf8_authorization_header_is_refused_not_an_error(guarded: Sidecar) -> None:
    port = guarded.ports.metrics or 0
    for path in (b"/metrics", b"/"):
        for value in (b"Bearer \xff\xfe\xfd", b"\xc3\x28 " + TOKEN.encode(), b"Bearer " + TOKEN.encode() + b"\xff"):
            request = b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + value + b"\r\nConnection: close\r\n\r\n"
            assert _raw_status(port, request) == 401
    ok = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\nConnection: close\r\n\r\n"
    assert _raw_status(port, ok) == 200


def _app_get(app: web.Application, path: str) -> tuple[int, str, str]:
    """GET ``path`` of ``app`` on a test server: (status, Content-Type as sent, body)."""

    async def get() -> tuple[int, str, str]:
        async with TestServer(app) as server, ClientSession() as session:
            async with session.get(server.make_url(path)) as response:
                return response.status, response.headers["Content-Type"], await response.text()

    return asyncio.run(get())


def test_readyz_answers_503_not_running_until_ready() -> None:
    app = metrics_app(CollectorRegistry(), token="", status_page=lambda: "", ready=lambda: False)
    assert _app_get(app, "/readyz") == (503, "text/plain; charset=utf-8", "not running\n")
    app = metrics_app(CollectorRegistry(), token="", status_page=lambda: "", ready=lambda: True)
    assert _app_get(app, "/readyz") == (200, "text/plain; charset=utf-8", "ready\n")


def test_the_status_page_is_html_with_its_rows_and_notes_escaped() -> None:
    rows = [("queue", "3 <spans>"), ("a&b", "ok")]
    notes = ["no judge: set <endpoint>", "second note"]
    page = render(StatusSnapshot(rows, unmeasured=notes))
    assert "<tr><td><b>queue</b></td><td>3 &lt;spans&gt;</td></tr><tr><td><b>a&amp;b</b></td><td>ok</td></tr>" in page
    assert "<p>no judge: set &lt;endpoint&gt;</p><p>second note</p>" in page
    app = metrics_app(CollectorRegistry(), token="", status_page=lambda: page, ready=lambda: True)
    assert _app_get(app, "/") == (200, "text/html; charset=utf-8", page)


# -- the scrape's bytes ---------------------------------------------------------------------


def _filled_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    metrics = RagMetrics(registry, ks=(1, 3), windows=(300.0, 3600.0), max_label_values=10, clock=lambda: 10.0, max_series=5)
    _observe_all(metrics, [(f"s{a}", f"v{b}", "m") for a in range(4) for b in range(3)])  # some fold: budget 5
    return registry


@pytest.mark.parametrize(
    "accept",
    ["", "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "application/openmetrics-text; version=1.0.0; charset=utf-8"],
)
def test_scrape_writes_what_the_encoders_write_for_the_registry(accept: str) -> None:
    registry = _filled_registry()
    generate_latest(registry)  # fold in what is buffered: from now on every scrape is the same
    encode, content_type = choose_encoder(accept)  # what /metrics called on the registry before
    want = encode(registry)
    assert want.startswith(b"# HELP")
    body, headers = scrape(registry, accept)
    assert (body, headers) == (want, {"Content-Type": content_type})
    assert b'ragmon_traces_total{service="other",variant="other"}' in body
    if "openmetrics" in accept:
        assert want == generate_openmetrics(registry) and b"# {trace_id=" in body
    zipped, headers = scrape(registry, accept, "deflate, gzip;q=0.8")
    assert headers == {"Content-Type": content_type, "Content-Encoding": "gzip"}
    assert gzip.decompress(zipped) == want


def test_gzip_accepted_reads_the_header() -> None:
    assert gzip_accepted("gzip") and gzip_accepted("br, GZIP;q=0.5") and gzip_accepted("gzip;q=1")
    assert not gzip_accepted("") and not gzip_accepted("gzip;q=0") and not gzip_accepted("deflate, br")


def test_metrics_endpoint_negotiates_format_and_compression() -> None:
    config = Config(receiver=ReceiverConfig(http="", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0"))
    with sidecar_thread(config, FakeClock()) as (car, _):
        port = car.ports.metrics or 0
        status, headers, body = _get(port, "/metrics", {"Accept-Encoding": "gzip"})
        assert (status, headers["Content-Encoding"], headers["Content-Type"]) == (200, "gzip", CONTENT_TYPE_PLAIN_0_0_4)
        assert b"ragmon_build_info" in gzip.decompress(body)
        status, headers, body = _get(port, "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert "Content-Encoding" not in headers
        assert body.endswith(b"# EOF\n")


def _families(text: bytes) -> set[str]:
    return set(re.findall(rb"^# TYPE (\S+) ", text, flags=re.MULTILINE))


def test_the_name_filter_returns_only_the_named_series(guarded: Sidecar) -> None:
    """prometheus_client's ``name[]`` filter (series names), behind the token, with OpenMetrics
    and gzip as asked."""
    port = guarded.ports.metrics or 0
    query = "/metrics?name[]=ragmon_build_info&name[]=ragmon_queue_spans&name[]=ragmon_spans_received_total"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, _, body = _get(port, query, auth)
    assert status == 200
    assert _families(body) == {b"ragmon_build_info", b"ragmon_queue_spans", b"ragmon_spans_received_total"}
    assert b'ragmon_spans_received_total{protocol="http"}' in body
    assert b"ragmon_spans_received_created" not in body  # a series not named
    status, headers, body = _get(port, query, {**auth, "Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"})
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gzip.decompress(body)
    assert _families(text) == {b"ragmon_build_info", b"ragmon_queue_spans", b"ragmon_spans_received"} and text.endswith(b"# EOF\n")
    status, _, body = _get(port, query)
    assert status == 401 and b"ragmon_" not in body
    status, _, body = _get(port, "/metrics?name[]=no_such_series", auth)
    assert (status, body) == (200, b"")


def test_the_name_filter_on_ragmons_own_families() -> None:
    """The filter also reaches families built at scrape time (histograms, rolling gauges)."""
    registry = _filled_registry()
    body, _ = scrape(registry, query="name[]=ragmon_traces_total&name[]=ragmon_retrieval_mrr")
    assert _families(body) == {b"ragmon_traces_total", b"ragmon_retrieval_mrr"}
    assert b'ragmon_traces_total{service="other",variant="other"}' in body
    assert b'ragmon_retrieval_mrr{' in body


@pytest.mark.parametrize("accept_encoding", ["", "gzip;q=0", "deflate", "br, deflate;q=0.5", "identity"])
def test_no_compression_unless_gzip_is_accepted(accept_encoding: str) -> None:
    body, headers = scrape(_filled_registry(), "", accept_encoding)
    assert "Content-Encoding" not in headers and body.startswith(b"# HELP")


def test_a_library_handler_that_awaits_is_refused_not_left_half_run() -> None:
    """The handler runs in a worker thread without an event loop: one that awaited (a future
    prometheus_client) is an error, not a hang."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from ragmon.export.server import _render

    async def waits(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0)
        return web.Response()

    async def answers(_: web.Request) -> web.StreamResponse:
        return web.Response(text="x")

    request = make_mocked_request("GET", "/metrics")
    message = "prometheus_client's aiohttp handler awaited: it cannot run in a worker thread"
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):
        _render(waits, request)
    assert _render(answers, request).status == 200


# -- a big scrape does not stop the loop --------------------------------------------------------


def _spans_body() -> bytes:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")

    return to_protobuf(record_spans(build))


def _latencies(port: int, http: int, body: bytes, until: threading.Event, out: list[float]) -> None:
    """Alternate /healthz and OTLP posts until ``until`` is set; each one's seconds in ``out``."""
    while not until.is_set():
        start = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=60) as response:
            assert response.status == 200
        status, _, _ = post(f"http://127.0.0.1:{http}/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        assert status == 200
        out.append(time.perf_counter() - start)


async def _awaited(future: asyncio.Future[None]) -> None:
    await future


def test_ingest_and_health_answer_while_a_big_scrape_renders() -> None:
    """100 services × 100 variants at the default budget: a scrape of ~10 MB and ~2 s. While it
    renders, /healthz and OTLP posts keep being answered: the loop is held for at most a
    fraction of the scrape (one family's copy, or a GC pass), not for its whole render. Run
    as ``ragmon run`` runs it (``own_process``): start-up's objects frozen, here the test
    process's whole heap, which a full collection would otherwise scan for seconds; thawed
    when the module ends, by tests/conftest.py's ``young_heap``."""
    config = Config(receiver=ReceiverConfig(http="127.0.0.1:0", grpc=""), metrics=MetricsConfig(listen="127.0.0.1:0", max_label_values=100))
    frozen = gc.get_freeze_count()
    with sidecar_thread(config, FakeClock(), own_process=True) as (car, loop):  # as ragmon run
        assert car._life.prices is not None
        loop.run(_awaited(car._life.prices))  # the price table in: start-up is over
        assert gc.get_freeze_count() > frozen  # start-up's objects frozen (here: the test process's)
        call_soon(loop, lambda: _observe_all(car.metrics, [(f"svc{a}", f"v{b}", "m") for a in range(100) for b in range(100)]))
        port, http, body = car.ports.metrics or 0, car.ports.http or 0, _spans_body()
        idle: list[float] = []
        quiet = threading.Event()
        threading.Timer(1.0, quiet.set).start()
        _latencies(port, http, body, quiet, idle)

        busy: list[float] = []
        done = threading.Event()
        client = threading.Thread(target=_latencies, args=(port, http, body, done, busy))
        client.start()
        renders = []
        for _ in range(2):
            start = time.perf_counter()
            status, _, text = _get(port, "/metrics")
            renders.append(time.perf_counter() - start)
            assert status == 200 and len(text) > 5_000_000
        done.set()
        client.join()
    render = min(renders)
    worst, p99 = max(busy), sorted(busy)[int(0.99 * (len(busy) - 1))]
    print(f"render {render:.2f} s; idle p50 {statistics.median(idle) * 1e3:.1f} ms; "
          f"during scrapes n={len(busy)} p50 {statistics.median(busy) * 1e3:.1f} p99 {p99 * 1e3:.1f} max {worst * 1e3:.1f} ms")
    assert render > 0.5  # big enough that a scrape holding the loop would show
    assert len(busy) >= 10
    assert worst < 0.5 * render


def test_scrape_rendering_moves_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Families are collected on the loop one at a time; the encoding runs in another thread."""
    registry = _filled_registry()
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = generate_latest

    def spy(collector: object) -> bytes:
        seen.append(threading.get_ident())
        return real(collector)  # type: ignore[arg-type]

    monkeypatch.setattr("prometheus_client.exposition.generate_latest", spy)

    async def run() -> tuple[bytes, int]:
        ticks = 0
        done = False

        async def tick() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(tick())
        body, _ = await scrape_async(registry)
        done = True
        await task
        return body, ticks

    body, ticks = asyncio.run(run())
    assert seen and loop_thread not in seen
    families = len(re.findall(rb"^# TYPE ", body, flags=re.MULTILINE))
    assert ticks >= families  # the loop ran between families


class _GcWitness:
    """A collector noting whether the cycle collector is on while a scrape collects it."""

    def __init__(self, fail: bool = False) -> None:
        self.seen: list[bool] = []
        self.fail = fail

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # registering collects nothing

    def collect(self) -> Iterator[GaugeMetricFamily]:
        import gc

        self.seen.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("a collector bug")
        yield GaugeMetricFamily("witness", "gc state", value=1.0)


@pytest.mark.parametrize("own_process", [True, False])
def test_ragmons_own_process_holds_the_cycle_collector_off_during_a_scrape(own_process: bool) -> None:
    """``ragmon run`` (``Sidecar(own_process=True)``) scrapes with the cycle collector off and
    turns it back on after, also when a collector fails; an embedding process keeps its own."""
    import gc

    async def run() -> tuple[list[bool], int]:
        car = Sidecar(Config(metrics=MetricsConfig(listen="127.0.0.1:0")), own_process=own_process)
        good, bad = _GcWitness(), _GcWitness(fail=True)
        car.registry.register(good)
        async with TestServer(car.metrics_app()) as server, ClientSession() as session:
            async with session.get(server.make_url("/metrics")) as response:
                assert response.status == 200 and b"witness 1.0" in await response.read()
            assert gc.isenabled()
            car.registry.unregister(good)
            car.registry.register(bad)
            async with session.get(server.make_url("/metrics")) as response:
                status = response.status
        return good.seen + bad.seen, status

    assert gc.isenabled()
    seen, status = asyncio.run(run())
    assert seen == [not own_process, not own_process] and status == 500
    assert gc.isenabled()


def test_ragmon_run_switches_threads_every_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ragmon run`` lowers the GIL switch interval so that the loop waits at most 1 ms for a
    scrape's rendering thread (``SWITCH_INTERVAL``); the test process keeps its own after."""
    import sys

    from ragmon.sidecar import process as app

    before = sys.getswitchinterval()
    seen: list[float] = []

    def fake_run(coro: object) -> int:
        seen.append(sys.getswitchinterval())
        coro.close()  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(app, "tune_gc", lambda: None)
    monkeypatch.setattr(app.asyncio, "run", fake_run)
    try:
        assert app.run(Config()) == 0
    finally:
        sys.setswitchinterval(before)
    assert app.SWITCH_INTERVAL == 0.001 and seen == [0.001]


def test_ragmon_run_builds_its_sidecar_as_its_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragmon.sidecar import process as app

    class Built(Exception):
        pass

    def fake(config: Config, **kwargs: object) -> Sidecar:
        raise Built(kwargs)

    monkeypatch.setattr(app, "Sidecar", fake)
    with pytest.raises(Built) as built:
        asyncio.run(app._run(Config()))
    assert built.value.args == ({"own_process": True},)
