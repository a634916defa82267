"""The OTLP wire: raw protobuf field access and the decoder that keeps only what ragmon reads."""
