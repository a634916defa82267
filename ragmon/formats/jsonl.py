"""Reading JSON Lines files with line numbers, clear errors and an optional progress bar."""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from typing import Any

from ragmon.errors import InputError
from ragmon.formats.progress import PROGRESS_MIN_BYTES, progress_bar

__all__ = ["BLOCK_BYTES", "iter_jsonl", "read_blocks", "read_bytes_lines"]

BLOCK_BYTES = 4 << 20
"""About how many bytes of whole lines ``read_line_blocks`` hands over at once."""

def read_blocks(path: str, *, progress: bool = False, size: int = BLOCK_BYTES) -> Generator[tuple[int, bytes], None, None]:
    """Yield ``(number of the first line, block)``: the file's bytes about ``size`` at a time,
    each block ending at a line's end (the last one at the file's end), for readers that work
    on many lines at once; a progress bar on stderr when asked and the file is large."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, also on early exit
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    with handle:
        try:
            total = os.fstat(handle.fileno()).st_size
        except OSError:
            total = 0
        bar = progress_bar(total, "B", os.path.basename(path)) if progress and total >= PROGRESS_MIN_BYTES else None
        number, carry = 1, []  # the start of a line longer than a block, in parts (joined once)
        try:
            while chunk := handle.read(size):
                if bar is not None:
                    bar.update(len(chunk))
                cut = chunk.rfind(b"\n") + 1
                if not cut:
                    carry.append(chunk)
                    continue
                block = b"".join([*carry, chunk[:cut]])
                carry = [chunk[cut:]] if cut < len(chunk) else []
                yield number, block
                number += block.count(b"\n")
            if carry:
                yield number, b"".join(carry)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        finally:
            if bar is not None:
                bar.close()


def read_bytes_lines(path: str, *, progress: bool = False) -> Generator[tuple[int, bytes], None, None]:
    """Yield ``(line number, raw line)``; a progress bar on stderr when asked and the file is large."""
    blocks = read_blocks(path, progress=progress)
    try:
        for first, block in blocks:
            yield from enumerate(block.splitlines(keepends=True) if b"\r" not in block else _lines(block), start=first)
    finally:
        blocks.close()  # the file too, when the reader stops early


def _lines(block: bytes) -> list[bytes]:
    """A block's lines as a binary file iterates them: split after each newline only."""
    lines = block.split(b"\n")
    last = lines.pop()
    return [line + b"\n" for line in lines] + ([last] if last else [])


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
