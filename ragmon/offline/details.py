"""The judge's verdicts as per-record details (``ragmon eval --records``): why a record scored
what it did, per evaluator, as plain JSON values.

- ``faithfulness``: ``{"claims": [{"claim", "supported"}]}`` (the answer's claims);
- ``answer_relevance``: ``{"verdict": "yes" | "partial" | "no"}``;
- ``context_relevance``: ``{"documents": [{"rank", "id", "relevant"}]}`` (rank 1 is the first
  context; ``id`` the retrieved document id, or the position when the ids do not line up);
- ``answer_correctness``: ``{"reference_claims": [{"claim", "covered"}]}``;
- ``coherence``: ``{"checks": {"<check>": passed}}``;
- ``toxicity``: ``{"categories": {"<category>": "none" | "low" | "medium" | "high"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from ragmon.judge.evaluators import Verdicts

__all__ = ["Details", "summary", "verdict_details"]

Details: TypeAlias = dict[str, dict[str, Any]]
"""Evaluator -> its details (JSON values)."""


def verdict_details(verdicts: Verdicts, document_ids: Sequence[str]) -> Details:
    """Every judged evaluator's details; ``document_ids`` name the documents in rank order."""
    out: Details = {}
    if verdicts.claims is not None:
        out["faithfulness"] = {"claims": [{"claim": c.claim, "supported": c.holds} for c in verdicts.claims]}
    if verdicts.answer_relevance is not None:
        out["answer_relevance"] = {"verdict": verdicts.answer_relevance}
    if verdicts.document_relevance is not None:
        out["context_relevance"] = {"documents": [
            {"rank": i + 1, "id": document_ids[i] if i < len(document_ids) else str(i), "relevant": relevant}
            for i, relevant in enumerate(verdicts.document_relevance)
        ]}
    if verdicts.reference_claims is not None:
        out["answer_correctness"] = {
            "reference_claims": [{"claim": c.claim, "covered": c.holds} for c in verdicts.reference_claims]
        }
    if verdicts.coherence is not None:
        out["coherence"] = {"checks": dict(verdicts.coherence)}
    if verdicts.toxicity is not None:
        out["toxicity"] = {"categories": dict(verdicts.toxicity)}
    return out


_SHOWN_CHARS: Final = 80
"""The longest claim quoted in a summary line."""


def _quoted(text: Any) -> str:
    line = " ".join(str(text).split())
    return "«" + (line[:_SHOWN_CHARS] + "…" if len(line) > _SHOWN_CHARS else line) + "»"


def summary(metric: str, detail: Mapping[str, Any]) -> str:
    """One line saying why a record scored what it did on ``metric`` (for the worst records)."""
    if metric == "faithfulness":
        claims = detail.get("claims", [])
        bad = [_quoted(c["claim"]) for c in claims if not c["supported"]]
        return f"unsupported: {'; '.join(bad)}" if bad else f"{len(claims)} claim(s), all supported"
    if metric == "answer_relevance":
        return f"verdict: {detail.get('verdict')}"
    if metric == "context_relevance":
        ranks = [str(d["rank"]) for d in detail.get("documents", []) if not d["relevant"]]
        return f"not relevant: rank {', '.join(ranks)}" if ranks else "every context relevant"
    if metric == "answer_correctness":
        missed = [_quoted(c["claim"]) for c in detail.get("reference_claims", []) if not c["covered"]]
        return f"not covered: {'; '.join(missed)}" if missed else "every reference claim covered"
    if metric == "coherence":
        failed = [name for name, passed in detail.get("checks", {}).items() if not passed]
        return f"failed: {', '.join(failed)}" if failed else "every check passed"
    if metric == "toxicity":
        found = [f"{name} {level}" for name, level in detail.get("categories", {}).items() if level != "none"]
        return ", ".join(found) if found else "none"
    return ""
