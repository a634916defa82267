"""Every example in the README and the docs runs as written.

A ``sh`` or ``python`` block of a page (README.md, docs/, deploy/ and examples/ pages) is one of:

- marked ``<!-- runnable -->`` on the line right before its fence: run here, the page's
  runnable blocks in order, in one scratch directory holding a copy of ``examples/``, as a
  reader would run them one after the other;
- marked for a test of its own (``DEDICATED``): the offline ``ragmon eval --judge`` examples
  and the pytest example, run with a scripted judge or in a scratch project there;
- listed in ``NOT_RUN`` with the reason: it installs packages, or needs Docker or a cluster.

A block that is none of these fails ``test_every_example_is_run_or_listed``, so a new example
cannot slip in untested. The marker takes options (``<!-- runnable: background until=running: -->``):

- ``file=NAME``: a block of another language (TOML, JSON, text) is written to NAME in the
  scratch directory, for the blocks after it;
- ``copy=PATH,…``: repository paths copied into the scratch directory first;
- ``exit=N``: the exit code the block must end with (default 0);
- ``background``: the block starts a server (``ragmon run``): it runs until ``until=TEXT``
  appears in its output, stays up while the page's later blocks run, and is then interrupted
  (Ctrl-C) and must exit with ``exit``;
- ``interrupt``: the same, interrupted as soon as ``until`` appears (``ragmon demo``);
- ``sidecar``: a ``ragmon run`` is started for the block (once a page) if the page starts none;
- ``judge``: a scripted OpenAI-compatible judge answers (``OPENAI_BASE_URL``).

The ports the pages name (4317, 4318, 9464, 8080) are replaced in each block by free ports of
127.0.0.1, and a ``ragmon run`` started without ``--config`` reads a configuration with those
ports (``RAGMON_CONFIG``). Other blocks run with no ``RAGMON_CONFIG`` and no judge key, so the
examples that promise to need no configuration file are held to it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from judge_server import judge_server_thread
from process_helpers import OutputLines

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

ROOT = Path(__file__).resolve().parents[1]
CODE = {"sh", "bash", "shell", "console", "python", "py", "pycon"}
"""Fence languages that are code a reader runs: each such block must be run or listed."""
SHELL = {"sh", "bash", "shell"}
DEDICATED = {
    "<!-- ragmon-offline-examples -->": "tests/test_readme_offline.py",
    "<!-- ragmon-pytest-example -->": "tests/test_api.py",
}
"""Markers of blocks another test runs (with a scripted judge, or as a pytest project)."""
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "pip install . && ragmon demo"):
        "installs the package (what the test command does); the demo runs in docs/tutorial.md",
    ("README.md", "pip install . && ragmon run"):
        "installs the package; ragmon run runs in docs/tutorial.md and docs/how-to/sidecar.md",
    ("README.md", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install"):
        "the test command itself: .ci/run runs it verbatim (test_ci_runs_the_readme_test_command)",
    ("docs/tutorial.md", "python3 -m venv .venv && . .venv/bin/activate && pip install ."):
        "installs the package",
    ("docs/index.md", "pip install -e '.[docs]'"): "installs the docs extra; CI builds the site (.ci/run)",
    ("docs/tutorial.md", "python -m ragmon.ops.rules --set window=2m"): "starts the compose stack: needs Docker",
    ("docs/tutorial.md", "RAG_HIT_RATE=0.3 docker compose"): "needs Docker",
    ("docs/how-to/sidecar.md", "docker build -f deploy/Dockerfile"): "needs Docker",
    ("docs/how-to/sidecar.md", "docker compose -f deploy/compose.yaml up --build"): "needs Docker",
    ("docs/how-to/kubernetes.md", "kubectl apply -k deploy/kubernetes"):
        "needs a cluster (tests/test_deploy.py validates the manifests offline)",
    ("docs/how-to/scale-out.md", "kubectl create secret generic ragmon-ingest"): "needs a cluster",
}
"""Blocks deliberately not run, by page and the start of their first line, with the reason."""
PORTS = (4317, 4318, 9464, 8080)
PORT_REFERENCE = re.compile(r"(?<=:)(" + "|".join(map(str, PORTS)) + r")\b")
BLOCK_TIMEOUT = 180.0
START_TIMEOUT = 60.0
MARKER = re.compile(r"^<!-- runnable(?::\s*(.*?))?\s*-->$")
OPTIONS = {"file", "copy", "exit", "background", "interrupt", "until", "sidecar", "judge"}


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    marker: str
    """The line right before the fence (stripped)."""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def runnable(self) -> bool:
        return MARKER.match(self.marker) is not None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found += sorted((ROOT / "deploy").rglob("*.md")) + sorted((ROOT / "examples").rglob("*.md"))
    return found


def parse(page: str, text: str) -> list[Block]:
    """The fenced blocks of a page, with the line before each fence and the marker's options."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marker = lines[i - 1].strip() if i else ""
        block = Block(page, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n", marker)
        match = MARKER.match(marker)
        if match and match.group(1):
            for token in shlex.split(match.group(1)):
                key, _, value = token.partition("=")
                block.options[key] = value
        found.append(block)
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for p in pages() for b in parse(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))]


def not_run_key(block: Block) -> tuple[str, str] | None:
    """The ``NOT_RUN`` entry of a block: its page, and the start of its first line."""
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    return next((key for key in NOT_RUN if key[0] == block.page and first.startswith(key[1])), None)


def classify(blocks: list[Block]) -> list[str]:
    """What is wrong with the pages' blocks: code neither run nor listed, a marker on a block
    it cannot apply to, an unknown option, a listed block that is gone."""
    problems = []
    listed: set[tuple[str, str]] = set()
    for block in blocks:
        key = not_run_key(block)
        if key is not None:
            listed.add(key)
        if block.runnable:
            unknown = set(block.options) - OPTIONS
            if unknown:
                problems.append(f"{block.where}: unknown option(s) {sorted(unknown)}")
            if block.lang not in CODE and "file" not in block.options:
                problems.append(f"{block.where}: a runnable {block.lang or 'plain'} block needs file=NAME")
            if block.lang in CODE and block.lang not in SHELL | {"python"}:
                problems.append(f"{block.where}: runnable blocks are sh or python, not {block.lang}")
            if key is not None:
                problems.append(f"{block.where}: marked runnable and listed in NOT_RUN")
        elif block.lang in CODE and block.marker not in DEDICATED and key is None:
            problems.append(f"{block.where}: a {block.lang} block neither marked <!-- runnable --> nor listed in NOT_RUN")
    problems += [f"NOT_RUN lists a block that is gone: {key}" for key in NOT_RUN if key not in listed]
    return problems


def test_every_example_is_run_or_listed() -> None:
    blocks = all_blocks()
    assert sum(b.runnable for b in blocks) >= 25  # the pages were really read
    assert classify(blocks) == []
    dedicated = [b for b in blocks if b.marker in DEDICATED]
    assert {b.marker for b in dedicated} == set(DEDICATED)
    for marker, test in DEDICATED.items():
        assert marker in (ROOT / test).read_text(encoding="utf-8"), (marker, test)


def test_the_check_finds_an_unmarked_block_and_a_stale_entry() -> None:
    page = "Text.\n\n```sh\nragmon eval x.jsonl\n```\n\n<!-- runnable -->\n```python\nprint(1)\n```\n"
    found = parse("docs/new.md", page)
    assert [b.runnable for b in found] == [False, True]
    problems = classify(found)
    assert problems[0] == "docs/new.md:3: a sh block neither marked <!-- runnable --> nor listed in NOT_RUN"
    assert len([p for p in problems if p.startswith("NOT_RUN lists a block that is gone")]) == len(NOT_RUN)
    bad = parse("docs/new.md", "<!-- runnable: colour=red -->\n```toml\nx = 1\n```\n")
    assert classify(bad)[:2] == ["docs/new.md:2: unknown option(s) ['colour']",
                                 "docs/new.md:2: a runnable toml block needs file=NAME"]


# -- running a page's blocks -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Output(OutputLines):
    """A process's merged output, read by a thread."""

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.text:
                return True
            if self.process.poll() is not None:
                self.reader.join(5)
                return text in self.text
            time.sleep(0.1)
        return False

    def interrupt(self, timeout: float = 30.0) -> int | None:
        """Ctrl-C to the process group, as a terminal sends it; the exit code (None: still running, then killed)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            code = None
        self.reader.join(5)
        return code


class PageRun:
    """A page's runnable blocks, in order, in one scratch directory."""

    def __init__(self, tmp_path: Path, stack: ExitStack) -> None:
        self.work = tmp_path / "work"
        shutil.copytree(ROOT / "examples", self.work / "examples")
        self.ports = {port: free_port() for port in PORTS}
        self.config = tmp_path / "sidecar.toml"
        self.config.write_text(
            f'[receiver]\nhttp = "127.0.0.1:{self.ports[4318]}"\ngrpc = "127.0.0.1:{self.ports[4317]}"\n'
            f'[metrics]\nlisten = "127.0.0.1:{self.ports[9464]}"\nlinger = "0s"\n'
        )
        bin_dir = str(Path(sys.executable).parent)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGMON_CONFIG", "RAGMON_RECEIVER_TOKEN", "RAGMON_METRICS_TOKEN"))}
        self.env["PATH"] = bin_dir + os.pathsep + self.env.get("PATH", "")
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")]))
        self.stack = stack
        self.servers: list[tuple[Block, Output]] = []
        self.sidecar = False

    def text(self, block: Block) -> str:
        return PORT_REFERENCE.sub(lambda m: str(self.ports[int(m.group(1))]), block.text)

    def command(self, block: Block) -> list[str]:
        if block.lang == "python":
            script = self.work / f".example_{block.line}.py"
            script.write_text(self.text(block), encoding="utf-8")
            return [sys.executable, script.name]
        return ["bash", "-c", "set -eo pipefail\n" + self.text(block)]

    def start(self, block: Block, env: dict[str, str]) -> Output:
        process = subprocess.Popen(self.command(block), cwd=self.work, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        output = Output(process)
        self.stack.callback(lambda: process.poll() is None and output.interrupt(10))
        return output

    def start_sidecar(self) -> None:
        if self.sidecar:
            return
        output = self.start(Block("(runner)", 0, "sh", "ragmon run\n", ""), {**self.env, "RAGMON_CONFIG": str(self.config)})
        assert output.wait_for("running:", START_TIMEOUT), f"the runner's ragmon run did not start:\n{output.text}"
        self.servers.append((Block("(runner)", 0, "sh", "ragmon run\n", "", {"background": ""}), output))
        self.sidecar = True

    def run(self, block: Block) -> None:
        options = block.options
        for path in filter(None, options.get("copy", "").split(",")):
            source, target = ROOT / path, self.work / path
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
        if "file" in options:
            (self.work / options["file"]).write_text(self.text(block), encoding="utf-8")
            return
        if "sidecar" in options:
            self.start_sidecar()
        env = dict(self.env)
        if "judge" in options:
            server = self.stack.enter_context(judge_server_thread())
            env["OPENAI_BASE_URL"] = server.base_url
        expected = int(options.get("exit", "0"))
        if "background" in options or "interrupt" in options:
            output = self.start(block, {**env, "RAGMON_CONFIG": str(self.config)})
            until = options.get("until", "")
            assert until, f"{block.where}: a server block says until=TEXT"
            assert output.wait_for(until, START_TIMEOUT), f"{block.where}: {until!r} never appeared:\n{output.text}"
            if "background" in options:
                self.sidecar = self.sidecar or "ragmon run" in block.text
                self.servers.append((block, output))
                return
            code = output.interrupt()
            assert code == expected, f"{block.where}: exit {code}, expected {expected}:\n{output.text[-3000:]}"
            assert "Traceback" not in output.text, f"{block.where}:\n{output.text[-3000:]}"
            return
        done = subprocess.run(self.command(block), cwd=self.work, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=BLOCK_TIMEOUT)
        said = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == expected, f"{block.where}: exit {done.returncode}, expected {expected}:\n{said}"
        assert "Traceback" not in done.stderr, f"{block.where}:\n{said}"

    def stop_servers(self) -> None:
        for block, output in reversed(self.servers):
            code = output.interrupt()
            expected = int(block.options.get("exit", "0"))
            assert code == expected, f"{block.where}: exit {code} after Ctrl-C, expected {expected}:\n{output.text[-3000:]}"
            assert "Traceback" not in output.text, f"{block.where}:\n{output.text[-3000:]}"
        self.servers.clear()


def runnable_pages() -> Iterator[str]:
    seen: dict[str, None] = {}
    for block in all_blocks():
        if block.runnable:
            seen.setdefault(block.page)
    yield from seen


@pytest.mark.parametrize("page", list(runnable_pages()))
def test_the_examples_of_a_page_run_as_written(page: str, tmp_path: Path) -> None:
    blocks = [b for b in parse(page, (ROOT / page).read_text(encoding="utf-8")) if b.runnable]
    with ExitStack() as stack:
        run = PageRun(tmp_path, stack)
        for block in blocks:
            run.run(block)
        run.stop_servers()


# -- what else the pages promise ---------------------------------------------------------------------


def test_ci_runs_the_readme_test_command() -> None:
    """The README's test command is the line .ci/run runs, verbatim."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("**Test** —", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip()
    assert block.startswith("apt-get update") and block.endswith('python -m pytest -m "not system" -n 2 && python -m pytest -m system'), block
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert block in ci


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", text, re.MULTILINE)}


def test_the_pages_outside_the_site_link_to_what_exists() -> None:
    """MkDocs checks the links between docs pages (strict); the README and the other pages
    outside docs/ are checked here: each relative link names a file that exists, and an anchor
    into a markdown page names one of its headings."""
    checked = 0
    for page in pages():
        if page.is_relative_to(ROOT / "docs"):
            continue
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve()
            assert resolved.exists(), f"{page.relative_to(ROOT)}: {target}"
            if anchor:
                assert resolved.suffix == ".md" and anchor in _anchors(resolved), f"{page.relative_to(ROOT)}: {target}"
            checked += 1
    assert checked >= 25
    assert _slug("`ragmon eval`: score a run offline") == "ragmon-eval-score-a-run-offline"
