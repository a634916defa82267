"""Bounded gunzip of request bodies: the limit to the byte, gzip only, errors that name the fault,
and an end to every hostile body."""

from __future__ import annotations

import gzip
import threading
import zlib

import pytest

from ragmon.errors import BodyTooLargeError
from ragmon.receivers.gunzip import gunzip


def _gunzip(body: bytes, limit: int) -> bytes:
    """``gunzip`` in a daemon thread that must end within 2 s, so a hang fails the test."""
    result: list[bytes] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(gunzip(body, limit))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            error.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(2.0)
    assert not worker.is_alive(), "gunzip did not end"
    if error:
        raise error[0]
    return result[0]


def test_the_limit_holds_to_the_byte() -> None:
    assert _gunzip(gzip.compress(b"a" * 100), 100) == b"a" * 100
    with pytest.raises(BodyTooLargeError):
        _gunzip(gzip.compress(b"a" * 101), 100)
    with pytest.raises(BodyTooLargeError):
        _gunzip(gzip.compress(b"a" * 60) + gzip.compress(b"b" * 41), 100)


def test_inflation_stops_one_byte_past_the_limit() -> None:
    """At most ``limit + 1`` bytes are inflated: a member two bytes over the limit is too large
    before its (corrupt) checksum is ever reached."""
    body = bytearray(gzip.compress(b"a" * 102))
    body[-5] ^= 1  # CRC-32 trailer
    with pytest.raises(BodyTooLargeError):
        _gunzip(bytes(body), 100)
    with pytest.raises(zlib.error, match="incorrect data check"):
        _gunzip(bytes(body), 102)


def test_a_zlib_stream_is_not_gzip() -> None:
    """``Content-Encoding: gzip`` means the gzip format, not a bare zlib (deflate) stream."""
    with pytest.raises(zlib.error):
        _gunzip(zlib.compress(b"not gzip"), 100)


def test_a_truncated_member_is_reported_as_truncated() -> None:
    """The text reaches the client in the 400 answer ("invalid gzip body: ...")."""
    whole = gzip.compress(b"a" * 1000)
    for cut in (1, 8, len(whole) // 2):
        with pytest.raises(zlib.error) as raised:
            _gunzip(whole[:-cut], 2000)
        assert str(raised.value) == "truncated gzip stream"


def test_trailing_bytes_are_counted_in_the_error() -> None:
    body = gzip.compress(b"x" * 10) + gzip.compress(b"y" * 10) + b"trailing"
    with pytest.raises(zlib.error) as raised:
        _gunzip(body, 100)
    assert str(raised.value) == "8 byte(s) after the last gzip member"


def test_bodies_of_every_size_end() -> None:
    """Whole bodies (one or many members, past the first slice) are inflated and the call ends."""
    big = bytes(range(256)) * 40  # 10 KB, several slices
    assert _gunzip(gzip.compress(big, compresslevel=0), 1 << 20) == big
    assert _gunzip(gzip.compress(b"a") * 3, 10) == b"aaa"
