"""Label value caps: past a per-label number of distinct values, new values fold into ``other``."""

from __future__ import annotations

from collections import Counter

__all__ = ["OTHER", "LabelLimiter"]

OTHER = "other"


class LabelLimiter:
    """Keeps at most ``max_values`` distinct values per label name; later ones become ``other``.

    ``folded`` counts, per label name, the observations whose value was folded. Values are
    never forgotten, so a series' label stays stable for the life of the process.
    """

    def __init__(self, max_values: int) -> None:
        if max_values < 1:
            raise ValueError(f"max_values must be at least 1, got {max_values}")
        self.max_values = max_values
        self._seen: dict[str, set[str]] = {}
        self.folded: Counter[str] = Counter()

    def __call__(self, label: str, value: str) -> str:
        """The value to export for ``label``: ``value`` itself, or ``other`` past the cap."""
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
