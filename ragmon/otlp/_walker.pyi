"""The compiled protobuf decoder (``_walker.pyx``)."""

from ragmon.otlp.decode import Decoded, SpanSelection

def decode_protobuf(body: bytes, selection: SpanSelection, max_bytes: int = ...) -> Decoded: ...
