"""Running the ``ragmon`` command line from tests: in process (fast) or as a real process.

``ragmon(...)`` calls ``ragmon.cli.main`` (what the console script and ``python -m ragmon`` call)
in this interpreter, with stdout and stderr captured the way a pipe would carry them, and
returns what ``subprocess.run`` would. ``ragmon_process(...)`` runs ``python -m ragmon`` for
what only a real process proves (the entry point, start-up, a real pipe or terminal);
tests/test_cli.py checks on a sample of cases that both give the same answer.
"""

from __future__ import annotations

import contextlib
import io
import json
import locale
import logging
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from ragmon.cli import main

TIMEOUT = 60

_LOCK = threading.Lock()
"""``main`` runs on this process's sys.stdout, sys.stderr and working directory: one at a time."""


def ragmon_process(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ragmon`` in a subprocess; stdout and stderr are pipes (stderr is not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "ragmon", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )


def ragmon(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Call ``ragmon.cli.main`` in process, as ``ragmon_process`` would run it: same return
    code, stdout and stderr (an uncaught exception prints its traceback and returns 1).
    Not for ``ragmon run``: it configures logging and signal handlers for the whole process."""
    argv = [*map(str, args)]
    encoding = locale.getpreferredencoding(False)  # what a pipe's text layer uses, both ends
    out, err = io.BytesIO(), io.BytesIO()
    # As a child's pipes: stdout strict (main makes it backslashreplace), stderr backslashreplace.
    stdout = io.TextIOWrapper(out, encoding=encoding, errors="strict")
    stderr = io.TextIOWrapper(err, encoding=encoding, errors="backslashreplace")
    with _LOCK, _as_a_fresh_process(stdout, stderr, cwd):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors, --help, --version
            code = _exit_status(exc.code, stderr)
        except Exception:
            traceback.print_exc(file=stderr)
            code = 1
        stdout.flush()
        stderr.flush()
    return subprocess.CompletedProcess(["ragmon", *argv], code, _text(out, encoding), _text(err, encoding))


@contextlib.contextmanager
def _as_a_fresh_process(stdout: TextIO, stderr: TextIO, cwd: Path | None) -> Iterator[None]:
    """sys.stdout/stderr, the working directory, Python's default warning filters and
    logging's last-resort handler as a fresh ``python -m ragmon`` has them; all restored after.

    Under pytest, warnings would be recorded by pytest and log records taken by its capture
    handlers on the root logger, where a real process prints both on stderr."""
    root = logging.getLogger()
    last_resort = logging.lastResort
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(stdout))
        stack.enter_context(contextlib.redirect_stderr(stderr))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(warnings.catch_warnings())
        warnings.resetwarnings()
        for action, category, module in _DEFAULT_WARNING_FILTERS:
            warnings.filterwarnings(action, category=category, module=module)
        warnings.showwarning = _show_warning
        if last_resort is not None and last_resort not in root.handlers:
            root.addHandler(last_resort)
            stack.callback(root.removeHandler, last_resort)
        yield


_DEFAULT_WARNING_FILTERS: list[tuple[Literal["default", "ignore"], type[Warning], str]] = [
    # Python 3.11's defaults (``python -W`` unset), in this order (filterwarnings prepends).
    ("ignore", ResourceWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", DeprecationWarning, ""),
    ("default", DeprecationWarning, "__main__"),
]


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Print a warning on the current sys.stderr, as Python's own ``showwarning`` does."""
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def _exit_status(code: object, stderr: TextIO) -> int:
    """The status ``sys.exit(code)`` gives a process (a message is printed, and is status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


def _text(raw: io.BytesIO, encoding: str) -> str:
    """Decode as ``subprocess.run(text=True)`` does: universal newlines."""
    return raw.getvalue().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


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
