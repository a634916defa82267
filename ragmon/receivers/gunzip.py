"""Bounded gzip decompression of request bodies: every member, never past a limit."""

from __future__ import annotations

import zlib

from ragmon.errors import BodyTooLargeError

__all__ = ["gunzip"]

_MAGIC = b"\x1f\x8b"
_FIRST_STEP = 256
_MAX_STEP = 1 << 20


def gunzip(body: bytes, limit: int) -> bytes:
    """Decompress every gzip member of ``body`` (concatenated members are valid gzip).

    Never holds more than ``limit + 1`` decompressed bytes: ``BodyTooLargeError`` past ``limit``, so a
    bomb (a small body that inflates hugely) costs at most ``limit`` bytes of work.
    ``zlib.error`` for a corrupt or truncated member, or for bytes after the last member that
    do not start another. Work is linear in ``len(body)``: each member is fed in slices that
    start small and double, so what zlib copies back past a member's end stays small.
    """
    out = bytearray()
    view = memoryview(body)
    pos, end = 0, len(body)
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        step = _FIRST_STEP
        while not inflater.eof:
            if pos >= end:
                raise zlib.error("truncated gzip stream")
            piece = view[pos:pos + step]
            step = min(2 * step, _MAX_STEP)
            out += inflater.decompress(piece, limit - len(out) + 1)
            if len(out) > limit or inflater.unconsumed_tail:
                raise BodyTooLargeError  # output stopped at limit + 1: the input holds more
            pos += len(piece) - len(inflater.unused_data)
        if pos >= end:
            return bytes(out)
        if view[pos:pos + 2] != _MAGIC:
            raise zlib.error(f"{end - pos} byte(s) after the last gzip member")
