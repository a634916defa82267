"""OTLP receivers: bytes in, ``Span`` batches handed to a ``SpanSink``."""
