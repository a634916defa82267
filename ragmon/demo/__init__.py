"""``ragmon demo``: ragmon next to a synthetic, OpenTelemetry-instrumented RAG service, with a
live view and an injected retrieval regression (``run``); the service (``service``), its corpus,
retriever, reranker and generator (``corpus``), and the view (``view``)."""
