"""Facts about ragmon's metrics shared by every module that writes or reads them."""

from __future__ import annotations

from typing import Final

__all__ = ["LATENCY_BUCKETS", "SCORE_BUCKETS"]

LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: the buckets of every latency histogram (requests, stages, probes)."""
SCORE_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The buckets of every score histogram in [0, 1]."""
