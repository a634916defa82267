"""Running the real ``ragmon`` command line from tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TIMEOUT = 60


def ragmon(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line; stdout and stderr are pipes (so stderr is not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "ragmon", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSON Lines and return the path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_json(command: str, *args: str | Path) -> dict[str, Any]:
    """Run ``ragmon COMMAND … --format json``; it must succeed silently on stderr."""
    result = ragmon(command, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)
