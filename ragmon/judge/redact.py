"""Redaction of judge input (SPEC §7): config patterns run on all text before it leaves.

Pure. The judge runs it in a worker thread on the record as cut (``prompts.trim_record``): a
text cut there keeps ``REDACT_MARGIN`` characters past what can be sent, dropped again after
redaction, so a match straddling the cut is never sent in part. Before matching, text is put
in the form the judge will see: invisible format and control characters (zero-width, bidi
overrides; newline and tab kept) are dropped (``str.translate``) and the text is NFKC-normalized, so ``alice\\u200b@example.com`` or a fullwidth ``ａｌｉｃｅ＠…`` cannot slip
past an email pattern and be reassembled downstream (``prompts.neutralize`` drops the same
invisible characters). With no pattern, text is passed through untouched.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from ragmon.judge.prompts import invisible_characters
from ragmon.model import RagRecord, RetrievedDocument

__all__ = ["REDACTED", "Redactor"]

REDACTED: Final = "[REDACTED]"


def _visible(text: str) -> str:
    """Drop format, surrogate and control characters (except newline/tab), then NFKC."""
    return unicodedata.normalize("NFKC", text.translate(invisible_characters()))


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces every match of ``patterns`` with ``[REDACTED]``; ``send_documents=False``
    drops document content altogether."""

    patterns: tuple[re.Pattern[str], ...] = ()
    send_documents: bool = True

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], send_documents: bool = True) -> Redactor:
        """Compile ``patterns`` (regular expressions); ``ValueError`` naming a bad one."""
        compiled: list[re.Pattern[str]] = []
        for pattern in patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"judge.redact: invalid regular expression {pattern!r}: {exc}") from None
        return cls(tuple(compiled), send_documents)

    def redact(self, text: str) -> str:
        """``text`` with every match replaced (after invisible characters are dropped, NFKC)."""
        if not self.patterns:
            return text
        out = _visible(text)
        for pattern in self.patterns:
            out = pattern.sub(REDACTED, out)
        return out

    def _maybe(self, text: str | None) -> str | None:
        return None if text is None else self.redact(text)

    def _document(self, doc: RetrievedDocument) -> RetrievedDocument:
        content = self._maybe(doc.content) if self.send_documents else None
        return doc if content is doc.content else replace(doc, content=content)

    def redact_record(self, record: RagRecord) -> RagRecord:
        """A copy with query, answer, reference answer and document contents redacted.

        With ``send_documents=False`` every document's content is ``None`` (ids and scores are
        kept: they are not sent, and they key the judge's relevance labels).
        """
        return replace(
            record,
            query=self._maybe(record.query),
            answer=self._maybe(record.answer),
            reference_answer=self._maybe(record.reference_answer),
            retrieved=tuple(self._document(d) for d in record.retrieved),
            reranked=None if record.reranked is None else tuple(self._document(d) for d in record.reranked),
        )
