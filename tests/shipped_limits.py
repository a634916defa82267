"""Each shipped configuration, run as ``ragmon run`` and driven to the worst each surface admits,
against its manifest's memory limit (tests/test_shipped_limits.py). The parts: limits_configs
(the configurations and limits), limits_bodies (OTLP bodies), limits_memory (RSS by phase),
limits_context (what the drivers share), limits_fill (the bounds filled and held),
limits_surfaces (scrapers, ingest, slow senders); this module runs the phases.

``sidecar()``, ``pool()`` and ``compose()`` read a shipped configuration and its container's
memory limit: deploy/kubernetes/configmap.yaml with the ``ragmon`` container of
deployment.yaml; the ConfigMap and Deployment of deploy/kubernetes/ragmon-pool.yaml; the file
deploy/compose.yaml mounts as the ``ragmon`` service's config, with that service's
``mem_limit``. ``local_config`` changes only what cannot work here: listeners to 127.0.0.1 port
0, mounted files to the repository's copies, probe URLs to a port where nothing listens, a
judge URL to the harness's judge. Every
cap stays as shipped; where a key is not set ragmon's default applies, and the drivers read the
caps from the configuration ragmon runs (``ragmon.config.load_config``), so a raised cap is
the cap driven to. Token variables the manifest sets get a random token.

``run_configuration`` starts ``ragmon run`` with it, its judge (``OPENAI_BASE_URL``) a local
server that reads every request and never answers, fills the stateful bounds one after the
other and holds them while the later phases run (the feedback store keeps its traces for
``feedback.retention``; the assembler and the scrapers are kept full in the background):

- ``series``: the series budgets: ``max_label_values`` services and models, enough variants
  for ``max_series``, relevance labels, model calls, errors, feedback scores and names, golden
  queries when a golden set is configured: each /metrics body as large as the configuration
  allows;
- ``a``: the feedback store: scored RAG traces with ``max(k)`` documents whose ids are
  ``max_attribute_chars`` long, until the store evicts (``ragmon_feedback_traces_dropped_total``)
  or its gauges stop growing;
- ``c``: the assembler: open traces (their root never ends) with large attributes until
  ``ragmon_span_bytes_pending`` reaches ``traces.max_bytes``; then one body at the rate that
  refills it within ``traces.max_wait`` (an open trace lives that long);
- ``e``: scrapers that send ``GET /metrics`` (no gzip) and never read (4 KiB receive buffer),
  opened one at a time up to ``metrics.max_connections - 1`` (one connection stays for the
  harness's gauge reads, and a scrape renders under a lock: one waiting at a time keeps those
  reads a render away) and reopened when ragmon closes or refuses them. A render takes
  seconds, so the phase waits ``SCRAPER_RAMP_SECONDS``; the ramp pauses during ``b`` (the
  scrapers open stay as they are) and goes on during ``d``;
- ``b``: the judge queue: traces in the judge's sample (by trace id, as it samples) carrying as
  many ``max_attribute_chars`` documents as a body holds, until the judge refuses one
  (``dropped``, ``skipped_budget``) or its gauges stop growing. The judge never answers: its
  calls time out after ``judge.timeout`` and the breaker opens after a few, and the queue then
  empties, so ``b`` comes last among the fills, right before ``d``;
- ``d``: ingest at its caps (the last scraper takes the harness's connection): max-size bodies
  in their worst shapes over HTTP (protobuf of minimal spans, plain and gzip; OTLP/JSON whose
  attribute is an array of small integers or of empty objects, plain and gzip; ``/v1/feedback``
  JSON of empty arrays), each shape ``max_inflight_bytes // max_body_bytes + 2`` at once, while
  gRPC exports of minimal spans go ``concurrent_rpcs + 4`` at once (some gzip);
- ``d+``: the worst shapes again (``SLOW_SENDER_SHAPES``) while slow senders hold HTTP
  connections up to ``receiver.max_connections``, each declaring ``Content-Length:
  max_body_bytes`` and sending a byte a second.

A phase stops growing its bound once RSS passes the limit, and the phases after it are not run
(the container would have been killed); ragmon is killed past three times the limit (sparing
the machine). Memory: ``/proc/<pid>/status`` is sampled every 50 ms and, at each phase's start,
the peak (VmHWM) is reset (``/proc/<pid>/clear_refs``), so each phase's VmHWM is its own and the
run's peak is the largest. ``shortfalls`` lists what the run failed to drive (each fails the
test). ``python tests/shipped_limits.py NAME [PHASE,...] [CEILING] [KILL]`` runs one
configuration (some phases; bounds grown past CEILING x the limit; killed past KILL x) and
prints its figures: one surface at a time, say.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits_bodies import Bodies  # noqa: E402
from limits_configs import CONFIGURATIONS, Shipped, effective, free_port, local_config, to_toml  # noqa: E402
from limits_context import HELD, Context, describe_held  # noqa: E402
from limits_fill import Assembler, SilentJudge, fill_feedback, fill_judge, fill_series  # noqa: E402
from limits_memory import Memory, PhaseFigure, Run  # noqa: E402
from limits_surfaces import NO_ANSWER, Scrapers, SlowSenders, at_once, drive_ingest, ramp_scrapers  # noqa: E402
from net_helpers import raise_open_files  # noqa: E402
from process_helpers import RagmonProcess  # noqa: E402
from ragmon.config import TOKEN_ENVIRONMENT, Config, load_config  # noqa: E402

PHASES = ("series", "a", "c", "e", "b", "d", "d+")
"""Every phase, in the order they run (see the module docstring)."""


_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def start(shipped_config: Shipped, directory: Path, judge: SilentJudge) -> tuple[RagmonProcess, Config]:
    """``ragmon run`` with the configuration made local and its judge at ``judge``; the process
    and the configuration it runs (defaults where a key is not set, tokens from the environment)."""
    local = local_config(shipped_config.config, shipped_config.mounts, f"http://127.0.0.1:{free_port()}/", judge.base_url)
    path = directory / f"{shipped_config.name}.toml"
    path.write_text(to_toml(local))
    tokens = {name: secrets.token_hex(16) for name in shipped_config.tokens}
    environ: dict[str, str | None] = {
        "OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": "dummy", "NO_PROXY": "127.0.0.1,localhost",
        **dict.fromkeys(_PROXIES), **dict.fromkeys(TOKEN_ENVIRONMENT), **tokens,
    }
    config = load_config(str(path), {k: v for k, v in environ.items() if v is not None})
    listeners = sum(address != "" for address in (config.receiver.http, config.receiver.grpc, config.metrics.listen))
    with mock.patch.dict(os.environ):
        for name, value in environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process = RagmonProcess("--config", str(path), expect=listeners)
    if process.process.poll() is not None or len(process.ports) < listeners:
        process.close()
        raise AssertionError(f"ragmon run did not start with {shipped_config.name}'s configuration:\n{process.stderr[-3000:]}")
    return process, config


async def _ready(session: aiohttp.ClientSession, port: int, timeout: float = 15.0) -> str:
    """Wait for /readyz to answer 200; what it answered last."""
    deadline = time.monotonic() + timeout
    answer = "no answer"
    while time.monotonic() < deadline:
        try:
            async with session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as response:
                answer = f"{response.status}"
                if response.status == 200:
                    break
        except (aiohttp.ClientError, TimeoutError) as exc:
            answer = type(exc).__name__
        await asyncio.sleep(0.1)
    return answer


async def _healthz(session: aiohttp.ClientSession, port: int) -> str:
    try:
        async with session.get(f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(total=10)) as response:
            return "ok" if response.status == 200 else f"status {response.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"no answer ({type(exc).__name__})"


SLOW_SENDER_SHAPES = ("protobuf", "JSON empty objects", "feedback JSON empty arrays")
"""The HTTP shapes sent again while the slow senders hold their connections (``d+``)."""
SCRAPER_RAMP_SECONDS = 15.0
"""How long phase ``e`` waits for the scrapers' answers (renders go on in the background)."""


async def _drive(ctx: Context, phases: Sequence[str], judge: SilentJudge) -> None:
    memory, run = ctx.memory, ctx.run
    assembler = Assembler(ctx)
    scrapers = Scrapers(ctx.metrics_port)
    slow = SlowSenders(ctx)
    cap = ctx.config.metrics.max_connections

    def status(figure: PhaseFigure) -> None:
        if scrapers.target:
            figure.reached.append(scrapers.describe())

    try:
        for i, phase in enumerate(phases):
            if ctx.exited or ctx.over:
                run.not_run = list(phases[i:])
                run.not_run_why = "ragmon is not running" if ctx.exited else \
                    "RSS past the limit: the container would have been killed"
                break
            with memory.phase(phase) as figure:
                if phase == "series":
                    await fill_series(ctx, figure)
                elif phase == "a":
                    await fill_feedback(ctx, figure)
                elif phase == "c":
                    await assembler.fill(figure)
                    assembler.hold()
                elif phase == "e":
                    await ramp_scrapers(ctx, scrapers, cap - 1, figure, SCRAPER_RAMP_SECONDS)
                elif phase == "b":  # no scrape waits for a render then: each gauge read is quick
                    scrapers.paused = True
                    await fill_judge(ctx, figure, judge)
                    scrapers.paused = False
                    status(figure)
                elif phase == "d":
                    if scrapers.target:  # the last connection too: no more gauge reads until the end
                        scrapers.ramp(cap)
                    await drive_ingest(ctx, figure)
                    status(figure)
                elif phase == "d+":
                    receiver = ctx.config.receiver
                    await slow.open(receiver.max_connections - at_once(ctx.config)[0] - 2)
                    await asyncio.sleep(2.0)
                    held = slow.held()
                    await drive_ingest(ctx, figure, SLOW_SENDER_SHAPES)
                    figure.reached.insert(0, f"slow senders: {len(slow.sockets)} connected ({slow.failed} failed), "
                                             f"{held} held after 2 s, {slow.held()} at the end")
                    status(figure)
                else:
                    raise AssertionError(f"unknown phase {phase!r}")
                if phase not in ("d", "d+"):  # there the scrapers hold every metrics connection
                    figure.reached.append(describe_held(await ctx.gauges(*HELD)))
    finally:
        await slow.close()
        await scrapers.close()
        await assembler.stop()
    if not ctx.exited:
        with memory.phase("end") as figure:
            await asyncio.sleep(1.0)
            run.healthz = await _healthz(ctx.session, ctx.metrics_port)
            figure.reached.append(f"drivers closed; {describe_held(await ctx.gauges(*HELD))}")
    else:
        run.healthz = "ragmon is not running"


FILLED = {"a": "the feedback store", "c": "the assembler", "b": "the judge queue"}
"""Phases that fill a bound, and the bound."""


def shortfalls(run: Run) -> list[str]:
    """What the run failed to drive: a phase with no memory measured, a bound neither filled nor
    stopped by RSS past the limit, no scraper answered."""
    found = []
    for figure in run.figures:
        if figure.peak <= 0:
            found.append(f"{figure.name}: no memory was measured")
        if figure.name in FILLED and figure.why not in ("at its cap", "RSS past the limit"):
            found.append(f"{figure.name}: {FILLED[figure.name]} was not filled ({figure.why})")
        if figure.name == "e" and figure.why == NO_ANSWER:
            found.append(f"e: {NO_ANSWER}")
    return found


def run_configuration(shipped_config: Shipped, directory: Path, bodies: Bodies, *, phases: Sequence[str] = PHASES,
                      ceiling: float = 1.0, kill_above: float = 3.0, seconds: float = 240.0) -> Run:
    """Run ``shipped_config`` through ``phases``: a phase stops growing its bound once RSS passes
    ``ceiling`` x the limit; ragmon is killed past ``kill_above`` x the limit (sparing the
    machine); the drivers stop after ``seconds``."""
    run = Run(shipped_config)
    started = time.monotonic()
    wanted = 2 * effective(shipped_config).receiver.max_connections + 1024
    if raise_open_files(wanted) < wanted:
        run.problems.append(f"this process may not open {wanted} files: the slow senders and scrapers need them")
        return run
    judge = SilentJudge()
    try:
        process, config = start(shipped_config, directory, judge)
        with process:
            memory = Memory(process.process.pid, int(kill_above * shipped_config.limit))

            async def main() -> None:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                    ctx = Context(config, process, memory, session, bodies, config.receiver.token,
                                  int(ceiling * shipped_config.limit), started + seconds, run)
                    with memory.phase("start") as figure:
                        figure.reached.append(f"/readyz {await _ready(session, ctx.metrics_port)}")
                    await _drive(ctx, phases, judge)

            try:
                asyncio.run(main())
            finally:
                memory.close()
                run.figures = memory.figures
                run.killed = memory.killed
            run.problems += shortfalls(run)
            if process.process.poll() is not None and not memory.killed:
                run.problems.append(f"ragmon exited with {process.process.returncode}:\n{process.stderr[-2000:]}")
    finally:
        judge.close()
        run.seconds = time.monotonic() - started
    return run


def main(argv: Sequence[str]) -> int:
    """``python tests/shipped_limits.py NAME [PHASE,…] [CEILING] [KILL]``: one configuration's
    figures (phases grow their bound up to CEILING x the limit; ragmon is killed past KILL x)."""
    import tempfile

    name = argv[0]
    phases = argv[1].split(",") if len(argv) > 1 else PHASES
    ceiling = float(argv[2]) if len(argv) > 2 else 1.0
    kill = float(argv[3]) if len(argv) > 3 else max(3.0, ceiling + 1)
    chosen = CONFIGURATIONS[name]()
    bodies = Bodies(effective(chosen).receiver.max_body_bytes).build()
    with tempfile.TemporaryDirectory() as directory:
        run = run_configuration(chosen, Path(directory), bodies, phases=phases, ceiling=ceiling, kill_above=kill)
    print(run.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
