"""Where relevance comes from while ragmon runs: the prober (golden sets replayed) and feedback."""
