"""Document text held only for the traces that will need it.

Only the judge (and the offline lexical estimate) reads a retrieved or reranked document's
text, and only for the traces it samples by trace id or a probe sent; the document's id, score
and rank are all the rest of ragmon reads. So as a trace's spans enter the pipeline, every
other trace's OpenInference documents lose their ``document.metadata`` and have their
``document.content`` text replaced by an empty string (so the judge stage still sees that a
text was recorded: what it counts for the traces it skips is unchanged): the trace then waits
out its grace without them (they were 38% of what a realistic RAG trace's spans hold). A
document keeps both when its ``document.id`` is not a non-empty string (its id is then a hash of
its text or metadata) and every document does when ``document_id`` reads other places
(``metadata.<key>``). Each span's ``size`` still counts what was dropped (a size is at least
what a span holds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragmon.conventions import openinference
from ragmon.conventions._common import DEFAULT_PLACES, ConventionOptions, key_table
from ragmon.model import AttrValue, Span
from ragmon.otlp.decode import DECODER

__all__ = ["drop_document_text", "text_dropper"]

_PREFIXES = (openinference.RETRIEVAL_DOCUMENTS, openinference.RERANKER_OUTPUT_DOCUMENTS)
_FIELDS = ("id", "content", "metadata")
_FIRST_IDS = tuple(f"{prefix}0.document.id" for prefix in _PREFIXES)


def drop_document_text(attributes: dict[str, AttrValue]) -> int:
    """For documents 0, 1, … (retrieved and reranked, until one has none of id, content and
    metadata) whose ``document.id`` is a non-empty string: remove the metadata and empty a text
    content; returns how many values were dropped."""
    dropped = 0
    for prefix, first in zip(_PREFIXES, _FIRST_IDS):
        if first not in attributes:
            continue
        for id_key, content_key, metadata_key in key_table(prefix, _FIELDS):
            doc_id = attributes.get(id_key)
            if type(doc_id) is str and doc_id:
                content = attributes.get(content_key)
                if type(content) is str and content:
                    attributes[content_key] = ""
                    dropped += 1
                if metadata_key in attributes:
                    del attributes[metadata_key]
                    dropped += 1
            elif doc_id is None and content_key not in attributes and metadata_key not in attributes:
                break
    return dropped


def _compiled() -> Callable[[dict[str, AttrValue]], int] | None:
    """The compiled decoder's ``drop_document_text`` (the same changes, several times faster)
    when the compiled decoder runs (``ragmon.otlp.decode.DECODER``), else None."""
    if DECODER != "compiled":
        return None
    from ragmon.otlp._walker import drop_document_text as compiled

    tables = tuple(key_table(prefix, _FIELDS) for prefix in _PREFIXES)
    return lambda attributes: compiled(attributes, tables, _FIRST_IDS)


def text_dropper(options: ConventionOptions, judged: Callable[[bytes], bool]) -> Callable[[Sequence[Span]], None] | None:
    """What the pipeline calls on each batch it takes: ``drop_document_text`` on the spans of
    traces ``judged`` says no to; None when ``options`` read ids from elsewhere than
    ``document.id`` (the text may then be an id)."""
    if options.document_id != DEFAULT_PLACES:
        return None

    first_retrieved, first_reranked = _FIRST_IDS
    drop_text = _compiled() or drop_document_text

    def drop(spans: Sequence[Span]) -> None:
        for span in spans:
            attributes = span.attributes
            if (
                (first_retrieved in attributes or first_reranked in attributes)
                and type(attributes) is dict
                and not judged(span.trace_id)
            ):
                drop_text(attributes)

    return drop
