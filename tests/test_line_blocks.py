"""``ragmon.formats.jsonl.read_blocks`` hands over whole lines, numbered as the file's lines,
whatever the block size; ``read_bytes_lines`` splits them as a binary file iterates."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragmon.formats.jsonl import read_blocks, read_bytes_lines

TEXTS = [
    b"", b"a", b"a\n", b"\n\n", b"one\ntwo\r\nthree\rfour\n\nfive", b"x" * 100 + b"\n" + b"y" * 3,
    b"\r\n\r\n", b"a\rb\rc\n", b"long" * 50 + b"\nshort\n",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("size", [1, 3, 7, 64, 1 << 20])
def test_blocks_are_whole_lines_and_lines_are_a_file_s_lines(tmp_path: Path, text: bytes, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(text)
    with open(path, "rb") as f:
        expected = list(enumerate(f, start=1))
    blocks = list(read_blocks(str(path), size=size))
    assert b"".join(b for _, b in blocks) == text
    line = 1
    for first, block in blocks:
        assert first == line and block and (block.endswith(b"\n") or block is blocks[-1][1])
        line += block.count(b"\n")
    assert list(read_bytes_lines(str(path))) == expected


def test_random_files(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "f"
    for _ in range(200):
        text = bytes(rng.choice(b"ab\n\r ") for _ in range(rng.randrange(60)))
        path.write_bytes(text)
        with open(path, "rb") as f:
            expected = list(enumerate(f, start=1))
        assert list(read_bytes_lines(str(path))) == expected
        size = rng.randint(1, 16)
        assert [n for n, _ in read_blocks(str(path), size=size)] == sorted({n for n, _ in read_blocks(str(path), size=size)})
        assert b"".join(b for _, b in read_blocks(str(path), size=size)) == text
