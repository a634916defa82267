"""Judgements: generation-quality scores (faithfulness, answer relevance, …) and toxic answers.

One stream per score name and (service, variant, source, judge), bound on its first value; past
the budget, one fold stream per (name, source, judge). The judge's retrieval verdicts go to the
``RetrievalRecorder`` (source ``judge``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ragmon import catalogue as cat
from ragmon.export.labels import OTHER
from ragmon.export.recording import MeanKey, Recording, Stream

__all__ = ["GENERATION_SCORES", "JudgementRecorder"]

GENERATION_SCORES: dict[str, str] = {name: family.help for name, family in cat.SCORE_HISTOGRAMS.items()}
"""Generation-quality scores (histogram ``ragmon_<name>``, gauge ``ragmon_<name>_mean``)."""


class JudgementRecorder:
    """The ``ragmon_<score>`` histograms and ``ragmon_<score>_mean`` rolling gauges of every
    generation score, and ``ragmon_toxic_answers_total``."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording
        self.generation = {name: recording.histogram(family) for name, family in cat.SCORE_HISTOGRAMS.items()}
        self.toxic = recording.counter(cat.TOXIC_ANSWERS)
        self.streams: dict[str, dict[tuple[str, str, str, str], Stream[MeanKey]]] = {name: {} for name in GENERATION_SCORES}
        """Per score name, the bound stream of each (service, variant, source, judge)."""
        self._folded: dict[tuple[str, str, str], Stream[MeanKey]] = {}

    def observe(
        self, service: str, variant: str, trace_id: str, source: str, judge: str,
        scores: Mapping[str, float], toxic: Mapping[str, bool] | None,
    ) -> None:
        """Buffer one judgement of (``service``, ``variant``), labels already limited: generation
        scores by name under (``source``, ``judge``), and ``toxic`` (category -> whether the answer
        is toxic in it): one count per toxic category, every category's series made at 0."""
        means = self._rec.means
        for name, value in scores.items():
            key = (service, variant, source, judge)
            stream = self.streams[name].get(key) or self._stream(name, key)
            if not stream.values:
                means.append(stream)
            stream.values.append(value)
            stream.trace_ids.append(trace_id)
        if toxic:
            for cell, is_toxic in zip(self.toxic.cells([(service, variant, c) for c in toxic]), toxic.values()):
                if is_toxic:
                    cell.inc()

    def _stream(self, name: str, key: tuple[str, str, str, str]) -> Stream[MeanKey]:
        """The stream of score ``name`` for (service, variant, source, judge), made on its first
        value; past the budget, the fold stream of (source, judge)."""
        streams = self.streams[name]
        family = self.generation[name]
        gauge = cat.SCORE_MEANS[name].name
        service, variant, source, judge = key
        if len(streams) < self._rec.max_series:
            stream = streams[key] = self._rec.stream(gauge, service, variant, source, judge, folded=False)
            stream.histogram = (family, family.series(key))
            return stream
        folded_key = (name, source, judge)
        folded = self._folded.get(folded_key)
        if folded is None:
            folded = self._folded[folded_key] = self._rec.stream(gauge, OTHER, OTHER, source, judge, folded=True)
            folded.histogram = (family, family.folded_series((OTHER, OTHER, source, judge)))
        return folded
