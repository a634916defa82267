"""Retrieval quality: queries, hits@k, reciprocal rank, recall, precision and NDCG per source.

Every source feeds the same series: labels (``labels``, ``golden``), the judge's relevance
verdicts (``judge``: no recall or NDCG) and joined feedback (``feedback``). One
``_RetrievalSeries`` per (service, variant, source), bound on its first score; past the budget,
one fold entry per source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ragmon import catalogue as cat
from ragmon.export.labels import OTHER
from ragmon.export.recording import MeanKey, Recording, Stream
from ragmon.export.series import Cell, FoldedSeries, HistogramFamily, HistogramSeries
from ragmon.scoring.records import RetrievalScore

__all__ = ["RetrievalRecorder"]

_PER_K_GAUGES = tuple(
    f.name for f in (cat.RETRIEVAL_HIT_RATE, cat.RETRIEVAL_RECALL_MEAN, cat.RETRIEVAL_PRECISION_MEAN, cat.RETRIEVAL_NDCG_MEAN)
)
_PerK: TypeAlias = tuple[int, Cell, list[float], list[float], list[float], list[float]]
"""(k, hits counter, and the pending hit, recall, precision, NDCG values)."""


@dataclass(frozen=True, slots=True)
class _RetrievalSeries:
    """State of one (service, variant, source) bound once: no label lookups per request."""

    queries: Cell
    rr: Stream[MeanKey]
    streams: tuple[Stream[MeanKey], ...]
    """rr, then per k hit, recall, precision, NDCG: always fed together, pending together."""
    per_k: tuple[_PerK, ...]


class RetrievalRecorder:
    """``ragmon_retrieval_{queries,hits}_total``, the reciprocal rank, recall, precision and NDCG
    histograms and their rolling means, at each ``ks``."""

    def __init__(self, recording: Recording, ks: Sequence[int]) -> None:
        self._rec = recording
        self.ks = tuple(ks)
        self.queries = recording.counter(cat.RETRIEVAL_QUERIES)
        self.hits = recording.counter(cat.RETRIEVAL_HITS)
        self.rr = recording.histogram(cat.RETRIEVAL_RECIPROCAL_RANK)
        self.recall = recording.histogram(cat.RETRIEVAL_RECALL)
        self.precision = recording.histogram(cat.RETRIEVAL_PRECISION)
        self.ndcg = recording.histogram(cat.RETRIEVAL_NDCG)
        self.series: dict[tuple[str, str, str], _RetrievalSeries] = {}
        self._folded: dict[str, _RetrievalSeries] = {}

    def observe(self, service: str, variant: str, score: RetrievalScore, trace_id: str) -> None:
        """Buffer one retrieval score of (``service``, ``variant``), labels already limited."""
        series = self.series.get((service, variant, score.source)) or self._series(service, variant, score.source)
        series.queries.inc()
        stream = series.rr
        if not stream.values:
            self._rec.means.extend(series.streams)
        stream.values.append(score.reciprocal_rank)
        stream.trace_ids.append(trace_id)
        hit_at, recall_at, precision_at, ndcg_at = score.hit, score.recall, score.precision, score.ndcg
        full = bool(recall_at)  # the judge source has no recall or NDCG (SPEC §5)
        for k, hits, hit_values, recall_values, precision_values, ndcg_values in series.per_k:
            hit = hit_at[k]
            hits.inc(hit)
            hit_values.append(hit)
            precision_values.append(precision_at[k])
            if full:
                recall_values.append(recall_at[k])
                ndcg_values.append(ndcg_at[k])

    def _series(self, service: str, variant: str, source: str) -> _RetrievalSeries:
        """The bound state of one (service, variant, source), made on its first retrieval;
        past the budget, the fold entry of ``source``."""
        if len(self.series) < self._rec.max_series:
            series = self.series[(service, variant, source)] = self._new_series(service, variant, source, folded=False)
            return series
        folded = self._folded.get(source)
        if folded is None:
            folded = self._folded[source] = self._new_series(OTHER, OTHER, source, folded=True)
        return folded

    def _new_series(self, service: str, variant: str, source: str, *, folded: bool) -> _RetrievalSeries:
        rec = self._rec
        labels = (service, variant, source)
        per_k_labels = [(*labels, str(k)) for k in self.ks]

        def histograms(family: HistogramFamily, group: Sequence[tuple[str, ...]]) -> list[HistogramSeries | FoldedSeries]:
            if folded:
                return [family.folded_series(one) for one in group]
            return family.series_group(group)

        rr = rec.stream(cat.RETRIEVAL_MRR.name, service, variant, source, "", folded=folded)
        rr.histogram = (self.rr, histograms(self.rr, [labels])[0])
        hit_cells = [self.hits.folded_cell(one) for one in per_k_labels] if folded else self.hits.cells(per_k_labels)
        per_family = {
            family: histograms(family, per_k_labels)
            for family in (self.recall, self.precision, self.ndcg)
            if source != "judge" or family is self.precision  # no recall or NDCG from the judge
        }
        streams: list[Stream[MeanKey]] = [rr]
        per_k: list[_PerK] = []
        for i, k in enumerate(self.ks):
            ks = str(k)
            hit, recall, precision, ndcg = (
                rec.stream(gauge, service, variant, source, ks, folded=folded) for gauge in _PER_K_GAUGES
            )
            for stream, family in ((recall, self.recall), (precision, self.precision), (ndcg, self.ndcg)):
                if family in per_family:
                    stream.histogram = (family, per_family[family][i])
            streams.extend((hit, recall, precision, ndcg))
            per_k.append((k, hit_cells[i], hit.values, recall.values, precision.values, ndcg.values))
        queries = self.queries.folded_cell(labels) if folded else self.queries.cell(labels)
        return _RetrievalSeries(queries, rr, tuple(streams), tuple(per_k))
