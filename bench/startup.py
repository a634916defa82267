"""Benchmark: how long a user waits for ragmon to start, against bare Python processes.

Usage::

    python bench/startup.py [--repeats 15]

Each figure is the median of ``--repeats`` runs, taken in alternating order with its baseline:

* ``--version``: ``ragmon --version`` (the console script) from exec to exit, against
  ``python -c pass`` (the interpreter's own start-up, site and the installed ``.pth`` files);
* ``run``: ``ragmon run`` at its default configuration (OTLP/HTTP, OTLP/gRPC and ``/metrics``
  each on a free 127.0.0.1 port, through ``RAGMON_CONFIG``) from exec to its first ``/healthz``
  200, polled every 2 ms, against a bare ``prometheus_client`` exporter (``start_http_server``)
  to its first 200; then the idle RSS of each one second later;
* the modules ``ragmon --version`` and ``ragmon run`` import (which of numpy, openai, grpc,
  aiohttp, the offline readers): a command loads what it needs.

Child processes run without ``PYTHONDONTWRITEBYTECODE`` and each command runs once untimed
first, so bytecode is cached as after ``pip install`` (which compiles it): without the caches,
every start compiles ragmon's source again and the figures measure the compiler.

Goals (issue 27): ``--version`` under 0.15 s; ``run`` to ``/healthz`` under 0.5 s.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The children's environment: bytecode cached, as an installed package has it."""
POLL = 0.002
LIMIT = 30.0
HEAVY = ("numpy", "openai", "grpc", "aiohttp", "prometheus_client", "google.protobuf", "ragmon.offline.files", "ragmon.metrics")
"""Modules whose loading a command pays for, reported as loaded or not."""

_EXPORTER = """\
import sys, time
from prometheus_client import start_http_server
start_http_server(int(sys.argv[1]), addr="127.0.0.1")
time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ragmon_script() -> list[str]:
    """The console script beside this interpreter, else ``python -m ragmon``."""
    script = Path(sys.executable).with_name("ragmon")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ragmon"]


def timed_exit(argv: Sequence[str]) -> float:
    """Seconds from exec to exit (``RuntimeError`` on a failure)."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=ENV)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


def healthy(port: int, path: str) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def timed_ready(argv: Sequence[str], port: int, path: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from exec to the first 200 on ``path``, and the RSS (MB) one second later."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        while not healthy(port, path):
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stderr.read().decode()[-800:] if proc.stderr else ''}")
            if time.perf_counter() - started > LIMIT:
                raise RuntimeError(f"{argv}: no 200 on {path} within {LIMIT:g} s")
            time.sleep(POLL)
        took = time.perf_counter() - started
        time.sleep(1.0)
        return took, rss_mb(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ragmon_run(workdir: Path) -> tuple[float, float]:
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    config = workdir / "ragmon.toml"
    config.write_text(
        f'[receiver]\nhttp = "127.0.0.1:{http_port}"\ngrpc = "127.0.0.1:{grpc_port}"\n\n'
        f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
    )
    env = {**ENV, "RAGMON_CONFIG": str(config)}
    return timed_ready([*ragmon_script(), "run"], metrics_port, "/healthz", env)


def bare_exporter(workdir: Path) -> tuple[float, float]:
    port = free_port()
    script = workdir / "exporter.py"
    script.write_text(_EXPORTER)
    return timed_ready([sys.executable, str(script), str(port)], port, "/metrics", dict(ENV))


def loaded(code: str) -> list[str]:
    """Which of ``HEAVY`` a Python process has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=ENV).stdout.strip()
    return [m for m in out.split(",") if m]


def import_costs(code: str) -> dict[str, float]:
    """Milliseconds of ``python -X importtime`` self time after running ``code``, by top-level
    package (ragmon's own modules by their second part, e.g. ``ragmon.export``)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True, env=ENV).stderr
    costs: dict[str, float] = {}
    for line in err.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].strip()
        top = ".".join(name.split(".")[:2]) if name.startswith("ragmon.") else name.split(".")[0]
        costs[top] = costs.get(top, 0.0) + int(parts[0]) / 1000
    return costs


def pairs(repeats: int, a: Callable[[], float], b: Callable[[], float]) -> tuple[list[float], list[float]]:
    first, second = [], []
    for i in range(repeats):
        if i % 2:
            second.append(b()), first.append(a())
        else:
            first.append(a()), second.append(b())
    return first, second


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    if shutil.which("ragmon") is None and not Path(sys.executable).with_name("ragmon").exists():
        print("note: no ragmon console script beside this Python: timing python -m ragmon", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="ragmon-startup-") as tmp:  # warm-up: bytecode cached
        timed_exit([*ragmon_script(), "--version"]), ragmon_run(Path(tmp)), bare_exporter(Path(tmp))
    version, bare = pairs(args.repeats, lambda: timed_exit([*ragmon_script(), "--version"]),
                          lambda: timed_exit([sys.executable, "-c", "pass"]))
    with tempfile.TemporaryDirectory(prefix="ragmon-startup-") as tmp:
        work = Path(tmp)
        runs: list[tuple[float, float]] = []
        exporters: list[tuple[float, float]] = []
        for i in range(args.repeats):
            order = (lambda: runs.append(ragmon_run(work)), lambda: exporters.append(bare_exporter(work)))
            for step in (order if i % 2 == 0 else order[::-1]):
                step()
    med = statistics.median
    print(f"start-up, median of {args.repeats} (alternating with the baseline)")
    print(f"  ragmon --version        {med(version):6.3f} s   python -c pass {med(bare):6.3f} s   "
          f"ragmon's own {med(version) - med(bare):6.3f} s   goal < 0.150 s: {'met' if med(version) < 0.15 else 'NOT met'}")
    run_s, run_rss = med(r[0] for r in runs), med(r[1] for r in runs)
    exp_s, exp_rss = med(e[0] for e in exporters), med(e[1] for e in exporters)
    print(f"  ragmon run -> /healthz  {run_s:6.3f} s   bare exporter  {exp_s:6.3f} s   "
          f"ratio {run_s / exp_s:5.2f}x   goal < 0.500 s: {'met' if run_s < 0.5 else 'NOT met'}")
    print(f"  idle RSS after 1 s      {run_rss:6.1f} MB  bare exporter  {exp_rss:6.1f} MB")
    print(f"  ragmon --version loads: {', '.join(loaded('import ragmon.cli')) or 'none of them'}")
    run_loads = loaded("import ragmon.cli, ragmon.sidecar.process")
    print(f"  ragmon run loads:       {', '.join(run_loads) or 'none of them'}")
    costs = sorted(import_costs("import ragmon.cli, ragmon.sidecar.process").items(), key=lambda kv: -kv[1])
    total = sum(ms for _, ms in costs)
    print(f"  ragmon run's imports: {total:.0f} ms (one run, -X importtime self times); the largest:")
    for name, ms in costs[:12]:
        print(f"    {name:28} {ms:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
