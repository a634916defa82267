"""Where relevance comes from: golden sets and qrels, the prober, and their small helpers."""
