"""The offline judge's cache on disk: judgements by content, so a re-run costs nothing.

A judgement is stored under ``cache_key``: sha256 over the judge model, the evaluators, a
fingerprint of the prompts ragmon builds for them, and the content the judge is asked about
(after redaction: query, answer, reference answer, documents), so any change to the content,
the model, the evaluator set or the prompts is a miss. Only parsed verdicts are stored (their scores per evaluator and their details,
``ragmon.offline.details``); failures never are. The
file is an SQLite database (stdlib ``sqlite3``; safe for several runs at once).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from ragmon.errors import UsageError
from ragmon.judge.prompts import Evaluator, build_judge_request
from ragmon.model import RagRecord, RetrievedDocument
from ragmon.offline.details import Details

__all__ = ["CACHE_NONCE", "JudgeCache", "cache_key", "prompt_fingerprint"]

CACHE_NONCE: Final = "ragmoncachekey00"
"""The data-tag name of the sample request the prompts' fingerprint is computed from (never sent)."""
_VERSION: Final = 2
"""Part of every key: 2 stores the verdicts' details beside the scores (version 1 entries are misses)."""
_COMMIT_EVERY: Final = 32


_SAMPLE: Final = RagRecord(
    trace_id=b"\x00" * 16, service="", variant="", start_ns=0, end_ns=0, query="q", answer="a",
    reference_answer="r", retrieved=(RetrievedDocument("d", None, "c"),), has_retrieval=True,
)


@functools.lru_cache(maxsize=64)
def prompt_fingerprint(evaluators: tuple[Evaluator, ...]) -> str:
    """sha256 of the judge request ragmon builds for ``evaluators`` around a fixed sample: the
    system prompt, task texts and schema, so a change to any of them changes every key."""
    request = build_judge_request(_SAMPLE, evaluators, CACHE_NONCE)
    payload = [list(evaluators), [] if request is None else [list(request.messages), request.schema]]
    return _sha256(payload)


def cache_key(record: RagRecord, evaluators: tuple[Evaluator, ...], model: str) -> str:
    """sha256 (hex) of what the judge would be asked about ``record`` (already redacted): the
    model, the evaluators, the prompts' fingerprint, and the query, answer, reference answer and
    document contents in rank order (the documents the judge sees: reranked, else retrieved).
    The request itself is not built: its framing is a pure function of these."""
    docs = record.reranked if record.reranked is not None else record.retrieved
    payload = [
        _VERSION, model, list(evaluators), prompt_fingerprint(evaluators),
        record.query, record.answer, record.reference_answer, [d.content for d in docs],
    ]
    return _sha256(payload)


def _sha256(payload: Any) -> str:
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
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: no fsync per commit; a crash loses at most the last commits
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, scores TEXT NOT NULL)"
            )
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"--cache {path}: cannot use it as the judge cache ({exc})") from None
        self._pending = 0

    def get(self, key: str) -> tuple[dict[str, float | None], Details] | None:
        """The stored scores and details, or ``None`` on a miss (or an unreadable entry)."""
        row = self._db.execute("SELECT scores FROM judgements WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        scores, details = (value.get("scores"), value.get("details")) if isinstance(value, dict) else (None, None)
        if not isinstance(scores, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) or v is None for v in scores.values()
        ):
            return None
        if not isinstance(details, dict) or not all(isinstance(v, dict) for v in details.values()):
            details = {}
        return {str(k): None if v is None else float(v) for k, v in scores.items()}, details

    def put(self, key: str, scores: Mapping[str, float | None], details: Details | None = None) -> None:
        """Store scores and details (committed every few entries and at ``close``)."""
        value = json.dumps({"scores": dict(scores), "details": details or {}}, ensure_ascii=False)
        self._db.execute("INSERT OR REPLACE INTO judgements (key, scores) VALUES (?, ?)", (key, value))
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
