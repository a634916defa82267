"""Label value caps: values from traffic are cut to a length, and past a per-label number of
distinct values, new values fold into ``other``."""

from __future__ import annotations

from collections import Counter

from ragmon.config import MetricsConfig

__all__ = ["DEFAULT_MAX_CHARS", "OTHER", "LabelLimiter"]

OTHER = "other"
DEFAULT_MAX_CHARS = MetricsConfig().max_label_chars
"""``metrics.max_label_chars``'s default."""


class LabelLimiter:
    """Cuts values to ``max_chars`` characters, then keeps at most ``max_values`` distinct
    (cut) values per label name; later ones become ``other``.

    ``truncated`` and ``folded`` count, per label name, the observations whose value was cut
    (resp. folded). Values are never forgotten, so a series' label stays stable for the life
    of the process; what is kept is at most ``max_values × max_chars`` characters per label.
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

    def __call__(self, label: str, value: str) -> str:
        """The value to export for ``label``: ``value`` (cut to ``max_chars``), or ``other``
        past the cap on distinct values."""
        if len(value) > self.max_chars:
            value = value[: self.max_chars]
            self.truncated[label] += 1
        seen = self._seen.get(label)
        if seen is None:
            seen = self._seen[label] = set()
        elif value in seen:
            return value
        if len(seen) < self.max_values:
            seen.add(value)
            return value
        self.folded[label] += 1
        return OTHER
