"""Offline lexical faithfulness estimate, used when no judge endpoint is configured.

Approximate by design (exported with ``judge="lexical"``): it checks word overlap, not meaning,
so a paraphrase can count as unsupported and a negated copy as supported. A sentence of the
answer is supported when at least ``threshold`` of its content tokens (NFKC, case-folded,
``\\w+`` runs, stopwords dropped) occur in the retrieved context:

    score = supported sentences / sentences with content tokens;  no such sentence -> None
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = ["DEFAULT_THRESHOLD", "STOPWORDS", "split_sentences", "content_tokens", "sentence_support", "lexical_faithfulness"]

DEFAULT_THRESHOLD: Final = 0.6
STOPWORDS: Final = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves also may might must shall us""".split()
)
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f\u2026])\s+|[\r\n\u2028\u2029]+|(?<=[\u3002\uff01\uff1f])")
_TOKEN = re.compile(r"\w+")


def _clean(text: str) -> str:
    """NFKC, case-folded, with invisible format characters (zero-width, bidi) removed."""
    if text.isascii():  # NFKC leaves ASCII alone, it has no format characters, casefold is lower
        return text.lower()
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``. ! ? …`` (and CJK stops) and at line breaks."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def content_tokens(text: str) -> list[str]:
    """Lowercased word tokens of ``text`` without stopwords (unicode letters and digits)."""
    return [t for t in _TOKEN.findall(_clean(text)) if t not in STOPWORDS]


def sentence_support(answer: str, contexts: Iterable[str | None], threshold: float = DEFAULT_THRESHOLD) -> list[bool]:
    """For each answer sentence with content tokens: are >= ``threshold`` of them in the context?"""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    sentences = [tokens for tokens in map(content_tokens, split_sentences(answer)) if tokens]
    if not sentences:
        return []
    text = "\n".join([_clean(c) for c in contexts if c])  # no token spans a line break
    vocabulary = {t for t in set().union(*sentences) if _has_token(text, t)}
    return [sum(1 for t in tokens if t in vocabulary) / len(tokens) >= threshold for tokens in sentences]


def _is_word(ch: str) -> bool:
    """Whether ``ch`` is a ``\\w`` character (``str.isalnum()`` or ``_``, as ``re`` defines it)."""
    return ch.isalnum() or ch == "_"


def _has_token(text: str, token: str) -> bool:
    """Whether ``token`` (``\\w`` characters) is one of ``text``'s ``\\w+`` runs: found with
    ``str.find`` and no word character on either side (no token list of the whole text)."""
    end = len(text)
    size = len(token)
    at = text.find(token)
    while at >= 0:
        after = at + size
        if (at == 0 or not _is_word(text[at - 1])) and (after == end or not _is_word(text[after])):
            return True
        at = text.find(token, after)
    return False


def lexical_faithfulness(
    answer: str | None, contexts: Iterable[str | None], threshold: float = DEFAULT_THRESHOLD
) -> float | None:
    """Supported sentences / sentences, in [0, 1]; ``None`` when the answer has no content sentence.

    ``contexts`` are the retrieved documents' contents (``None`` entries are skipped).
    """
    if not answer:
        return None
    support = sentence_support(answer, contexts, threshold)
    if not support:
        return None
    return sum(support) / len(support)
