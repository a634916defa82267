"""The status page of a real sidecar in headless Chromium (Debian's ``chromium``): its DOM
has the sections, and its screenshot is not blank."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image
from server_helpers import LoopThread, call_soon
from test_sidecar import FakeClock
from test_status_page import HOSTILE, fed  # noqa: F401  (fed: the fixture)

from ragmon.sidecar.wiring import Sidecar

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

__all__ = ["fed"]  # the fixture: a sidecar that scored the test traces

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1200,1600",
)


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: the README's test command installs it (apt-get install chromium)")
    return found


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def test_the_status_page_renders_in_chromium(
    fed: tuple[Sidecar, FakeClock, LoopThread, list[str]], tmp_path: Path,
) -> None:
    car, clock, loop, trace_ids = fed
    url = f"http://127.0.0.1:{car.ports.metrics}/"
    for _ in range(3):  # history for the sparklines (the sidecar's timer, stepped here)
        call_soon(loop, car.board.sample_history)
        clock.now += 10.0

    dom = run_chromium(tmp_path, "--dump-dom", url).stdout
    for heading in ("Rolling values", "Alerts that hold now", "Receivers", "Conventions detected", "Not measured", "Judge", "Probes", "Worst recent requests"):
        assert f"<h2>{heading}</h2>" in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt; / B" in dom  # shown as text, never run
    assert HOSTILE not in dom
    assert trace_ids[2] in dom and "<polyline" in dom
    assert "hit rate@5 label" in dom and " USD</span>" in dom and "<span class=\"range\">" in dom

    shot = tmp_path / "page.png"
    run_chromium(tmp_path, f"--screenshot={shot}", url)
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1200, 1600)
        colours = rgb.getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50  # text, headings, table borders, sparklines: not one flat colour
        background = max(colours)[0]
        assert background < rgb.size[0] * rgb.size[1] * 0.98  # at least 2% of the pixels drawn
        ink = rgb.crop((0, 0, 1200, 400)).convert("L").getextrema()
        assert ink[0] < 80 and ink[1] > 200  # dark text on a light page near the top
