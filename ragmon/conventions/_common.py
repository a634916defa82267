"""Pieces every convention shares: options, value coercion, JSON text, document ids.

Pure and cheap: nothing here parses JSON unless the caller asked for a value that only JSON
holds. The tables made on first use (OpenInference document keys, parsed ``document_id``
places) are bounded caches: no result depends on them.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, NamedTuple

from ragmon.config import ScoringConfig, TracesConfig, check_document_id_place
from ragmon.model import AttrValue, RetrievedDocument
from ragmon.numbers import as_finite

__all__ = ["ConventionOptions", "Usage"]

RawDocument = Mapping[str, Any]
"""One document as a span carried it: field name (``id``, ``score``, ``content``,
``metadata``, …) -> value; ``metadata`` is a JSON string or an object."""

_DOCUMENT_FIELD_ALIASES = {"content": ("content", "page_content", "text")}
DOCUMENT_FIELDS = ("id", "score", "content", "metadata")
"""The document fields OpenInference spans carry (what ``flattened_documents`` looks up)."""
_QUERY_KEYS = (
    "input",
    "question",
    "query",
    "q",
    "user_input",
    "prompt",
    "text",
    "message",
    "content",
)
_ANSWER_KEYS = ("output", "answer", "result", "response", "output_text", "text", "content")


_SCORING = ScoringConfig()
_TRACES = TracesConfig()
"""Where ``ConventionOptions``' defaults come from."""


@dataclass(frozen=True, slots=True)
class ConventionOptions:
    """How traces are read.

    ``document_id``: ordered places to take a document's id from; the first that yields a
    non-empty value wins. A place is ``document.<field>`` (a field of the document as the span
    carried it: ``document.id``, ``document.url``, …; for LangChain's OpenInference retriever
    spans, which carry no ``document.id``, the id comes from the span's ``output.value``) or
    ``metadata.<key>`` (a key of the document's metadata object; dots in ``<key>`` walk into
    nested objects when no key matches exactly). When no place yields an id the document's id
    is ``sha256:`` + the first 16 hex digits of the SHA-256 of its UTF-8 content (of its
    metadata JSON when it has no content; ``#<rank>`` when it has neither, which matches no
    label).

    ``variant_attribute``: looked up on the root span, then on its resource; the variant is
    ``"default"`` when neither carries it.

    ``keep_content``: keep the documents' text in the record (the judge needs it); ids taken
    from a content hash are computed either way.

    ``max_duration``: seconds; a stage span lasting longer (or ending before it starts) is left
    out of the stage's time (``RagRecord.invalid_durations``).
    """

    document_id: tuple[str, ...] = _SCORING.document_id
    variant_attribute: str = _SCORING.variant_attribute
    keep_content: bool = True
    max_duration: float = _TRACES.max_duration

    def __post_init__(self) -> None:
        if not self.document_id:
            raise ValueError("document_id: must list at least one place")
        for place in self.document_id:
            try:
                check_document_id_place(place)
            except ValueError as exc:
                raise ValueError(f"document_id: {exc}") from None
        if not isinstance(self.variant_attribute, str) or not self.variant_attribute:
            raise ValueError("variant_attribute: must be a non-empty attribute name")

    @classmethod
    def from_config(cls, scoring: ScoringConfig, traces: TracesConfig = _TRACES) -> ConventionOptions:
        """Options from the ``[scoring]`` section (and ``traces.max_duration``)."""
        return cls(
            document_id=tuple(scoring.document_id), variant_attribute=scoring.variant_attribute,
            max_duration=traces.max_duration,
        )


class Usage(NamedTuple):
    """Token counts one span carried; ``cached_input_tokens`` is part of ``input_tokens``.
    (A named tuple: immutable, and cheaper to make than a frozen dataclass.)"""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


# -- values (numbers pass ragmon.numbers, the one check) ------------------------------------------


def as_str(value: object) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def loads(text: object) -> Any:
    """``json.loads`` that returns None for anything that is not a JSON string."""
    if not isinstance(text, (str, bytes)) or not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _looks_like_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[", '"')


def _pick(obj: Any, keys: tuple[str, ...]) -> str | None:
    if isinstance(obj, str):
        return obj or None
    if isinstance(obj, Mapping):
        for key in keys:
            value = obj.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def value_text(value: AttrValue, mime_type: AttrValue, keys: tuple[str, ...]) -> str | None:
    """Text from an ``input.value``/``output.value``-like attribute.

    Plain text (``text/plain`` or no mime type and not JSON-looking) is returned as is. JSON is
    parsed: a string is the text; an object gives its first string value among ``keys``.
    Anything else gives None.
    """
    if not isinstance(value, str) or not value:
        return None
    is_json = mime_type == "application/json" or (
        mime_type in (None, "") and _looks_like_json(value)
    )
    if not is_json:
        return value
    parsed = loads(value)
    if parsed is None:
        return value if mime_type != "application/json" else None
    return _pick(parsed, keys)


def query_text(value: AttrValue, mime_type: AttrValue = None) -> str | None:
    """The user's question from an input value (plain, JSON string, or ``{"question": …}``)."""
    return value_text(value, mime_type, _QUERY_KEYS)


def answer_text(value: AttrValue, mime_type: AttrValue = None) -> str | None:
    """The answer from an output value (plain, JSON string, or ``{"answer": …}``)."""
    return value_text(value, mime_type, _ANSWER_KEYS)


def pick_query(obj: Any) -> str | None:
    """A question from an already parsed object (a string, or the first query-like key)."""
    return _pick(obj, _QUERY_KEYS)


def pick_answer(obj: Any) -> str | None:
    """An answer from an already parsed object (a string, or the first answer-like key)."""
    return _pick(obj, _ANSWER_KEYS)


# -- documents --------------------------------------------------------------------------------


def content_hash(text: str) -> str:
    """``sha256:`` + the first 16 hex digits of the SHA-256 of ``text`` (UTF-8)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _id_text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else str(value)
    return None


def _metadata_value(metadata: Any, key: str) -> str | None:
    if not isinstance(metadata, Mapping):
        return None
    if key in metadata:
        return _id_text(metadata[key])
    node: Any = metadata
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return _id_text(node)


_Place = tuple[bool, str, tuple[str, ...]]
"""One ``document_id`` place: (a document field?, the field or metadata key, field aliases)."""
_PLACES: dict[tuple[str, ...], tuple[tuple[_Place, ...], tuple[str, ...]]] = {}
_MAX_PLACES = 64


def _places(document_id: Sequence[str]) -> tuple[tuple[_Place, ...], tuple[str, ...]]:
    """The places of ``document_id``, and the document fields they may read after the usual
    ones (``DOCUMENT_FIELDS``); made once per ``document_id``."""
    key = document_id if isinstance(document_id, tuple) else None
    cached = _PLACES.get(key) if key is not None else None
    if cached is not None:
        return cached
    places: list[_Place] = []
    fields = list(DOCUMENT_FIELDS)
    for place in document_id:
        head, _, rest = place.partition(".")
        aliases = _DOCUMENT_FIELD_ALIASES.get(rest, (rest,))
        places.append((head == "document", rest, aliases))
        if head == "document":
            fields.extend(alias for alias in aliases if alias not in fields)
    made = (tuple(places), tuple(fields))
    if key is not None and len(_PLACES) < _MAX_PLACES:
        _PLACES[key] = made
    return made


def document_fields(options: ConventionOptions) -> tuple[str, ...]:
    """The document fields ``resolve_documents`` may read with ``options``: the usual ones
    (``DOCUMENT_FIELDS``), then those of its ``document.<field>`` places."""
    return _places(options.document_id)[1]


def resolve_documents(
    raw: Sequence[RawDocument],
    options: ConventionOptions,
    fallback_ids: Callable[[], Sequence[str | None]] | None = None,
) -> tuple[RetrievedDocument, ...]:
    """Turn raw documents into ranked ``RetrievedDocument`` values using ``options.document_id``.

    ``fallback_ids`` (called at most once, only when needed) gives ids by rank for documents
    whose ``id`` field is missing (LangChain: parsed from the retriever's ``output.value``).
    """
    places = _places(options.document_id)[0]
    keep_content = options.keep_content
    isfinite = math.isfinite
    fallback: Sequence[str | None] | None = None
    out: list[RetrievedDocument] = []
    for rank, doc in enumerate(raw):
        get = doc.get
        content = get("content")
        if content is None:
            content = get("page_content")
            if content is None:
                content = get("text")
        text = content if isinstance(content, str) else None
        doc_id: str | None = None
        metadata: Any = None
        metadata_parsed = False
        for is_document, rest, aliases in places:
            if is_document:
                value: Any = None
                for alias in aliases:
                    value = get(alias)
                    if value is not None:
                        break
                doc_id = (value or None) if type(value) is str else _id_text(value)
                if doc_id is None and rest == "id" and fallback_ids is not None:
                    if fallback is None:
                        fallback = fallback_ids()
                    doc_id = fallback[rank] if rank < len(fallback) else None
            else:
                if not metadata_parsed:
                    metadata = get("metadata")
                    if isinstance(metadata, str):
                        metadata = loads(metadata)
                    metadata_parsed = True
                doc_id = _metadata_value(metadata, rest)
            if doc_id:
                break
        if not doc_id:
            doc_id = _hashed_id(text, get("metadata"), rank)
        score: Any = get("score")
        if type(score) is float:
            score = score if isfinite(score) else None
        else:
            score = as_finite(score)
        out.append(RetrievedDocument(doc_id, score, text if keep_content else None))
    return tuple(out)


def json_documents(value: AttrValue) -> list[RawDocument]:
    """Documents from a JSON array attribute (``gen_ai.retrieval.documents``): a JSON string
    holding a list of objects, or an array of JSON object strings (structured form decoded)."""
    items: Any
    if isinstance(value, str):
        items = loads(value)
        if isinstance(items, Mapping):  # tolerate {"documents": [...]}
            items = items.get("documents")
    elif isinstance(value, tuple):
        items = [loads(v) if isinstance(v, str) else None for v in value]
    else:
        return []
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]


_KEY_TABLE_SIZE = 128
_KEY_TABLES: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, ...], ...]] = {}
_MAX_KEY_TABLES = 16
_MISSING: Any = object()
DEFAULT_PLACES = ("document.id",)


def key_table(prefix: str, fields: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``<prefix>N.document.<field>`` for N < ``_KEY_TABLE_SIZE``: made once per (prefix, fields)."""
    table = _KEY_TABLES.get((prefix, fields))
    if table is None:
        table = tuple(
            tuple(sys.intern(f"{prefix}{i}.document.{field}") for field in fields)
            for i in range(_KEY_TABLE_SIZE)
        )
        if len(_KEY_TABLES) < _MAX_KEY_TABLES:
            _KEY_TABLES[(prefix, fields)] = table
    return table


def _probe(
    attributes: Mapping[str, AttrValue], prefix: str, fields: tuple[str, ...]
) -> list[tuple[Any, ...]] | None:
    """The ``fields`` of documents 0, 1, … (``_MISSING`` where absent), looked up key by key
    until a document has none of them; None when that did not account for every key starting
    with ``prefix`` (other fields, a gap in the indices, ``01``, too many documents, …)."""
    table = key_table(prefix, fields)
    get = attributes.get
    width = len(fields)
    rows: list[tuple[Any, ...]] = []
    present = 0
    for keys in table:
        row = tuple(map(get, keys, repeat(_MISSING)))
        missing = row.count(_MISSING)
        if missing == width:
            break
        rows.append(row)
        present += width - missing
    else:
        return None
    if present != len(attributes):
        for key in attributes.keys() - chain.from_iterable(table[: len(rows)]):
            if key.startswith(prefix):
                return None
    return rows


def flattened_documents(
    attributes: Mapping[str, AttrValue], prefix: str, fields: tuple[str, ...] = DOCUMENT_FIELDS
) -> list[RawDocument]:
    """OpenInference's flattened lists: ``<prefix>N.document.<field>`` -> one dict per N, by N.

    ``fields`` only makes it faster: their keys are looked up for N = 0, 1, … and the keys are
    scanned only when that did not find all the documents' keys.
    """
    rows = _probe(attributes, prefix, fields)
    if rows is None:
        return _scanned_documents(attributes, prefix)
    return [
        {field: value for field, value in zip(fields, row) if value is not _MISSING} for row in rows
    ]


def _scanned_documents(attributes: Mapping[str, AttrValue], prefix: str) -> list[RawDocument]:
    docs: dict[int, dict[str, AttrValue]] = {}
    start = len(prefix)
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, dot, rest = key[start:].partition(".")
        if not dot or not index.isdigit() or not rest.startswith("document."):
            continue
        docs.setdefault(int(index), {})[rest[9:]] = value
    return [docs[i] for i in sorted(docs)]


def resolve_flattened(
    attributes: Mapping[str, AttrValue],
    prefix: str,
    options: ConventionOptions,
    fallback_ids: Callable[[], Sequence[str | None]] | None = None,
) -> tuple[RetrievedDocument, ...]:
    """``resolve_documents(flattened_documents(attributes, prefix), options, fallback_ids)``,
    without a dict per document for the default ``document_id`` and the usual fields
    (``fallback_ids`` may then be called twice)."""
    if options.document_id == DEFAULT_PLACES:
        resolved = _resolve_probed(attributes, prefix, options.keep_content, fallback_ids)
        if resolved is not None:
            return resolved
    raw = flattened_documents(attributes, prefix, document_fields(options))
    return resolve_documents(raw, options, fallback_ids)


def _hashed_id(text: str | None, metadata: object, rank: int) -> str:
    """The id of a document that gave none: its content's hash, else its metadata's, else ``#rank``."""
    if text is not None:
        return content_hash(text)
    if isinstance(metadata, (str, Mapping)):
        return content_hash(metadata if isinstance(metadata, str) else json.dumps(metadata, sort_keys=True))
    return f"#{rank}"


def _resolve_probed(
    attributes: Mapping[str, AttrValue],
    prefix: str,
    keep_content: bool,
    fallback_ids: Callable[[], Sequence[str | None]] | None,
) -> tuple[RetrievedDocument, ...] | None:
    """``resolve_documents`` for ``document_id = ["document.id"]`` over documents 0, 1, … read
    key by key (``_probe`` of ``DOCUMENT_FIELDS``, inlined); None when that did not account
    for every key starting with ``prefix``."""
    table = key_table(prefix, DOCUMENT_FIELDS)
    get = attributes.get
    missing = _MISSING
    isfinite = math.isfinite
    fallback: Sequence[str | None] | None = None
    out: list[RetrievedDocument] = []
    rank = 0
    for id_key, score_key, content_key, metadata_key in table:
        id_value = get(id_key, missing)
        score = get(score_key, missing)
        content = get(content_key, missing)
        text = content if isinstance(content, str) else None
        if type(id_value) is str and id_value:  # the usual case: the metadata is not needed
            doc_id: str = id_value
        else:
            metadata = get(metadata_key, missing)
            if id_value is missing and score is missing and content is missing and metadata is missing:
                break
            found = None if type(id_value) is str else _id_text(id_value)
            if found is None and fallback_ids is not None:
                if fallback is None:
                    fallback = fallback_ids()
                found = fallback[rank] if rank < len(fallback) else None
            doc_id = found or _hashed_id(text, metadata, rank)
        if type(score) is float:
            score = score if isfinite(score) else None
        else:
            score = as_finite(score)
        out.append(RetrievedDocument(doc_id, score, text if keep_content else None))
        rank += 1
    else:
        return None
    for key in attributes.keys() - chain.from_iterable(table[:rank]):
        if key.startswith(prefix):
            return None
    return tuple(out)
