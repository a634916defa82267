"""What decoding a request body may take in memory, known before it is decoded.

A JSON body is decoded into a generic tree (``json.loads``) before ragmon reads what it needs,
and that tree costs far more than the body: 25 to 30 times its bytes for arrays of tiny objects
or small integers (``[{"intValue":"1"}, …]``), 7 to 8 times for typical OTLP/JSON spans.
``json_tree_bytes`` bounds it from above from the body's structural characters alone (counted
in C, about 1 ms a MB), so a receiver admits a body at the weight of its tree, not of its bytes.
(A protobuf body is walked in place; what it decodes to is bounded as it is decoded.)

Each structural character stands for what it can make (CPython 3.11, with allocator rounding;
``tests/test_weight.py`` holds the sum above tracemalloc's peak for adversarial shapes):

- ``{``: a dict with up to 5 keys (200 bytes); ``:``: a key beyond those (40) and the value's
  slot, which may hold a number object (48);
- ``[``: a list (72) and its first element, which may be a number (48); ``,``: a list slot
  (at most 10 with over-allocation) and a number (48);
- ``"``: half a string object (33 bytes, 46 for non-Latin-1 text);
- the decoded text and the strings' characters: each at most the body's bytes times the widest
  character the body holds (1, 2 or 4 bytes: a string with one emoji takes 4 bytes a character),
  plus the body's bytes once more for what the decoder keeps.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["json_tree_bytes"]
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89abAB]")
"""An escaped surrogate: the text holds a character past U+FFFF (4 bytes a character)."""


def _width(body: bytes) -> int:
    """Bytes a character of the decoded text may take: 1 (ASCII, Latin-1 escapes), 2, or 4."""
    if body.isascii():
        if b"\\u" not in body:
            return 1
        return 4 if _SURROGATE_ESCAPE.search(body) else 2
    return 4 if max(body) >= 0xF0 or _SURROGATE_ESCAPE.search(body) else 2


def json_tree_bytes(body: bytes) -> int:
    """An upper bound of the memory ``json.loads(body.decode())`` takes (see the module docstring)."""
    count = body.count
    width = _width(body)
    quote = 33 if width == 1 else 46
    size = len(body)
    return ((2 * width + 1) * size + 80 + 200 * count(b"{") + 120 * count(b"[") + 88 * count(b":")
            + 58 * count(b",") + quote * count(b'"'))
