"""A finished RAG request's scores: retrieval, latency, tokens and cost (with the price table)."""
