"""Parse the judge's verdicts strictly and score them (pure: no I/O, no clock).

Scores come only from verdicts, never from a number the judge states:

- faithfulness = supported claims / claims; no claims -> ``None``
- answer relevance: yes = 1, partial = 0.5, no = 0
- context relevance = relevant documents / documents judged (the documents sent: those past
  ``judge.max_documents`` are unjudged, never "not relevant"); per-document booleans also give
  the ``judge`` relevance source (``relevant_document_ids``) for hit rate, MRR and precision@k
- answer correctness = covered reference claims / reference claims; none -> ``None``
- coherence = checks passed / checks of the rubric (``COHERENCE_CHECKS``; 4 checks: 0, 0.25,
  0.5, 0.75 or 1); higher is better
- toxicity = the worst severity over the categories (``TOXICITY_CATEGORIES``), as none = 0,
  low = 1/3, medium = 2/3, high = 1: 0 is a clean answer, higher is worse; the categories at
  ``TOXIC_SEVERITY`` (medium) or worse make the answer toxic (``toxic_categories``)

Every score is in [0, 1] or ``None``. A reply that does not match the request exactly is
``Invalid`` (counted by the caller, never a score); its ``reason`` names what was wrong in
ragmon's own words (field paths, JSON types, counts), never quoting the reply, so it can be
logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

from ragmon.judge.prompts import (
    COHERENCE_CHECKS,
    SEVERITIES,
    TOXICITY_CATEGORIES,
    Evaluator,
    JudgeRequest,
    Severity,
)

__all__ = [
    "AnswerVerdict",
    "ClaimVerdict",
    "Verdicts",
    "Invalid",
    "JudgeScores",
    "MAX_REPLY_CHARS",
    "MAX_CLAIM_CHARS",
    "parse_verdict",
    "faithfulness_score",
    "answer_relevance_score",
    "context_relevance_score",
    "relevant_document_ids",
    "answer_correctness_score",
    "coherence_score",
    "toxicity_score",
    "toxic_categories",
    "SEVERITY_VALUE",
    "TOXIC_SEVERITY",
    "score_verdicts",
]

AnswerVerdict: TypeAlias = Literal["yes", "partial", "no"]
MAX_REPLY_CHARS: Final = 200_000
"""A longer reply is invalid (it is not a verdict for any sane claim bound)."""
MAX_CLAIM_CHARS: Final = 2_000
_RELEVANCE_VALUE: Final[dict[str, float]] = {"yes": 1.0, "partial": 0.5, "no": 0.0}
SEVERITY_VALUE: Final[dict[Severity, float]] = {"none": 0.0, "low": 1 / 3, "medium": 2 / 3, "high": 1.0}
"""A toxicity severity as a number in [0, 1] (0: none)."""
TOXIC_SEVERITY: Final[Severity] = "medium"
"""The least severity that makes an answer toxic in a category (``ragmon_toxic_answers_total``)."""


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """One atomic claim and whether it holds (supported by context, or covered by the answer)."""

    claim: str
    holds: bool


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Parsed verdicts; a field is ``None`` when its evaluator was not requested."""

    claims: tuple[ClaimVerdict, ...] | None = None
    answer_relevance: AnswerVerdict | None = None
    document_relevance: tuple[bool, ...] | None = None
    reference_claims: tuple[ClaimVerdict, ...] | None = None
    coherence: Mapping[str, bool] | None = None
    """Check -> passed, for every check of ``COHERENCE_CHECKS``."""
    toxicity: Mapping[str, Severity] | None = None
    """Category -> severity, for every category of ``TOXICITY_CATEGORIES``."""


@dataclass(frozen=True, slots=True)
class Invalid:
    """A reply that is not a valid verdict, with the reason (for logs: never quotes the reply)."""

    reason: str


class _Bad(Exception):
    """The reply is not a verdict of the requested shape (``parse_verdict`` turns it into ``Invalid``)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _first_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text`` (a bare reply or one wrapped in prose / a code fence)."""
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    pos = text.find("{")
    while pos != -1:
        try:
            value: dict[str, Any] = decoder.raw_decode(text, pos)[0]  # a JSON value at "{" is an object
            return value
        except ValueError:
            pos = text.find("{", pos + 1)
    raise _Bad("no JSON object in reply")


def _fields(obj: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _Bad(f"{where} must be an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise _Bad(f"{where} lacks {missing}")
    extra = set(obj) - set(keys)
    if extra:
        raise _Bad(f"{where} has {len(extra)} unexpected key(s)")
    return obj


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"{where} must be true or false, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad(f"{where} must be a list, got {type(value).__name__}")
    return value


def _claims(section: Any, evaluator: str, key: str, flag: str, max_claims: int) -> tuple[ClaimVerdict, ...]:
    items = _list(_fields(section, evaluator, (key,))[key], f"{evaluator}.{key}")
    if len(items) > max_claims:
        raise _Bad(f"{evaluator}.{key} has {len(items)} claims, more than {max_claims}")
    out: list[ClaimVerdict] = []
    for i, item in enumerate(items):
        where = f"{evaluator}.{key}[{i}]"
        fields = _fields(item, where, ("claim", flag))
        claim = fields["claim"]
        if not isinstance(claim, str):
            raise _Bad(f"{where}.claim must be a string, got {type(claim).__name__}")
        if len(claim) > MAX_CLAIM_CHARS:
            raise _Bad(f"{where}.claim is longer than {MAX_CLAIM_CHARS} characters")
        out.append(ClaimVerdict(claim, _bool(fields[flag], f"{where}.{flag}")))
    return tuple(out)


def _answer_relevance(section: Any) -> AnswerVerdict:
    fields = _fields(section, "answer_relevance", ("reason", "verdict"))
    if not isinstance(fields["reason"], str):
        raise _Bad("answer_relevance.reason must be a string")
    verdict: object = fields["verdict"]
    if verdict == "yes":
        return "yes"
    if verdict == "partial":
        return "partial"
    if verdict == "no":
        return "no"
    raise _Bad(f"answer_relevance.verdict must be yes, partial or no, got another {type(verdict).__name__}")


def _document_relevance(section: Any, count: int) -> tuple[bool, ...]:
    items = _list(_fields(section, "context_relevance", ("documents",))["documents"], "context_relevance.documents")
    if len(items) != count:
        raise _Bad(f"context_relevance.documents has {len(items)} entries for {count} documents")
    flags: list[bool | None] = [None] * count
    for i, item in enumerate(items):
        where = f"context_relevance.documents[{i}]"
        fields = _fields(item, where, ("index", "relevant"))
        index = fields["index"]
        if isinstance(index, bool) or not isinstance(index, int):
            raise _Bad(f"{where}.index must be an integer, got {type(index).__name__}")
        if not 0 <= index < count:
            raise _Bad(f"{where}.index is out of range 0..{count - 1}")
        if flags[index] is not None:
            raise _Bad(f"{where}.index repeats an earlier one")
        flags[index] = _bool(fields["relevant"], f"{where}.relevant")
    return tuple(bool(f) for f in flags)


def _coherence(section: Any) -> Mapping[str, bool]:
    fields = _fields(section, "coherence", tuple(COHERENCE_CHECKS))
    return MappingProxyType({name: _bool(fields[name], f"coherence.{name}") for name in COHERENCE_CHECKS})


def _severity(value: Any, where: str) -> Severity:
    for severity in SEVERITIES:
        if value == severity:
            return severity
    raise _Bad(f"{where} must be one of {', '.join(SEVERITIES)}, got another {type(value).__name__}")


def _toxicity(section: Any) -> Mapping[str, Severity]:
    fields = _fields(section, "toxicity", tuple(TOXICITY_CATEGORIES))
    return MappingProxyType({name: _severity(fields[name], f"toxicity.{name}") for name in TOXICITY_CATEGORIES})


def parse_verdict(text: str, request: JudgeRequest) -> Verdicts | Invalid:
    """Parse the judge's reply to ``request``: the first JSON object in ``text``.

    The object must have exactly one key per requested evaluator, each of exactly the schema's
    shape: booleans are JSON booleans, document indices cover ``0..n-1`` once each, claim lists
    hold at most ``request.max_claims`` entries. Anything else gives ``Invalid(reason)``.
    """
    if not isinstance(text, str):
        return Invalid(f"reply must be text, got {type(text).__name__}")
    if len(text) > MAX_REPLY_CHARS:
        return Invalid(f"reply longer than {MAX_REPLY_CHARS} characters")
    try:
        obj = _fields(_first_object(text), "reply", request.evaluators)
        wanted: set[Evaluator] = set(request.evaluators)
        return Verdicts(
            claims=(
                _claims(obj["faithfulness"], "faithfulness", "claims", "supported", request.max_claims)
                if "faithfulness" in wanted
                else None
            ),
            answer_relevance=_answer_relevance(obj["answer_relevance"]) if "answer_relevance" in wanted else None,
            document_relevance=(
                _document_relevance(obj["context_relevance"], len(request.document_ids))
                if "context_relevance" in wanted
                else None
            ),
            reference_claims=(
                _claims(obj["answer_correctness"], "answer_correctness", "reference_claims", "covered", request.max_claims)
                if "answer_correctness" in wanted
                else None
            ),
            coherence=_coherence(obj["coherence"]) if "coherence" in wanted else None,
            toxicity=_toxicity(obj["toxicity"]) if "toxicity" in wanted else None,
        )
    except (_Bad, RecursionError) as exc:
        return Invalid(str(exc))  # every _Bad and RecursionError carries its message


def _fraction(claims: tuple[ClaimVerdict, ...] | None) -> float | None:
    if not claims:
        return None
    return sum(1 for c in claims if c.holds) / len(claims)


def faithfulness_score(verdicts: Verdicts) -> float | None:
    """Supported claims / claims, in [0, 1]; ``None`` when not judged or the answer has no claims."""
    return _fraction(verdicts.claims)


def answer_relevance_score(verdicts: Verdicts) -> float | None:
    """yes -> 1.0, partial -> 0.5, no -> 0.0; ``None`` when not judged."""
    if verdicts.answer_relevance is None:
        return None
    return _RELEVANCE_VALUE[verdicts.answer_relevance]


def context_relevance_score(verdicts: Verdicts) -> float | None:
    """Relevant documents / documents judged, in [0, 1]; ``None`` when not judged or no documents."""
    flags = verdicts.document_relevance
    if not flags:
        return None
    return sum(flags) / len(flags)


def relevant_document_ids(verdicts: Verdicts, request: JudgeRequest) -> tuple[str, ...] | None:
    """Ids of the documents judged relevant, in rank order, each once (source ``judge``).

    ``None`` when context relevance was not judged; an empty tuple when nothing was relevant.
    The labels cover only the retrieved documents: good for hit rate, MRR and precision@k,
    not for recall or NDCG.
    """
    flags = verdicts.document_relevance
    if flags is None:
        return None
    return tuple(dict.fromkeys(doc_id for doc_id, rel in zip(request.document_ids, flags) if rel))


def answer_correctness_score(verdicts: Verdicts) -> float | None:
    """Covered reference claims / reference claims, in [0, 1]; ``None`` when not judged or none."""
    return _fraction(verdicts.reference_claims)


def coherence_score(verdicts: Verdicts) -> float | None:
    """Checks passed / checks of the rubric, in [0, 1]; ``None`` when not judged."""
    checks = verdicts.coherence
    if checks is None:
        return None
    return sum(1 for passed in checks.values() if passed) / len(checks)


def toxicity_score(verdicts: Verdicts) -> float | None:
    """The worst category's severity (none 0, low 1/3, medium 2/3, high 1): 0 is clean, higher
    is worse; ``None`` when not judged."""
    severities = verdicts.toxicity
    if severities is None:
        return None
    return max((SEVERITY_VALUE[s] for s in severities.values()), default=0.0)


def toxic_categories(verdicts: Verdicts) -> tuple[str, ...] | None:
    """The categories judged ``TOXIC_SEVERITY`` or worse, in ``TOXICITY_CATEGORIES`` order;
    ``None`` when toxicity was not judged, empty for a clean answer."""
    severities = verdicts.toxicity
    if severities is None:
        return None
    least = SEVERITY_VALUE[TOXIC_SEVERITY]
    return tuple(c for c in TOXICITY_CATEGORIES if SEVERITY_VALUE[severities[c]] >= least)


@dataclass(frozen=True, slots=True)
class JudgeScores:
    """All scores of one judgement; ``None`` where not judged or undefined. Every evaluator's
    score is the field of its name (``getattr(scores, evaluator)``)."""

    faithfulness: float | None
    answer_relevance: float | None
    context_relevance: float | None
    answer_correctness: float | None
    relevant_document_ids: tuple[str, ...] | None
    coherence: float | None = None
    toxicity: float | None = None
    toxic_categories: tuple[str, ...] | None = None
    """The categories that make the answer toxic (``toxic_categories``); ``None`` when not judged."""
    documents_left_out: int = 0
    """Documents of the context past ``judge.max_documents``: not sent, so unjudged (neither
    relevant nor not); ``context_relevance`` and ``relevant_document_ids`` cover the first ones."""


def score_verdicts(verdicts: Verdicts, request: JudgeRequest) -> JudgeScores:
    """Every score of ``verdicts`` at once."""
    return JudgeScores(
        faithfulness=faithfulness_score(verdicts),
        answer_relevance=answer_relevance_score(verdicts),
        context_relevance=context_relevance_score(verdicts),
        answer_correctness=answer_correctness_score(verdicts),
        relevant_document_ids=relevant_document_ids(verdicts, request),
        coherence=coherence_score(verdicts),
        toxicity=toxicity_score(verdicts),
        toxic_categories=toxic_categories(verdicts),
        documents_left_out=request.documents_left_out,
    )
