"""``ragmon run`` as a real process: ports from its log, stderr drained by a thread."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

class OutputLines:
    """Every line a process prints on stdout, read by a thread as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


PORT_LINE = re.compile(r"(metrics|OTLP/HTTP|OTLP/gRPC) on ([\d.]+):(\d+)")
LOCAL_PORTS = '[receiver]\nhttp = "127.0.0.1:0"\ngrpc = "127.0.0.1:0"\n[metrics]\nlisten = "127.0.0.1:0"\n'
"""A configuration's start: every listener on a free port of 127.0.0.1."""


class RagmonProcess:
    """``python -m ragmon run ARGS``; ``ports`` by name once started, ``lines`` of stderr so far.

    A context manager: leaving the block kills the process if it still runs, so a test that fails
    mid-way leaves no sidecar behind holding its ports."""

    def __init__(self, *args: str, expect: int = 3, preexec_fn: Callable[[], object] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ragmon", "run", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn,
        )
        self.lines: list[str] = []
        self.ports: dict[str, int] = {}
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.wait_for(lambda: len(self.ports) >= expect or self.process.poll() is not None, 30)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RagmonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the process if it still runs and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line)
                for match in PORT_LINE.finditer(line):
                    self.ports[match.group(1)] = int(match.group(3))
                self._changed.notify_all()

    def wait_for(self, condition: object, timeout: float) -> bool:
        """Wait until ``condition()`` holds (checked at each stderr line and every 0.1 s)."""
        assert callable(condition)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.1))
        return True

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def signal(self, sig: int = signal.SIGTERM) -> float:
        """Send ``sig``; returns the monotonic time it was sent."""
        sent = time.monotonic()
        self.process.send_signal(sig)
        return sent

    def wait(self, timeout: float) -> int:
        """The exit code (the process is killed past ``timeout`` and the test fails)."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(f"ragmon did not exit within {timeout}s:\n{self.stderr[-3000:]}") from None
        self._reader.join(5)
        return code

    def stop(self, timeout: float = 30.0) -> int:
        self.signal()
        return self.wait(timeout)

    def url(self, name: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    def get(self, path: str, timeout: float = 5.0) -> str:
        """GET ``path`` on the metrics port."""
        with urllib.request.urlopen(self.url("metrics", path), timeout=timeout) as response:
            return str(response.read().decode())


def config_file(tmp_path: Path, extra: str = "", name: str = "ragmon.toml") -> str:
    """A configuration with every listener on a free port, then ``extra`` (TOML)."""
    path = tmp_path / name
    text = LOCAL_PORTS
    for line in extra.strip().splitlines():
        text += line + "\n"
    path.write_text(_merge(text))
    return str(path)


def _merge(text: str) -> str:
    """Merge repeated ``[section]`` headers so ``extra`` may add keys to the port sections."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            current = stripped
            sections.setdefault(current, [])
        elif stripped:
            sections.setdefault(current, []).append(line)
    return "".join(f"{name}\n" + "".join(f"{line}\n" for line in lines) for name, lines in sections.items())
