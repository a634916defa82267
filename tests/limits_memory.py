"""A ``ragmon run`` process's memory, phase by phase: ``Memory`` samples /proc/<pid>/status
every 50 ms and resets the kernel's peak (VmHWM, through /proc/<pid>/clear_refs) at each
phase's start, so each phase's peak is its own; ``Run`` holds a configuration's figures and
prints them as a table."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from limits_configs import SHARE, MiB, Shipped


def _kb(path: str) -> dict[str, int]:
    """The ``key: N kB`` lines of a /proc file, in kB."""
    values: dict[str, int] = {}
    with open(path) as lines:
        for line in lines:
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                values[key] = int(rest.split()[0])
    return values


@dataclass
class PhaseFigure:
    """What one phase measured (bytes, seconds)."""

    name: str
    seconds: float = 0.0
    peak: int = 0
    """VmHWM over the phase (reset at its start)."""
    end: int = 0
    """VmRSS at its end."""
    anonymous: int = 0
    """Anonymous memory at its end (smaps_rollup)."""
    reached: list[str] = field(default_factory=list)
    """What the phase drove the process to (gauges, counts, answers)."""
    why: str = ""
    """Why a filling phase stopped: ``at its cap``, ``RSS past the limit``, ``stopped growing``…"""

    @property
    def over(self) -> bool:
        """Stopped growing its bound because RSS passed the ceiling (the container's limit)."""
        return self.why == "RSS past the limit"


class Memory:
    """Samples the process's RSS every ``interval`` seconds (killing it past ``kill_above``
    bytes, to spare the machine); ``phase(name)`` measures one phase."""

    def __init__(self, pid: int, kill_above: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.kill_above = kill_above
        self.killed = 0
        """RSS at which the process was killed (0: it was not)."""
        self.figures: list[PhaseFigure] = []
        self.rss = 0
        self._peak = 0
        """The largest RSS sampled since the phase began."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resettable = True
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, KeyError):
                rss = _kb(f"/proc/{self.pid}/status")["VmRSS"] * 1024
                with self._lock:
                    self.rss = rss
                    self._peak = max(self._peak, rss)
                if rss > self.kill_above and not self.killed:
                    self.killed = rss
                    os.kill(self.pid, signal.SIGKILL)
            self._stop.wait(interval)

    def _reset_peak(self) -> None:
        """Forget the peak: the sampled one, and the kernel's (VmHWM) when it may be reset."""
        with self._lock:
            self._peak = self.rss
        if self._resettable:
            try:
                with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
                    clear.write("5")
            except OSError:
                self._resettable = False

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseFigure]:
        """Measure the block as phase ``name``: its peak (VmHWM since its start, or the largest
        sample where VmHWM cannot be reset), RSS and anonymous memory at its end."""
        figure = PhaseFigure(name)
        self._reset_peak()
        started = time.monotonic()
        try:
            yield figure
        finally:
            figure.seconds = time.monotonic() - started
            with self._lock:
                figure.peak = max(self._peak, self.killed)
            with contextlib.suppress(OSError, KeyError):
                status = _kb(f"/proc/{self.pid}/status")
                if self._resettable:
                    figure.peak = max(figure.peak, status["VmHWM"] * 1024)
                figure.end = status["VmRSS"] * 1024
                figure.anonymous = _kb(f"/proc/{self.pid}/smaps_rollup")["Anonymous"] * 1024
            self.figures.append(figure)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Run:
    """One configuration's run: its figures and what it found."""

    shipped: Shipped
    figures: list[PhaseFigure] = field(default_factory=list)
    seconds: float = 0.0
    healthz: str = ""
    """``ok`` when /healthz answered 200 at the end, else what happened."""
    killed: int = 0
    """RSS at which the harness killed ragmon to spare the machine (0: it did not)."""
    not_run: list[str] = field(default_factory=list)
    """Phases not run: RSS had passed the limit (the container would have been killed)."""
    not_run_why: str = ""
    problems: list[str] = field(default_factory=list)
    """What the harness could not drive (each fails the test)."""

    @property
    def peak(self) -> int:
        return max([f.peak for f in self.figures] + [self.killed])

    @property
    def over_at(self) -> str:
        """The first phase whose peak passed the budget ("" if none)."""
        return next((f.name for f in self.figures if f.peak > self.shipped.budget), "")

    def table(self) -> str:
        """The figures, one line a phase (MiB)."""
        s = self.shipped
        lines = [
            f"== {s.name}: {s.origin}; limit {s.limit / MiB:.0f} MiB, budget {SHARE:.0%} = {s.budget / MiB:.0f} MiB; "
            f"peak {self.peak / MiB:.0f} MiB ({self.peak / s.limit:.0%} of the limit); "
            f"first over the budget: {self.over_at or 'none'}; run {self.seconds:.0f} s; /healthz at the end: {self.healthz}"
            + (f"; KILLED at {self.killed / MiB:.0f} MiB" if self.killed else ""),
            f"   {'phase':<6} {'peak MiB':>9} {'end MiB':>8} {'anon MiB':>9} {'s':>5}  reached",
        ]
        for f in self.figures:
            mark = " [stopped: RSS past the limit]" if f.over else ""
            lines.append(
                f"   {f.name:<6} {f.peak / MiB:>9.0f} {f.end / MiB:>8.0f} {f.anonymous / MiB:>9.0f} {f.seconds:>5.1f}  "
                f"{' | '.join(f.reached)}{mark}"
            )
        if self.not_run:
            lines.append(f"   not run ({self.not_run_why}): {', '.join(self.not_run)}")
        lines += [f"   problem: {p}" for p in self.problems]
        return "\n".join(lines)
