"""A real monitoring stack on 127.0.0.1 for the end-to-end alert test (``test_e2e_prometheus.py``).

``start_stack`` runs, each on a free loopback port and logging to a file: a webhook receiver
(records what Alertmanager POSTs), ``prometheus-alertmanager`` (the repository's
``deploy/alertmanager/alertmanager.yml`` with short timers and every receiver pointed at the
webhook), a scripted OpenAI-compatible judge (``judge_server.py``), ``ragmon run`` as a
subprocess, the rule file printed by ``python -m ragmon.ops.rules`` with short windows, and
``prometheus`` scraping ragmon every second. ``Traffic`` is a RAG app instrumented with the
OpenTelemetry SDK (OpenInference attributes, batch span processor, OTLP/HTTP exporter) whose
retrieval quality can be switched per variant. ``dashboard_targets`` and ``resolve_variables``
turn a Grafana dashboard into plain PromQL the way Grafana interpolates it.

The binaries come from Debian's ``prometheus`` and ``prometheus-alertmanager`` packages (the
README's test command installs them); a missing one fails the test, never skips it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from judge_server import JudgeServer, judge_server_thread, verdict_for
from net_helpers import wait_until
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
NOT_YET: tuple[type[Exception], ...] = (OSError, ValueError, KeyError, IndexError)
"""What a probe of a server still starting raises (refused, not JSON yet, no such field yet):
``wait_until`` counts it as "not yet"; anything else fails the wait at once."""

SERVICE = "rag-api"
EXAMPLE_SERVICE = "rag-example"
"""The example app's service (the probe's target; a little traffic of its own)."""
JOB = "ragmon"
"""Scrape job of ragmon: matches the rules' ``job_regex`` (``.*ragmon.*``), as in deploy/."""

PRICES = {
    "gpt-4o-mini": (0.15, 0.60),
    "text-embedding-3-small": (0.02, 0.0),
    "judge-model": (1.0, 2.0),
}
"""USD per million tokens (input, output) in ragmon's config; ``local-llama`` stays unpriced."""


# -- waiting and processes -------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for programs that cannot bind port 0 and say so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_binary(name: str) -> str:
    """The path of ``name``; ``AssertionError`` when it is missing (the test fails, never skips)."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(
            f"{name} is not installed: the README's test command installs it "
            "(apt-get install prometheus prometheus-alertmanager)"
        )
    return path


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url``: (status, body), also for error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Process:
    """A subprocess whose stdout and stderr go to ``log``; ``stop`` ends it (TERM, then KILL)."""

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, noise: str = "",
    ) -> None:
        self.name = name
        self.noise = re.compile(noise) if noise else None  # log lines ``tail`` leaves out
        self.argv = list(argv)
        self.log = log
        self._log_file = log.open("ab")
        self.popen = subprocess.Popen(
            self.argv, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=log.parent,
        )

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        text = [line for line in self.output().splitlines() if not (self.noise and self.noise.search(line))][-lines:]
        state = "running" if self.running() else f"exited with {self.popen.returncode}"
        return f"--- {self.name} ({state}), last {len(text)} lines of {self.log}:\n" + "\n".join(text)

    def wait_ready(self, what: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
        """Wait for ``probe``; fail at once (with the log) if the process exits first."""

        def check() -> bool:
            if not self.running():
                raise _Exited(self.tail())
            return probe()

        try:
            wait_until(check, timeout, what=f"{self.name}: {what}", interval=0.25, details=self.tail, tolerate=NOT_YET)
        except _Exited as exited:
            raise AssertionError(f"{self.name} exited before {what}:\n{exited}") from None

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.running():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        self._log_file.close()
        return self.popen.returncode


class _Exited(Exception):
    """The process ended while a test waited for it."""


def _ready(url: str) -> Callable[[], bool]:
    return lambda: http_get(url, timeout=2)[0] == 200


def start_on_free_port(
    name: str, make_argv: Callable[[int], Sequence[str]], log: Path, ready_path: str,
    env: Mapping[str, str] | None = None, attempts: int = 3,
) -> tuple[Process, int]:
    """Start a server that needs its port on the command line: pick a free port, wait for
    ``ready_path``; if it exits first (the port was taken in between), retry on another one."""
    for attempt in range(1, attempts + 1):
        port = free_port()
        process = Process(name, make_argv(port), log, env)
        try:
            process.wait_ready(f"ready on 127.0.0.1:{port}", _ready(f"http://127.0.0.1:{port}{ready_path}"))
        except AssertionError:
            process.stop()
            if attempt == attempts or "address already in use" not in process.output():
                raise
            continue
        return process, port
    raise AssertionError("unreachable")


# -- the webhook Alertmanager notifies -----------------------------------------------------------


@dataclass(frozen=True)
class Notification:
    """One webhook POST from Alertmanager: when it arrived (monotonic) and its JSON payload."""

    at: float
    payload: dict[str, Any]


class Webhook:
    """An HTTP server on 127.0.0.1 recording every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self._lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = {"unparseable": body.decode(errors="replace")}
                with webhook._lock:
                    webhook.notifications.append(Notification(time.monotonic(), payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)

    def alerts(self) -> list[tuple[Notification, dict[str, Any]]]:
        """Every alert of every notification, with its notification."""
        return [(n, alert) for n in self.received() for alert in n.payload.get("alerts", [])]

    def summary(self, last: int = 10) -> str:
        lines = [f"--- webhook: {len(self.received())} notifications, the last {last}:"]
        for n in self.received()[-last:]:
            alerts = [
                f"{a.get('labels', {}).get('alertname')}{{variant={a.get('labels', {}).get('variant')},"
                f"k={a.get('labels', {}).get('k')}}}={a.get('status')}"
                for a in n.payload.get("alerts", [])
            ]
            lines.append(f"{n.payload.get('status')}: {', '.join(alerts)}")
        return "\n".join(lines)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


# -- Prometheus' HTTP API ------------------------------------------------------------------------


class PrometheusAPI:
    """The few calls of Prometheus' HTTP API the test makes."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str | Sequence[str]) -> dict[str, Any]:
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        return self._decode(*http_get(url, timeout=10))

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        """``/api/v1/query`` (POST form): the whole answer, ``status`` included, also on errors."""
        form = {"query": expr}
        if at is not None:
            form["time"] = f"{at:.3f}"
        request = urllib.request.Request(
            self.base + "/api/v1/query", data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return self._decode(response.status, response.read())
        except urllib.error.HTTPError as error:
            return self._decode(error.code, error.read())

    def vector(self, expr: str) -> list[dict[str, Any]]:
        """The samples of an instant query that must succeed."""
        answer = self.query(expr)
        if answer.get("status") != "success":
            raise AssertionError(f"query failed: {expr}\n{answer}")
        return list(answer["data"]["result"])

    @staticmethod
    def _decode(status: int, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {status}: {body[:500]!r}"}
        return data if isinstance(data, dict) else {"status": "error", "error": repr(data)}


# -- the RAG application ---------------------------------------------------------------------------

RELEVANT = "policy-refunds"
DOCUMENTS = {
    "policy-refunds": "Refunds are accepted within 30 days of delivery.",
    "policy-shipping": "Shipping takes 5 business days within the country.",
    "policy-giftcards": "Gift cards cannot be refunded or exchanged.",
    "faq-careers": "We are hiring engineers in three offices.",
    "blog-launch": "Our new store opened in March with a party.",
}
GOOD_RANKING = ("policy-refunds", "policy-shipping", "policy-giftcards")
BAD_RANKING = ("faq-careers", "policy-shipping", "blog-launch")
"""A regression: the relevant document is no longer retrieved (a miss at every k)."""
ANSWER = "Refunds are accepted within 30 days of delivery."
INVALID_MARKER = "[judge returns garbage]"


def judge_responder(body: dict[str, Any]) -> str:
    """The judge's reply: a valid verdict, except an unparseable one for marked queries (so
    that judge failures are counted too)."""
    if INVALID_MARKER in json.dumps(body):
        return "I cannot answer that in JSON."
    return verdict_for(body)


class Traffic:
    """A RAG service sending traces of ``variants`` in turn, ``rate`` traces a second, from a
    background thread, through the OTel SDK's batch processor and OTLP/HTTP exporter.

    Each trace: a CHAIN root (query, answer, reference answer, ``ragmon.variant``), an
    EMBEDDING call, a RETRIEVER span (documents with content, ``ragmon.relevant_document_ids``),
    a RERANKER span and an LLM call with tokens. Now and then, as in real traffic: an error
    span, a retrieval without relevance labels, a model call without usage, an unpriced model,
    a model past ragmon's label cap (``[metrics] max_label_values = 3``: folded into ``other``),
    a query the judge answers with garbage. ``regress`` / ``restore`` switch a variant's
    retrieval between ``GOOD_RANKING`` and ``BAD_RANKING``. Every ``FEEDBACK_EVERY``-th trace
    gets user feedback (``POST /v1/feedback``: the relevant document and a thumbs score)
    ``FEEDBACK_AFTER`` seconds later, once ragmon has scored it.
    """

    FEEDBACK_EVERY = 4
    FEEDBACK_AFTER = 5.0

    ERROR_EVERY = 30
    UNLABELLED_EVERY = 15
    INVALID_JUDGE_EVERY = 25
    MODELS_EVERY = 20
    """Of every 20 traces, one uses ``local-llama`` (unpriced), one ``experimental-llm`` (the
    fourth model: folded), one reports no usage; the others ``gpt-4o-mini``."""

    def __init__(self, endpoint: str, rate: float, variants: Sequence[str]) -> None:
        self.rate = rate
        self.variants = tuple(variants)
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=10)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
        self.tracer = self.provider.get_tracer("rag-app")
        self.sent: dict[tuple[str, bool], int] = {}
        self.feedback_url = endpoint.replace("/v1/traces", "/v1/feedback")
        self.awaiting_feedback: list[tuple[float, str, bool]] = []
        """(when sent, trace id, good ranking) of traces to send feedback for."""
        self.started = 0.0
        self._regressed: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rag-traffic", daemon=True)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    def regress(self, variant: str) -> None:
        with self._lock:
            self._regressed.add(variant)

    def restore(self, variant: str) -> None:
        with self._lock:
            self._regressed.discard(variant)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.provider.shutdown()

    def _run(self) -> None:
        i = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            variant = self.variants[i % len(self.variants)]
            with self._lock:
                good = variant not in self._regressed
            self.send(i, variant, good)
            self.sent[(variant, good)] = self.sent.get((variant, good), 0) + 1
            self.send_feedback()
            i += 1
            next_at += 1.0 / self.rate
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def send(self, i: int, variant: str, good: bool) -> None:
        """One request's trace, its spans timed as a real one (ending now)."""
        ranking = GOOD_RANKING if good else BAD_RANKING
        query = f"How long do I have to return an order? (request {i})"
        if i % self.INVALID_JUDGE_EVERY == 7:
            query += " " + INVALID_MARKER
        model = {3: "local-llama", 13: "experimental-llm"}.get(i % self.MODELS_EVERY, "gpt-4o-mini")
        usage = i % self.MODELS_EVERY != 9
        labelled = i % self.UNLABELLED_EVERY != 11
        error = i % self.ERROR_EVERY == 5
        ms = 1_000_000
        t0 = time.time_ns() - 900 * ms
        tracer = self.tracer
        root = tracer.start_span("rag.answer", start_time=t0)
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", query)
        root.set_attribute("output.value", ANSWER)
        root.set_attribute("ragmon.variant", variant)
        root.set_attribute("ragmon.reference_answer", ANSWER)
        ctx = trace.set_span_in_context(root)

        span = tracer.start_span("embed", context=ctx, start_time=t0 + 5 * ms)
        span.set_attribute("openinference.span.kind", "EMBEDDING")
        span.set_attribute("embedding.model_name", "text-embedding-3-small")
        span.set_attribute("llm.token_count.prompt", 12)
        span.set_attribute("llm.token_count.total", 12)
        span.end(end_time=t0 + 40 * ms)

        span = tracer.start_span("retrieve", context=ctx, start_time=t0 + 45 * ms)
        span.set_attribute("openinference.span.kind", "RETRIEVER")
        span.set_attribute("input.value", query)
        for rank, doc in enumerate(ranking):
            span.set_attribute(f"retrieval.documents.{rank}.document.id", doc)
            span.set_attribute(f"retrieval.documents.{rank}.document.content", DOCUMENTS[doc])
            span.set_attribute(f"retrieval.documents.{rank}.document.score", 0.9 - 0.1 * rank)
        if labelled:
            span.set_attribute("ragmon.relevant_document_ids", [RELEVANT])
        span.end(end_time=t0 + 160 * ms)

        span = tracer.start_span("rerank", context=ctx, start_time=t0 + 165 * ms)
        span.set_attribute("openinference.span.kind", "RERANKER")
        span.set_attribute("reranker.query", query)
        for rank, doc in enumerate(ranking):
            for side in ("input", "output"):
                span.set_attribute(f"reranker.{side}_documents.{rank}.document.id", doc)
                span.set_attribute(f"reranker.{side}_documents.{rank}.document.content", DOCUMENTS[doc])
        span.end(end_time=t0 + 230 * ms)

        span = tracer.start_span("generate", context=ctx, start_time=t0 + 235 * ms)
        span.set_attribute("openinference.span.kind", "LLM")
        span.set_attribute("llm.model_name", model)
        span.set_attribute("llm.provider", "openai")
        if usage:
            span.set_attribute("llm.token_count.prompt", 420)
            span.set_attribute("llm.token_count.completion", 36)
            span.set_attribute("llm.token_count.total", 456)
        if error:
            span.set_status(Status(StatusCode.ERROR, "upstream timeout, retried"))
        span.end(end_time=t0 + (820 + 10 * (i % 7)) * ms)

        root.end(end_time=t0 + (850 + 10 * (i % 7)) * ms)
        if i % self.FEEDBACK_EVERY == 1:
            self.awaiting_feedback.append((time.monotonic(), format(root.get_span_context().trace_id, "032x"), good))

    def send_feedback(self) -> None:
        """Feedback for the traces sent ``FEEDBACK_AFTER`` seconds ago or more (answers unchecked:
        ``ragmon_feedback_total`` counts them)."""
        now = time.monotonic()
        while self.awaiting_feedback and now - self.awaiting_feedback[0][0] >= self.FEEDBACK_AFTER:
            _, trace_id, good = self.awaiting_feedback.pop(0)
            for body in ({"relevant_document_ids": [RELEVANT]}, {"name": "thumbs", "score": 1 if good else 0}):
                data = json.dumps({"trace_id": trace_id, **body}).encode()
                request = urllib.request.Request(self.feedback_url, data=data, headers={"Content-Type": "application/json"})
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(request, timeout=5).close()


def send_malformed(endpoint: str) -> None:
    """What a broken client sends now and then: a body that is not OTLP (rejected whole) and a
    span with an all-zero trace id (rejected alone, with ``partial_success``)."""
    bad_span = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [{
        "traceId": "0" * 32, "spanId": "0102030405060708", "name": "broken",
        "startTimeUnixNano": "1", "endTimeUnixNano": "2",
    }]}]}]}
    for body, content_type, expected in (
        (b"this is not protobuf", "application/x-protobuf", 400),
        (json.dumps(bad_span).encode(), "application/json", 200),
    ):
        request = urllib.request.Request(endpoint, data=body, headers={"Content-Type": content_type}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        if status != expected:
            raise AssertionError(f"POST {content_type} to {endpoint}: HTTP {status}, expected {expected}")


# -- the stack -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSettings:
    """How the test shortens the rules, through the generator's own options."""

    window: str
    baseline: str
    min_queries: int
    for_scale: float

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "ragmon.ops.rules", "--for-scale", repr(self.for_scale),
            "--set", f"window={self.window}", "--set", f"baseline={self.baseline}",
            "--set", f"min_queries={self.min_queries}",
        ]


@dataclass
class Stack:
    """Everything ``start_stack`` started, and what the tests need to reach it."""

    tmp: Path
    rules: RuleSettings
    webhook: Webhook
    judge: JudgeServer
    ragmon: Process
    ragmon_ports: dict[str, int]
    prometheus: Process
    alertmanager: Process
    prometheus_port: int
    alertmanager_port: int
    traffic: Traffic
    api: PrometheusAPI
    processes: list[Process] = field(default_factory=list)

    def diagnostics(self) -> str:
        """Tails of every log and the webhook's last notifications, for failure messages."""
        return "\n".join([*(p.tail() for p in self.processes), self.webhook.summary()])

    @contextlib.contextmanager
    def dump_on_failure(self) -> Iterator[None]:
        """Print ``diagnostics`` (pytest shows it with the failure) when the block fails."""
        try:
            yield
        except BaseException:
            print(self.diagnostics())
            raise


_LISTENING = re.compile(r"(metrics|OTLP/HTTP) on [\d.]+:(\d+)")


PROBED = {
    "What is the refund window?": "refund-policy",
    "How long does shipping take?": "shipping-times",
    "Do gift cards expire?": "gift-cards",
}
"""Golden queries the probe replays against the example app (deploy/example/rag_app.py), with
the document of its corpus that answers each."""


def _ragmon_config(path: Path, judge_url: str, probe_url: str) -> Path:
    pricing = "".join(
        f'[pricing."{model}"]\ninput = {inp}\noutput = {out}\n' for model, (inp, out) in PRICES.items()
    )
    golden = path.with_name("golden.jsonl")
    golden.write_text(
        "".join(json.dumps({"query": q, "relevant_document_ids": [doc]}) + "\n" for q, doc in PROBED.items()),
        encoding="utf-8",
    )
    path.write_text(
        "[receiver]\nhttp = \"127.0.0.1:0\"\ngrpc = \"\"\n"
        "[metrics]\nlisten = \"127.0.0.1:0\"\nmax_label_values = 3\n"
        "[traces]\ngrace = \"300ms\"\n"
        f"[judge]\nbase_url = \"{judge_url}\"\nmodel = \"judge-model\"\nsample_rate = 1.0\n"
        "max_per_minute = 100000\nmax_usd_per_hour = 1000.0\nconcurrency = 4\ntimeout = \"10s\"\n"
        + pricing
        + f"[[probe]]\nname = \"ask\"\nurl = \"{probe_url}\"\ninterval = \"10s\"\ntimeout = \"5s\"\n"
        f"dataset = \"{golden}\"\nresponse_answer = \"answer\"\n",
        encoding="utf-8",
    )
    return path


def _alertmanager_config(path: Path, webhook_url: str) -> Path:
    """deploy/alertmanager/alertmanager.yml (routes, grouping, inhibition) with second-scale
    timers and every receiver notifying the test's webhook, resolutions included."""
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())

    def shorten(route: dict[str, Any]) -> None:
        route.update({"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"})
        for child in route.get("routes", []):
            shorten(child)

    shorten(config["route"])
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _prometheus_config(path: Path, rules: Path, alertmanager_port: int, ragmon_port: int) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{ragmon_port}"]}]}],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _child_env() -> dict[str, str]:
    """The environment without OpenAI settings: the judge must be the scripted server."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGMON_"))}


@contextlib.contextmanager
def start_stack(tmp: Path, rules: RuleSettings, rate: float, variants: Sequence[str]) -> Iterator[Stack]:
    """Start everything (see the module docstring), yield it, stop it all in reverse order."""
    prometheus_bin = require_binary("prometheus")
    alertmanager_bin = require_binary("prometheus-alertmanager")
    with contextlib.ExitStack() as stack:
        webhook = Webhook()
        stack.callback(webhook.close)
        processes: list[Process] = []

        def started(process: Process) -> Process:
            processes.append(process)
            stack.callback(process.stop)
            return process

        am_config = _alertmanager_config(tmp / "alertmanager.yml", webhook.url)
        (tmp / "alertmanager-data").mkdir()
        alertmanager, am_port = start_on_free_port(
            "alertmanager",
            lambda port: [
                alertmanager_bin, f"--config.file={am_config}", f"--storage.path={tmp / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
            ],
            tmp / "alertmanager.log", "/-/ready",
        )
        started(alertmanager)

        judge = stack.enter_context(judge_server_thread(responder=judge_responder))

        app_port = free_port()
        config = _ragmon_config(tmp / "ragmon.toml", judge.base_url, f"http://127.0.0.1:{app_port}/ask")
        ragmon = started(Process(
            "ragmon", [sys.executable, "-m", "ragmon", "run", "--config", str(config)],
            tmp / "ragmon.log", _child_env(), noise=r" INFO httpx\w*: HTTP Request: ",
        ))

        def ports() -> dict[str, int] | None:
            found = {m.group(1): int(m.group(2)) for m in _LISTENING.finditer(ragmon.output())}
            return found if len(found) == 2 else None

        ragmon.wait_ready("its ports in the log", lambda: ports() is not None)
        ragmon_ports = ports()
        assert ragmon_ports is not None
        ragmon.wait_ready("/readyz", _ready(f"http://127.0.0.1:{ragmon_ports['metrics']}/readyz"))

        generated = subprocess.run(rules.argv(), check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert generated.returncode == 0, f"{' '.join(rules.argv())} failed:\n{generated.stderr}"
        rule_file = tmp / "ragmon-rules.yml"
        rule_file.write_text(generated.stdout, encoding="utf-8")

        prom_config = _prometheus_config(tmp / "prometheus.yml", rule_file, am_port, ragmon_ports["metrics"])
        (tmp / "prometheus-data").mkdir()
        prometheus, prom_port = start_on_free_port(
            "prometheus",
            lambda port: [
                prometheus_bin, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            tmp / "prometheus.log", "/-/ready",
        )
        started(prometheus)

        # the example app: the probe's target (it continues the prober's traceparent)
        app = started(Process(
            "rag-app",
            [sys.executable, str(DEPLOY / "example" / "rag_app.py"), "--endpoint", f"http://127.0.0.1:{ragmon_ports['OTLP/HTTP']}",
             "--port", str(app_port), "--service", EXAMPLE_SERVICE, "--rps", "0.1", "--hit-rate", "1",
             "--error-rate", "0", "--slow-rate", "0", "--seed", "7"],
            tmp / "rag-app.log", _child_env(),
        ))
        app.wait_ready("/healthz", _ready(f"http://127.0.0.1:{app_port}/healthz"))

        endpoint = f"http://127.0.0.1:{ragmon_ports['OTLP/HTTP']}/v1/traces"
        send_malformed(endpoint)
        traffic = Traffic(endpoint, rate, variants)
        traffic.start()
        stack.callback(traffic.stop)

        yield Stack(
            tmp=tmp, rules=rules, webhook=webhook, judge=judge, ragmon=ragmon, ragmon_ports=ragmon_ports,
            prometheus=prometheus, alertmanager=alertmanager, prometheus_port=prom_port,
            alertmanager_port=am_port, traffic=traffic, api=PrometheusAPI(prom_port), processes=processes,
        )


# -- Grafana dashboards --------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One query of a dashboard panel (or annotation)."""

    where: str
    expr: str
    needs_data: bool = True
    """False for annotations: they mark events (e.g. firing alerts) and are empty when none happen."""


def dashboard_targets(dashboard: Mapping[str, Any]) -> list[Target]:
    """Every panel target with an ``expr``, panels nested in rows included (and the old
    ``rows`` layout); then annotation queries (which need not return data)."""
    out: list[Target] = []

    def walk(panels: Sequence[Mapping[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                if "expr" in target:
                    out.append(Target(
                        f"panel {panel.get('id')} {panel.get('title', '')!r} target {target.get('refId', '?')}",
                        str(target["expr"]),
                    ))
            walk(panel.get("panels") or [])

    walk(dashboard.get("panels") or [])
    for row in dashboard.get("rows") or []:
        walk(row.get("panels") or [])
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        if annotation.get("expr"):
            out.append(Target(f"annotation {annotation.get('name', '')!r}", str(annotation["expr"]), needs_data=False))
    return out


GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__rate_interval_ms": "60000",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
    "__auto": "1m",
}
"""Grafana's built-in variables as Grafana would set them for a 5-minute view of 1 s scrapes
(``$__rate_interval`` at least four scrape intervals; a minute keeps sparse counters in)."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*\S)\s*,\s*)?(\w+)\s*\)\s*$", re.DOTALL)
_REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|{}\[\]/])")


@dataclass(frozen=True)
class Variable:
    """A templating variable's values (what Grafana would offer) and whether "All" is chosen."""

    name: str
    values: tuple[str, ...]
    all_value: str | None = None
    """The value standing for "All" (``allValue``, else the values as a regex alternation)."""


def _escape(value: str) -> str:
    """Grafana's regex escaping of a value in a Prometheus query."""
    return _REGEX_SPECIAL.sub(r"\\\\\1", value)


def interpolate(text: str, variables: Mapping[str, Variable]) -> tuple[str, list[str]]:
    """``text`` with Grafana variables replaced; and the names it used that are unknown."""
    unknown: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3) or match.group(5)
        fmt = match.group(2) or match.group(4) or ""
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        variable = variables.get(name)
        if variable is None:
            unknown.append(name)
            return match.group(0)
        if variable.all_value is not None:
            return variable.all_value
        values = list(variable.values)
        if fmt in ("", "regex"):
            escaped = [_escape(v) for v in values] if (fmt == "regex" or len(values) > 1) else values
            return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
        if fmt == "pipe":
            return "|".join(values)
        if fmt in ("csv", "text", "raw"):
            return ",".join(values)
        return values[0]

    return _VARIABLE.sub(replace, text), unknown


def _options(variable: Mapping[str, Any]) -> tuple[str, ...]:
    """The options of a custom or interval variable, current ones first."""
    current = variable.get("current") or {}
    chosen = current.get("value")
    chosen_list = [chosen] if isinstance(chosen, str) else list(chosen or [])
    chosen_list = [c for c in chosen_list if c and c != "$__all"]
    options = [o.get("value") for o in variable.get("options") or [] if o.get("value")]
    if not options:
        options = [part.strip() for part in str(variable.get("query", "")).split(",") if part.strip()]
        options = [o.split(" : ", 1)[-1] for o in options]
    return tuple(dict.fromkeys([*chosen_list, *options]))


def _query_text(query: Any) -> str:
    if isinstance(query, Mapping):
        return str(query.get("query", ""))
    return str(query or "")


def _apply_regex(values: list[str], regex: str) -> list[str]:
    if not regex:
        return values
    match = re.fullmatch(r"/(.*)/([a-z]*)", regex, re.DOTALL)
    pattern = re.compile(match.group(1) if match else regex, re.IGNORECASE if match and "i" in match.group(2) else 0)
    kept = []
    for value in values:
        found = pattern.search(value)
        if found:
            kept.append(found.group(1) if found.groups() and found.group(1) is not None else value)
    return list(dict.fromkeys(kept))


def resolve_variables(dashboard: Mapping[str, Any], api: PrometheusAPI) -> tuple[dict[str, Variable], list[str]]:
    """Each templating variable as Grafana would resolve it against this Prometheus, in order
    (so chained variables see the earlier ones); and the problems found (a query variable whose
    query fails or has no values, an unsupported query)."""
    variables: dict[str, Variable] = {}
    problems: list[str] = []
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        name = str(variable.get("name"))
        kind = variable.get("type")
        values: list[str]
        if kind == "query":
            text, unknown = interpolate(_query_text(variable.get("query") or variable.get("definition")), variables)
            if unknown:
                problems.append(f"variable {name}: query {text!r} uses unknown variables {unknown}")
                continue
            match = _LABEL_VALUES.match(text)
            if match is None:
                problems.append(f"variable {name}: unsupported query {text!r} (expected label_values(…))")
                continue
            selector, label = match.group(1), match.group(2)
            answer = api.get(f"/api/v1/label/{label}/values", **({"match[]": selector} if selector else {}))
            if answer.get("status") != "success":
                problems.append(f"variable {name}: {text!r} failed: {answer.get('error')}")
                continue
            values = _apply_regex([str(v) for v in answer["data"]], str(variable.get("regex") or ""))
            if not values:
                problems.append(f"variable {name}: {text!r} returned no values")
                continue
        elif kind in ("custom", "interval"):
            values = list(_options(variable))
        elif kind in ("constant", "textbox"):
            current = (variable.get("current") or {}).get("value")
            values = [str(current if isinstance(current, str) and current else variable.get("query", ""))]
        else:  # datasource, adhoc: not part of an expression
            continue
        if not values:
            problems.append(f"variable {name}: no options")
            continue
        if not variable.get("includeAll") and not variable.get("multi"):
            current = (variable.get("current") or {}).get("value")
            values = [current if isinstance(current, str) and current in values else values[0]]
        all_value: str | None = None
        if variable.get("includeAll"):
            all_value = variable.get("allValue") or None
            if all_value is None and len(values) > 1:
                all_value = "(" + "|".join(_escape(v) for v in values) + ")"
        variables[name] = Variable(name, tuple(values), all_value)
    return variables, problems
