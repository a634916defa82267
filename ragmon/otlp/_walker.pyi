"""The compiled protobuf decoder (``_walker.pyx``)."""

from typing import Any

from ragmon.otlp.decode import Decoded, SpanSelection

def decode_protobuf(body: bytes, selection: SpanSelection, max_bytes: int = ...) -> Decoded: ...

def drop_document_text(attributes: dict[str, Any], tables: tuple[tuple[tuple[str, ...], ...], ...], firsts: tuple[str, ...]) -> int: ...
