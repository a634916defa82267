"""Reading JSON Lines files with line numbers, clear errors and an optional progress bar."""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from typing import Any

from ragmon.errors import InputError
from ragmon.formats.progress import PROGRESS_MIN_BYTES, progress_bar

__all__ = ["iter_jsonl", "read_bytes_lines"]

def read_bytes_lines(path: str, *, progress: bool = False) -> Generator[tuple[int, bytes], None, None]:
    """Yield ``(line number, raw line)``; a progress bar on stderr when asked and the file is large."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, also on early exit
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
        except OSError:
            size = 0
        bar = progress_bar(size, "B", os.path.basename(path)) if progress and size >= PROGRESS_MIN_BYTES else None
        try:
            for number, raw in enumerate(handle, start=1):
                if bar is not None:
                    bar.update(len(raw))
                yield number, raw
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        finally:
            if bar is not None:
                bar.close()


def iter_jsonl(path: str, *, progress: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line; ``InputError`` on anything else."""
    for number, raw in read_bytes_lines(path, progress=progress):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(path, f"not UTF-8 ({exc.reason} at byte {exc.start})", number) from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", number) from None
        except RecursionError:
            raise InputError(path, "invalid JSON: nested too deeply", number) from None
        except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
            raise InputError(path, f"invalid JSON: {exc}", number) from None
        if not isinstance(value, dict):
            raise InputError(path, f"expected a JSON object, got {type(value).__name__}", number)
        yield number, value
