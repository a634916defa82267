"""The files and values users hand ragmon: JSON Lines, relevance labels (golden sets, qrels), JSON paths, query text keys, progress."""
