"""User feedback: named user scores (thumbs, ratings) joined to their requests.

One stream per (service, variant, name), bound on its first score; past the budget, one fold
stream per name. A joined feedback's retrieval score goes to the ``RetrievalRecorder`` (source
``feedback``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ragmon import catalogue as cat
from ragmon.export.labels import OTHER
from ragmon.export.recording import MeanKey, Recording, Stream

__all__ = ["FeedbackRecorder"]

_GAUGE = cat.USER_FEEDBACK_MEAN.name


class FeedbackRecorder:
    """``ragmon_user_feedback`` (histogram) and ``ragmon_user_feedback_mean`` (rolling gauge)."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording
        self.user_feedback = recording.histogram(cat.USER_FEEDBACK)
        self.streams: dict[tuple[str, str, str], Stream[MeanKey]] = {}
        self._folded: dict[str, Stream[MeanKey]] = {}

    def observe(self, service: str, variant: str, trace_id: str, scores: Mapping[str, float]) -> None:
        """Buffer named user scores of (``service``, ``variant``), labels already limited (``name``
        passes through the label limiter here)."""
        rec = self._rec
        for name, value in scores.items():
            key = (service, variant, rec.limit("name", name))
            stream = self.streams.get(key) or self._stream(key)
            if not stream.values:
                rec.means.append(stream)
            stream.values.append(value)
            stream.trace_ids.append(trace_id)

    def _stream(self, key: tuple[str, str, str]) -> Stream[MeanKey]:
        """The stream of one (service, variant, name); past the budget, the fold stream of ``name``."""
        service, variant, name = key
        family = self.user_feedback
        rec = self._rec
        if len(self.streams) < rec.max_series:
            stream = self.streams[key] = rec.stream(_GAUGE, service, variant, "feedback", name, folded=False)
            stream.histogram = (family, family.series(key))
            return stream
        folded = self._folded.get(name)
        if folded is None:
            folded = self._folded[name] = rec.stream(_GAUGE, OTHER, OTHER, "feedback", name, folded=True)
            folded.histogram = (family, family.folded_series((OTHER, OTHER, name)))
        return folded
