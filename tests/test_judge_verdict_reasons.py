"""The judge's invalid replies: each names what was wrong, exactly, in ragmon's words.

An ``Invalid`` reason reaches logs and ``ragmon eval``'s report of failed judgements (the
failure reasons per metric), so its wording is part of the contract; each case below is one
way a reply can miss the schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragmon.judge.evaluators import (
    MAX_CLAIM_CHARS,
    MAX_REPLY_CHARS,
    Invalid,
    Verdicts,
    parse_verdict,
    toxicity_score,
)
from ragmon.judge.prompts import COHERENCE_CHECKS, TOXICITY_CATEGORIES, Evaluator, JudgeRequest


def request(*evaluators: Evaluator, documents: int = 2, max_claims: int = 3) -> JudgeRequest:
    return JudgeRequest(
        evaluators=evaluators, document_ids=tuple(f"d{i}" for i in range(documents)), messages=(),
        fallback_messages=(), fallback_instructions="", schema={}, response_format={}, nonce="n", max_claims=max_claims,
    )


def reason(reply: Any, *evaluators: Evaluator, **kw: Any) -> str:
    text = reply if isinstance(reply, str) else json.dumps(reply)
    got = parse_verdict(text, request(*evaluators, **kw))
    assert isinstance(got, Invalid), got
    return got.reason


CLAIM = {"claim": "c", "supported": True}
COHERENT = dict.fromkeys(COHERENCE_CHECKS, True)
CLEAN = dict.fromkeys(TOXICITY_CATEGORIES, "none")


@pytest.mark.parametrize(("reply", "evaluators", "expected"), [
    ("no braces at all", ("faithfulness",), "no JSON object in reply"),
    ("{not json} {still: not}", ("faithfulness",), "no JSON object in reply"),
    ('{"x": NaN}', ("faithfulness",), "no JSON object in reply"),
    ([1, 2], ("faithfulness",), "no JSON object in reply"),
    ({}, ("faithfulness",), "reply lacks ['faithfulness']"),
    ({"faithfulness": {"claims": []}, "extra": 1, "more": 2}, ("faithfulness",), "reply has 2 unexpected key(s)"),
    ({"faithfulness": []}, ("faithfulness",), "faithfulness must be an object, got list"),
    ({"faithfulness": {"claims": {}}}, ("faithfulness",), "faithfulness.claims must be a list, got dict"),
    ({"faithfulness": {"claims": [CLAIM] * 4}}, ("faithfulness",), "faithfulness.claims has 4 claims, more than 3"),
    ({"faithfulness": {"claims": [CLAIM, 7]}}, ("faithfulness",), "faithfulness.claims[1] must be an object, got int"),
    ({"faithfulness": {"claims": [{"claim": 1, "supported": True}]}}, ("faithfulness",),
     "faithfulness.claims[0].claim must be a string, got int"),
    ({"faithfulness": {"claims": [{"claim": "x" * (MAX_CLAIM_CHARS + 1), "supported": True}]}}, ("faithfulness",),
     f"faithfulness.claims[0].claim is longer than {MAX_CLAIM_CHARS} characters"),
    ({"faithfulness": {"claims": [{"claim": "c", "supported": "yes"}]}}, ("faithfulness",),
     "faithfulness.claims[0].supported must be true or false, got str"),
    ({"answer_correctness": {"reference_claims": [{"claim": "c", "covered": 1}]}}, ("answer_correctness",),
     "answer_correctness.reference_claims[0].covered must be true or false, got int"),
    ({"answer_correctness": {"reference_claims": None}}, ("answer_correctness",),
     "answer_correctness.reference_claims must be a list, got NoneType"),
    ({"answer_correctness": {"claims": []}}, ("answer_correctness",), "answer_correctness lacks ['reference_claims']"),
    ({"answer_relevance": {"verdict": "yes"}}, ("answer_relevance",), "answer_relevance lacks ['reason']"),
    ({"answer_relevance": {"reason": 1, "verdict": "yes"}}, ("answer_relevance",), "answer_relevance.reason must be a string"),
    ({"answer_relevance": {"reason": "r", "verdict": "maybe"}}, ("answer_relevance",),
     "answer_relevance.verdict must be yes, partial or no, got another str"),
    ({"answer_relevance": {"reason": "r", "verdict": 1}}, ("answer_relevance",),
     "answer_relevance.verdict must be yes, partial or no, got another int"),
    ({"context_relevance": {}}, ("context_relevance",), "context_relevance lacks ['documents']"),
    ({"context_relevance": {"documents": "all"}}, ("context_relevance",), "context_relevance.documents must be a list, got str"),
    ({"context_relevance": {"documents": [{"index": 0, "relevant": True}]}}, ("context_relevance",),
     "context_relevance.documents has 1 entries for 2 documents"),
    ({"context_relevance": {"documents": [{"index": 0, "relevant": True}, []]}}, ("context_relevance",),
     "context_relevance.documents[1] must be an object, got list"),
    ({"context_relevance": {"documents": [{"index": "0", "relevant": True}] * 2}}, ("context_relevance",),
     "context_relevance.documents[0].index must be an integer, got str"),
    ({"context_relevance": {"documents": [{"index": True, "relevant": True}] * 2}}, ("context_relevance",),
     "context_relevance.documents[0].index must be an integer, got bool"),
    ({"context_relevance": {"documents": [{"index": 2, "relevant": True}] * 2}}, ("context_relevance",),
     "context_relevance.documents[0].index is out of range 0..1"),
    ({"context_relevance": {"documents": [{"index": -1, "relevant": True}] * 2}}, ("context_relevance",),
     "context_relevance.documents[0].index is out of range 0..1"),
    ({"context_relevance": {"documents": [{"index": 1, "relevant": True}] * 2}}, ("context_relevance",),
     "context_relevance.documents[1].index repeats an earlier one"),
    ({"context_relevance": {"documents": [{"index": 0, "relevant": True}, {"index": 1, "relevant": 0}]}},
     ("context_relevance",), "context_relevance.documents[1].relevant must be true or false, got int"),
    ({"coherence": {**COHERENT, "self_consistent": "yes"}}, ("coherence",), "coherence.self_consistent must be true or false, got str"),
    ({"coherence": 3}, ("coherence",), "coherence must be an object, got int"),
    ({"toxicity": {**CLEAN, "violence": "extreme"}}, ("toxicity",),
     "toxicity.violence must be one of none, low, medium, high, got another str"),
    ({"toxicity": {**CLEAN, "hate": None}}, ("toxicity",), "toxicity.hate must be one of none, low, medium, high, got another NoneType"),
    ({"toxicity": []}, ("toxicity",), "toxicity must be an object, got list"),
])
def test_each_way_a_reply_misses_the_schema_is_named(reply: Any, evaluators: tuple[Evaluator, ...], expected: str) -> None:
    assert reason(reply, *evaluators) == expected


def test_a_reply_that_is_not_text_or_too_long() -> None:
    got = parse_verdict(b"{}", request("faithfulness"))  # type: ignore[arg-type]
    assert got == Invalid("reply must be text, got bytes")
    padded = json.dumps({"faithfulness": {"claims": []}})
    assert isinstance(parse_verdict(padded + " " * (MAX_REPLY_CHARS - len(padded)), request("faithfulness")), Verdicts)
    too_long = padded + " " * (MAX_REPLY_CHARS - len(padded) + 1)
    assert parse_verdict(too_long, request("faithfulness")) == Invalid(f"reply longer than {MAX_REPLY_CHARS} characters")


def test_a_claim_of_exactly_the_limit_is_kept() -> None:
    claim = "x" * MAX_CLAIM_CHARS
    got = parse_verdict(json.dumps({"faithfulness": {"claims": [{"claim": claim, "supported": False}]}}), request("faithfulness"))
    assert isinstance(got, Verdicts) and got.claims is not None and got.claims[0].claim == claim


@pytest.mark.parametrize("prefix", ["{", "{{", "x{", "{ not json {", "```json\n{", "{]{"])
def test_the_first_object_after_broken_braces_is_found(prefix: str) -> None:
    """A reply whose first braces do not open an object (prose, a stray or doubled brace)."""
    body = json.dumps({"faithfulness": {"claims": [CLAIM]}})
    got = parse_verdict(prefix + body + " trailing {", request("faithfulness"))
    assert isinstance(got, Verdicts) and got.claims is not None and got.claims[0].claim == "c"


def test_a_deeply_nested_reply_is_invalid_not_a_crash() -> None:
    got = parse_verdict('{"faithfulness": ' + "[" * 90_000 + "]" * 90_000 + "}", request("faithfulness"))
    assert got == Invalid("maximum recursion depth exceeded while decoding a JSON array from a unicode string")


def test_toxicity_of_a_clean_answer_is_zero_not_absent() -> None:
    got = parse_verdict(json.dumps({"toxicity": CLEAN}), request("toxicity"))
    assert isinstance(got, Verdicts) and toxicity_score(got) == 0.0
    assert toxicity_score(Verdicts(toxicity={})) == 0.0  # no category judged: nothing toxic
    assert toxicity_score(Verdicts()) is None
