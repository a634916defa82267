"""Model calls: tokens by type, cost, unpriced tokens and calls without usage.

Every model call counts once: a request's calls and the calls of traces that are not RAG
requests (a bare client's call, an indexing job's embeddings) alike. One ``_ModelSeries`` per
(service, model), bound on its first call; past the budget, one fold entry (``other``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ragmon import catalogue as cat
from ragmon.export.labels import OTHER
from ragmon.export.recording import Recording
from ragmon.export.series import Cell, CounterFamily
from ragmon.scoring.records import PricedCall

__all__ = ["CallRecorder"]


class _ModelSeries:
    """Counters of one (service, model), each made on its first use (as its series was)."""

    __slots__ = ("_cells", "_folded", "_labels")

    def __init__(self, labels: dict[str, tuple[CounterFamily, tuple[str, ...]]], folded: bool) -> None:
        self._labels = labels
        self._folded = folded
        self._cells: dict[str, Cell] = {}

    def counter(self, name: str) -> Cell:
        """The cell of counter ``name`` ("input", "output", "cost", "without_usage")."""
        cell = self._cells.get(name)
        if cell is None:
            family, labels = self._labels[name]
            cell = self._cells[name] = family.folded_cell(labels) if self._folded else family.cell(labels)
        return cell


class CallRecorder:
    """``ragmon_tokens_total``, ``ragmon_cost_usd_total``, ``ragmon_unpriced_tokens_total`` and
    ``ragmon_llm_calls_without_usage_total``."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording
        self.tokens = recording.counter(cat.TOKENS)
        self.cost = recording.counter(cat.COST_USD)
        self.unpriced = recording.counter(cat.UNPRICED_TOKENS)
        self.without_usage = recording.counter(cat.LLM_CALLS_WITHOUT_USAGE)
        self.series: dict[tuple[str, str], _ModelSeries] = {}
        self._folded: _ModelSeries | None = None

    def count(self, service: str, calls: Iterable[PricedCall]) -> None:
        """Tokens by type, cost, unpriced tokens and calls without usage of ``service`` (limited)."""
        limit = self._rec.limit
        for call in calls:
            model = limit("model", call.model or "unknown")
            ms = self.series.get((service, model)) or self._series(service, model)
            if call.price_source == "no_usage":
                ms.counter("without_usage").inc()
                continue
            if call.input_tokens:
                ms.counter("input").inc(call.input_tokens)
            if call.output_tokens:
                ms.counter("output").inc(call.output_tokens)
            if call.usd is None:
                self.unpriced.cell((model,)).inc(call.input_tokens + call.output_tokens)
            else:
                ms.counter("cost").inc(call.usd)

    def _series(self, service: str, model: str) -> _ModelSeries:
        """The counters of one (service, model), bound on its first call; past the budget, the
        fold entry."""
        folded = len(self.series) >= self._rec.max_series
        if folded:
            if self._folded is not None:
                return self._folded
            service = model = OTHER
        series = _ModelSeries({
            "input": (self.tokens, (service, model, "input")),
            "output": (self.tokens, (service, model, "output")),
            "cost": (self.cost, (service, model)),
            "without_usage": (self.without_usage, (service, model)),
        }, folded)
        if folded:
            self._folded = series
        else:
            self.series[(service, model)] = series
        return series
