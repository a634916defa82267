"""Document text held only for the traces that will need it.

Only the judge (and the offline lexical estimate) reads a retrieved or reranked document's
text, and only for the traces it samples by trace id or a probe sent; the document's id, score
and rank are all the rest of ragmon reads. So the decoders leave the text out of every other
trace's OpenInference documents (``ragmon.otlp.decode.DocumentText``): a document loses its
``document.metadata``, and its ``document.content`` reads as an empty string (so the judge stage
still sees that a text was recorded: what it counts for the traces it skips is unchanged),
neither read from the request. The trace then waits out its grace without them (they were 38%
of what a realistic RAG trace's spans hold), and no time goes into decoding them. A document
keeps both when its ``document.id`` is not a non-empty string (its id is then a hash of its text
or metadata), and every document does when ``document_id`` reads other places
(``metadata.<key>``).
"""

from __future__ import annotations

from collections.abc import Callable

from ragmon.conventions import openinference
from ragmon.conventions._common import DEFAULT_PLACES, ConventionOptions, key_table
from ragmon.otlp.decode import DocumentText

__all__ = ["document_text"]

_PREFIXES = (openinference.RETRIEVAL_DOCUMENTS, openinference.RERANKER_OUTPUT_DOCUMENTS)
_FIELDS = ("id", "content", "metadata")


def document_text(options: ConventionOptions, judged: Callable[[bytes], bool]) -> DocumentText | None:
    """What the decoders leave out: the documents' text of the traces ``judged`` says no to
    (``SpanSelection.document_text``); None when ``options`` read ids from elsewhere than
    ``document.id`` (the text may then be an id)."""
    if options.document_id != DEFAULT_PLACES:
        return None
    tables = tuple(key_table(prefix, _FIELDS) for prefix in _PREFIXES)
    return DocumentText(judged, tables)
