"""LabelLimiter's caps at their smallest settings, and its truncated/folded counts."""

from __future__ import annotations

import pytest

from ragmon.export.labels import OTHER, LabelLimiter


def test_one_value_per_label_keeps_the_first_and_counts_every_fold() -> None:
    """``metrics.max_label_values = 1`` is valid: the first value stays, each later one folds."""
    limit = LabelLimiter(1)
    assert [limit("service", v) for v in ("a", "b", "a", "c")] == ["a", OTHER, "a", OTHER]
    assert limit.folded["service"] == 2
    with pytest.raises(ValueError):
        LabelLimiter(0)


def test_one_character_values_are_allowed() -> None:
    limit = LabelLimiter(2, max_chars=1)
    assert (limit("service", "ab"), limit("service", "b")) == ("a", "b")
    assert limit.truncated["service"] == 1
    with pytest.raises(ValueError):
        LabelLimiter(2, max_chars=0)


def test_a_value_exactly_max_chars_long_is_not_counted_as_cut() -> None:
    limit = LabelLimiter(2, max_chars=3)
    assert limit("service", "abc") == "abc"
    assert limit.truncated["service"] == 0
