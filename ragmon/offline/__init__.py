"""Offline scoring of RAG record files: ``ragmon eval`` and ``ragmon compare``."""
