"""The offline judge's cache on disk: judgements by content, so a re-run costs nothing.

A judgement is stored under ``cache_key``: sha256 over the judge model, the evaluators and the
judge request's messages (built with a fixed tag name instead of the per-call random one, after
redaction), so any change to the content, the model, the evaluator set or the prompts is a
miss. Only parsed verdicts are stored (their scores per evaluator); failures never are. The
file is an SQLite database (stdlib ``sqlite3``; safe for several runs at once).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from typing import Final

from ragmon.errors import UsageError
from ragmon.judge.prompts import JudgeRequest

__all__ = ["CACHE_NONCE", "DEFAULT_CACHE", "JudgeCache", "cache_key"]

DEFAULT_CACHE: Final = os.path.join(".ragmon-cache", "judge.sqlite3")
"""Where ``ragmon eval --judge`` keeps judgements unless ``--cache`` says otherwise."""
CACHE_NONCE: Final = "ragmoncachekey00"
"""The data-tag name used to build the request a key is computed from (never sent)."""
_VERSION: Final = 1
_COMMIT_EVERY: Final = 32


def cache_key(request: JudgeRequest, model: str) -> str:
    """sha256 (hex) of the model, the evaluators and the request's messages and schema."""
    payload = [_VERSION, model, list(request.evaluators), list(request.messages), request.schema]
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class JudgeCache:
    """Scores per evaluator by ``cache_key``, in an SQLite file. ``close`` commits."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, scores TEXT NOT NULL)"
            )
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"--cache {path}: cannot use it as the judge cache ({exc})") from None
        self._pending = 0

    def get(self, key: str) -> dict[str, float | None] | None:
        """The stored scores, or ``None`` on a miss (or an unreadable entry)."""
        row = self._db.execute("SELECT scores FROM judgements WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        if not isinstance(value, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) or v is None for v in value.values()
        ):
            return None
        return {str(k): None if v is None else float(v) for k, v in value.items()}

    def put(self, key: str, scores: Mapping[str, float | None]) -> None:
        """Store scores (committed every few entries and at ``close``)."""
        self._db.execute(
            "INSERT OR REPLACE INTO judgements (key, scores) VALUES (?, ?)", (key, json.dumps(dict(scores)))
        )
        self._pending += 1
        if self._pending >= _COMMIT_EVERY:
            self._db.commit()
            self._pending = 0

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0])

    def close(self) -> None:
        """Commit and close."""
        try:
            self._db.commit()
        finally:
            self._db.close()
