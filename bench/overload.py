"""Overload, soak and slow clients: ``ragmon run`` at its default configuration, pushed past capacity.

Usage::

    python bench/overload.py [--seconds 30] [--concurrency 32] [--protocol http|grpc]
                             [--idle-connections 0] [--slowloris 0] [--batches 120]

``--seconds 300`` is the soak (the memory slope over the second half is the figure to read);
``--idle-connections 3000 --slowloris 200`` adds clients that open connections and send
nothing, or one header byte every half second.

What it does
------------
Starts ``python -m ragmon run`` with ports on 127.0.0.1 (free ports), no final-scrape linger
(the script scrapes before it stops ragmon) and every other setting at its default. A load process (spawned) posts pre-encoded realistic RAG traces
(bench/ingest.py's traffic: 512-span OTLP protobuf bodies built with the OpenTelemetry SDK,
every trace id unique) with ``--concurrency`` requests in flight, as an OTLP exporter would:
a 503 / 429 (HTTP) or UNAVAILABLE / RESOURCE_EXHAUSTED (gRPC) is retried after the delay the
answer gives (``Retry-After`` / ``RetryInfo``; a refusal without one is counted as a
problem), anything else is a problem. With 2 CPUs the offered load is well past what one
ragmon process scores, so its queue fills and it refuses: the figures say how it refuses.

During the run the parent samples ragmon's RSS and CPU time (``/proc``) every 0.25 s and the
latency of ``GET /healthz`` (liveness must answer while ingest is saturated). After the load it
waits until ragmon has scored everything it acknowledged, then checks, from ``/metrics``,
that nothing acknowledged was lost: ``ragmon_spans_received_total`` equals the spans the load
generator saw acknowledged, ``ragmon_traces_total`` the acknowledged traces, and no trace was
dropped, ignored or late (traces the assembler finished early at its byte cap are shown, not
a problem: each arrives whole in one body, so it is scored as it was). It prints the configured memory ceiling (the byte caps of the queue,
the in-flight bodies and the assembler) next to the measured peak RSS, the RSS slope over the
second half (MB/min; about 0 means flat), CPU-µs per scored span, and exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import pickle
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402  (bench/ingest.py: traffic, server process, scrape helpers)

from ragmon.config import Config  # noqa: E402

GRPC_LINE = re.compile(r"OTLP/gRPC on 127\.0\.0\.1:(\d+)")
SAMPLE_INTERVAL = 0.25
RAGMON_TOML = """\
[receiver]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"

[metrics]
listen = "127.0.0.1:0"
linger = "0s"
"""
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@dataclass
class LoadResult:
    """What the load generator saw."""

    acked_spans: int = 0
    acked_traces: int = 0
    acked_requests: int = 0
    refused: int = 0
    refused_without_delay: int = 0
    delays: Counter[float] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    """Refusals by answer: HTTP status or gRPC code."""
    other: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    idle_open_at_end: int = 0
    idle_opened: int = 0
    slow_cut: int = 0
    slow_opened: int = 0


async def _http_worker(url: str, traffic: ingest.Traffic, next_body: Any, t1: float, result: LoadResult) -> None:
    import aiohttp

    headers = {"Content-Type": ingest.PROTOBUF}
    timeout = aiohttp.ClientTimeout(total=ingest.REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < t1:
            body, spans, traces = next_body()
            while time.monotonic() < t1:
                sent = time.monotonic()
                try:
                    async with session.post(url, data=body, headers=headers) as r:
                        await r.read()
                        status, retry_after = r.status, r.headers.get("Retry-After")
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    result.other[type(exc).__name__] += 1
                    await asyncio.sleep(0.1)
                    continue
                if status in (429, 503):
                    result.refused += 1
                    result.refusals[str(status)] += 1
                    if retry_after is None or not retry_after.isdigit():
                        result.refused_without_delay += 1
                        await asyncio.sleep(1.0)
                    else:
                        result.delays[float(retry_after)] += 1
                        await asyncio.sleep(float(retry_after))
                    continue
                if status == 200:
                    result.acked_requests += 1
                    result.acked_spans += spans
                    result.acked_traces += traces
                    result.latencies.append(time.monotonic() - sent)
                else:
                    result.other[f"HTTP {status}"] += 1
                break


async def _grpc_worker(target: str, next_body: Any, t1: float, result: LoadResult) -> None:
    import grpc
    from google.rpc.error_details_pb2 import RetryInfo

    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        export = channel.unary_unary(EXPORT_METHOD, request_serializer=None, response_deserializer=None)
        while time.monotonic() < t1:
            body, spans, traces = next_body()
            while time.monotonic() < t1:
                sent = time.monotonic()
                try:
                    await export(body, timeout=ingest.REQUEST_TIMEOUT)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                        result.refused += 1
                        result.refusals[exc.code().name] += 1
                        delay = None
                        for key, value in exc.trailing_metadata() or ():
                            if key == "google.rpc.retryinfo-bin":
                                info = RetryInfo.FromString(value)
                                delay = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
                        if delay is None:
                            result.refused_without_delay += 1
                            delay = 1.0
                        result.delays[delay] += 1
                        await asyncio.sleep(delay)
                        continue
                    result.other[f"gRPC {exc.code().name}"] += 1
                    break
                result.acked_requests += 1
                result.acked_spans += spans
                result.acked_traces += traces
                result.latencies.append(time.monotonic() - sent)
                break


async def _idle_clients(port: int, n: int, t1: float, result: LoadResult) -> None:
    """Open ``n`` connections that never send anything; count those still open at the end."""
    writers = []
    for _ in range(n):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            break
        writers.append((reader, writer))
        result.idle_opened += 1
    await asyncio.sleep(max(0.0, t1 - time.monotonic()))
    for reader, writer in writers:
        if not reader.at_eof():
            result.idle_open_at_end += 1
        writer.close()


async def _slowloris(port: int, n: int, t1: float, result: LoadResult) -> None:
    """``n`` clients sending a request line one byte every half second; count the ones cut off."""
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        result.slow_opened += 1
        try:
            for i in range(10**6):
                if time.monotonic() >= t1:
                    return
                writer.write(head[i % len(head): i % len(head) + 1])
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 0.5) == b"" or reader.at_eof():
                        result.slow_cut += 1
                        return
                except TimeoutError:
                    pass
        except OSError:
            result.slow_cut += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(n)))


async def _load(args: dict[str, Any], traffic: ingest.Traffic, conn: Connection) -> LoadResult:
    result = LoadResult()
    n = len(traffic.bodies)
    state = {"cursor": 0, "generation": 0}

    def next_body() -> tuple[bytes, int, int]:
        i = state["cursor"] % n
        state["cursor"] += 1
        state["generation"] += 1
        fresh = traffic.marker[: ingest.MARKER_BYTES] + state["generation"].to_bytes(ingest.GENERATION_BYTES, "big")
        return traffic.bodies[i].replace(traffic.marker, fresh), traffic.spans[i], traffic.traces[i]

    t1 = time.monotonic() + args["seconds"]
    conn.send(("started", t1))
    if args["protocol"] == "grpc":
        workers = [_grpc_worker(f"127.0.0.1:{args['grpc']}", next_body, t1, result) for _ in range(args["concurrency"])]
    else:
        url = f"http://127.0.0.1:{args['http']}/v1/traces"
        workers = [_http_worker(url, traffic, next_body, t1, result) for _ in range(args["concurrency"])]
    extra = []
    if args["idle"]:
        extra.append(_idle_clients(args["http"], args["idle"], t1, result))
    if args["slowloris"]:
        extra.append(_slowloris(args["http"], args["slowloris"], t1, result))
    await asyncio.gather(*workers, *extra)
    return result


def load_process(conn: Connection, args: dict[str, Any], traffic_path: str) -> None:
    """The load generator's process: sends ``started``, then ``result`` or ``error``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        with open(traffic_path, "rb") as f:
            traffic = pickle.load(f)
        conn.send(("result", asyncio.run(_load(args, traffic, conn))))
    except Exception as exc:  # noqa: BLE001 - report anything, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()



def healthz_seconds(port: int) -> float:
    """Seconds ``GET /healthz`` took (``inf`` when it failed)."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            r.read()
    except OSError:
        return math.inf
    return time.monotonic() - start


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) in MB per minute."""
    if len(samples) < 3:
        return math.nan
    xs, ys = [t for t, _ in samples], [mb for _, mb in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else math.nan


def ceiling_mb(config: Config) -> float:
    """The byte caps ragmon holds data under at this configuration: queue, bodies being read,
    assembler (each in approximate bytes of kept data; RSS adds the interpreter and libraries)."""
    r, t = config.receiver, config.traces
    return (r.max_queued_bytes + r.max_inflight_bytes + t.max_bytes) / 1e6


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="ragmon-overload-") as tmp:
        workdir = Path(tmp)
        traffic = ingest.build_traffic(args.batches, 512, args.seed)
        traffic_path = ingest.save_traffic(traffic, workdir)
        config = workdir / "ragmon.toml"
        config.write_text(RAGMON_TOML)
        server = ingest.Server("ragmon", [sys.executable, "-m", "ragmon", "run", "--config", str(config)])
        problems: list[str] = []
        try:
            ports = server.wait_ports()
            deadline = time.monotonic() + 10
            while not (grpc_port := next((int(m.group(1)) for line in list(server.tail) if (m := GRPC_LINE.search(line))), None)):
                if time.monotonic() > deadline:
                    raise RuntimeError("no gRPC port in the log")
                time.sleep(0.05)
            pid = server.proc.pid
            rss: list[tuple[float, float]] = []
            cpu0 = ingest.cpu_seconds(pid) or 0.0
            m0 = ingest.scrape(ports["metrics"])
            idle_rss = ingest.rss_mb(pid) or math.nan
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe(duplex=False)
            load_args = {"seconds": args.seconds, "concurrency": args.concurrency, "protocol": args.protocol,
                         "http": ports["http"], "grpc": grpc_port, "idle": args.idle_connections,
                         "slowloris": args.slowloris}
            loader = ctx.Process(target=load_process, args=(child, load_args, str(traffic_path)), daemon=True)
            loader.start()
            child.close()
            start = time.monotonic()
            health: list[float] = []
            result: LoadResult | None = None
            while result is None:
                if parent.poll(SAMPLE_INTERVAL):
                    kind, payload = parent.recv()
                    if kind == "result":
                        result = payload
                    elif kind == "error":
                        raise RuntimeError(f"load generator failed: {payload}")
                mb = ingest.rss_mb(pid)
                if mb is not None:
                    rss.append((time.monotonic() - start, mb))
                health.append(healthz_seconds(ports["metrics"]))
                if time.monotonic() - start > args.seconds + 120:
                    raise RuntimeError("load generator did not finish")
            loader.join(10)
            load_end = time.monotonic()
            caught = None
            while time.monotonic() - load_end < ingest.CATCH_UP_LIMIT:
                m = ingest.scrape(ports["metrics"])
                mb = ingest.rss_mb(pid)
                if mb is not None:
                    rss.append((time.monotonic() - start, mb))
                if ingest.caught_up(m, result.acked_traces):
                    caught = time.monotonic() - load_end
                    break
                time.sleep(0.2)
            cpu = (ingest.cpu_seconds(pid) or 0.0) - cpu0
            final = _totals(ingest.scrape(ports["metrics"]))
            if caught is None:
                problems.append("ragmon did not score everything it acknowledged in time")
            problems += _accounting(final, _totals(m0), result, args.protocol)
            if result.refused_without_delay:
                problems.append(f"{result.refused_without_delay} refusals carried no retry delay")
            if result.other:
                problems.append(f"unexpected answers or errors: {dict(result.other)}")
            if max(health, default=0.0) > 2.0:
                problems.append(f"/healthz took up to {max(health):.2f}s")
        finally:
            status = server.stop()
        if status != 0:
            problems.append(f"ragmon exited with status {status} after SIGTERM")
        _report(args, Config(), result, rss, health, idle_rss, cpu, caught, final, problems)
        return 1 if problems else 0


def _totals(m: dict[str, float]) -> dict[str, float]:
    return m


def _accounting(final: dict[str, float], start: dict[str, float], load: LoadResult, protocol: str) -> list[str]:
    problems = []
    for name, want in (("ragmon_traces_total", load.acked_traces),):
        got = final.get(name, 0.0) - start.get(name, 0.0)
        if got != want:
            problems.append(f"{name} = {got:,.0f}, but {want:,} traces were acknowledged")
    if protocol == "http":
        got = final.get("ragmon_spans_received_total", 0.0) - start.get("ragmon_spans_received_total", 0.0)
        if got != load.acked_spans:
            problems.append(f"ragmon_spans_received_total = {got:,.0f}, but {load.acked_spans:,} spans were acknowledged")
    for name in ("ragmon_dropped_total", "ragmon_spans_late_total",
                 "ragmon_spans_dropped_total", "ragmon_traces_ignored_total"):
        if final.get(name, 0.0) - start.get(name, 0.0):
            problems.append(f"{name} = {final[name]:,.0f} (expected 0)")
    return problems


def _report(args: argparse.Namespace, config: Config, load: LoadResult | None, rss: list[tuple[float, float]],
            health: list[float], idle_rss: float, cpu: float, caught: float | None, final: dict[str, float],
            problems: list[str]) -> None:
    print(f"ragmon overload: {args.protocol}, {args.concurrency} in flight, {args.seconds:.0f} s, default configuration")
    if load is not None:
        offered = load.acked_requests + load.refused
        refused_share = load.refused / offered if offered else 0.0
        lat = sorted(load.latencies)
        p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else math.nan)
        print(f"  acknowledged   {load.acked_spans:>12,} spans ({load.acked_spans / args.seconds:,.0f}/s), {load.acked_traces:,} traces")
        print(f"  refused        {load.refused:>12,} requests ({refused_share:.0%} of answers), {dict(load.refusals)}, retry delays {dict(load.delays)}")
        print(f"  latency        p50 {p(0.5):.0f} ms, p99 {p(0.99):.0f} ms (accepted requests)")
        if args.idle_connections:
            print(f"  idle clients   {load.idle_opened:,} opened, {load.idle_open_at_end:,} still open at the end")
        if args.slowloris:
            print(f"  slowloris      {load.slow_opened:,} opened, {load.slow_cut:,} cut off by ragmon")
    scored = final.get("ragmon_spans_assembled_total", 0.0)
    cpu_us = cpu / scored * 1e6 if scored else math.nan
    half = [s for s in rss if s[0] >= (args.seconds / 2)]
    print(f"  RSS            idle {idle_rss:.0f} MB, peak {max((mb for _, mb in rss), default=math.nan):.0f} MB, "
          f"end {rss[-1][1] if rss else math.nan:.0f} MB; slope over the second half {slope_mb_per_min([s for s in half if s[0] <= args.seconds]):+.1f} MB/min")
    print(f"  ceiling        {ceiling_mb(config):.0f} MB of kept data (queue {config.receiver.max_queued_bytes / 1e6:.0f} + "
          f"bodies in flight {config.receiver.max_inflight_bytes / 1e6:.0f} + assembler {config.traces.max_bytes / 1e6:.0f}) plus the interpreter")
    print(f"  CPU            {cpu:.1f} s in all, {cpu_us:.1f} CPU-µs per span scored")
    print(f"  /healthz       median {statistics.median(health) * 1000 if health else math.nan:.1f} ms, max {max(health, default=math.nan) * 1000:.1f} ms under load")
    print(f"  caught up      {caught:.1f} s after the load" if caught is not None else "  caught up      never")
    print(f"  evicted early  {final.get('ragmon_traces_evicted_total', 0.0):,.0f} traces finished before their grace ended "
          "(assembly at its byte cap; rooted traces go first, and here every trace arrives whole, so each is scored as it was)")
    print("  accounting     " + ("every acknowledged span and trace scored, none lost" if not problems else "PROBLEMS"))
    for problem in problems:
        print(f"  PROBLEM: {problem}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--idle-connections", type=int, default=0)
    p.add_argument("--slowloris", type=int, default=0)
    p.add_argument("--batches", type=int, default=120)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run(parse_args(None)))
