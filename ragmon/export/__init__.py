"""What Prometheus reads: the RAG metrics, bounded series and label values, and the /metrics server."""
