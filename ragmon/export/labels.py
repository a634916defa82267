"""Label values made valid once, here: values from traffic are cleaned of characters the
exposition cannot carry or that break the tools reading it, cut to a length, and past a
per-label number of distinct values, new values fold into ``other``."""

from __future__ import annotations

from collections import Counter

from ragmon.config import MetricsConfig

__all__ = ["DEFAULT_MAX_CHARS", "OTHER", "REPLACEMENT", "LabelLimiter", "clean_label"]

OTHER = "other"
DEFAULT_MAX_CHARS = MetricsConfig().max_label_chars
"""``metrics.max_label_chars``'s default."""
REPLACEMENT = "\ufffd"
"""What a character a label value cannot keep becomes."""
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional marks, embeddings, overrides and isolates: they reorder how a value reads."""


def _kept(ch: str) -> bool:
    """Whether a label value keeps ``ch``: not a lone surrogate (the exposition's UTF-8 encoder
    raises on one), not a control character (CR, NUL, escape: legal in the exposition, but they
    break tools that split it into lines or fields), not a bidirectional override."""
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code < 0xE000:
        return False
    return ch not in _BIDI


def clean_label(value: object) -> str:
    """``value`` as a label value: a string's characters a label cannot keep replaced by
    U+FFFD (``_kept``); anything that is not a string is no value (``""``), never its repr."""
    if not isinstance(value, str):
        return ""
    text = str.__str__(value)  # a str subclass's own text, not what its __str__ says
    if text.isprintable():  # no control, format, surrogate, separator or unassigned character
        return text
    return "".join(ch if _kept(ch) else REPLACEMENT for ch in text)


class LabelLimiter:
    """Cleans values (``clean_label``), cuts them to ``max_chars`` characters, then keeps at most
    ``max_values`` distinct (cut) values per label name; later ones become ``other``.

    ``replaced``, ``truncated`` and ``folded`` count, per label name, the observations whose
    value had characters replaced (resp. was cut, folded). Values are never forgotten, so a
    series' label stays stable for the life of the process; what is kept is at most
    ``max_values × max_chars`` characters per label.
    """

    def __init__(self, max_values: int, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if max_values < 1:
            raise ValueError(f"max_values must be at least 1, got {max_values}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {max_chars}")
        self.max_values = max_values
        self.max_chars = max_chars
        self._seen: dict[str, set[str]] = {}
        self.folded: Counter[str] = Counter()
        self.truncated: Counter[str] = Counter()
        self.replaced: Counter[str] = Counter()

    def __call__(self, label: str, value: object) -> str:
        """The value to export for ``label``: ``value`` cleaned and cut to ``max_chars``, or
        ``other`` past the cap on distinct values."""
        seen = self._seen.get(label)
        if seen is not None and type(value) is str and value in seen:
            return value  # the common case: a value kept before (clean and short enough)
        if type(value) is str and value.isprintable():
            text = value
        else:
            text = clean_label(value)
            if text != value:
                self.replaced[label] += 1
        if len(text) > self.max_chars:
            text = text[: self.max_chars]
            self.truncated[label] += 1
        if seen is None:
            seen = self._seen[label] = set()
        elif text in seen:
            return text
        if len(seen) < self.max_values:
            seen.add(text)
            return text
        self.folded[label] += 1
        return OTHER
