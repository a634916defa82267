"""``ragmon.judge.client`` with the real ``openai`` client against the scripted server, and
``endpoint_from_config``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from judge_server import (
    JudgeServer,
    completion,
    cut_at_max_tokens,
    delay,
    drop,
    gzip_bomb,
    judge_server_thread,
    raw,
    reject_response_format,
    reply,
    status,
    streamed,
    wire,
)
from ragmon.config import JudgeConfig
from ragmon.errors import JudgePermanentError, JudgeRetryableError, JudgeTimeoutError
from ragmon.judge.client import (
    MAX_REPLY_BYTES,
    PLACEHOLDER_KEY,
    Completion,
    JudgeClient,
    JudgeEndpoint,
    endpoint_from_config,
)
from ragmon.judge.prompts import JudgeRequest, build_judge_request
from ragmon.model import RagRecord, RetrievedDocument

NONCE = "abcdef0123456789"


def _request() -> JudgeRequest:
    record = RagRecord(
        b"\x01" * 16, "svc", "a", 0, 1, query="Capital of France?", answer="Paris.",
        retrieved=(RetrievedDocument("d0", content="Paris is the capital of France."),),
    )
    request = build_judge_request(record, ("faithfulness", "answer_relevance"), NONCE)
    assert request is not None
    return request


def _complete(server: JudgeServer, timeout: float = 2.0, calls: int = 1) -> list[Completion | Exception]:
    """Run ``calls`` sequential completions with one client (own event loop) against ``server``."""

    async def run() -> list[Completion | Exception]:
        client = JudgeClient(JudgeEndpoint(server.base_url, "sk-test"), "judge-model", timeout)
        out: list[Completion | Exception] = []
        try:
            for _ in range(calls):
                try:
                    out.append(await client.complete(_request()))
                except Exception as exc:  # noqa: BLE001 - the test inspects it
                    out.append(exc)
        finally:
            await client.aclose()
        return out

    return asyncio.run(run())


# -- endpoint_from_config -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enabled", "base_url", "environ", "expected"),
    [
        (None, "", {}, None),
        (None, "", {"OPENAI_API_KEY": "sk-1"}, JudgeEndpoint(None, "sk-1")),
        (None, "http://local:8000/v1", {}, JudgeEndpoint("http://local:8000/v1", PLACEHOLDER_KEY)),
        (None, "", {"OPENAI_BASE_URL": "http://env/v1"}, JudgeEndpoint("http://env/v1", PLACEHOLDER_KEY)),
        (None, "http://cfg/v1", {"OPENAI_BASE_URL": "http://env/v1", "OPENAI_API_KEY": "k"},
         JudgeEndpoint("http://cfg/v1", "k")),
        (False, "http://cfg/v1", {"OPENAI_API_KEY": "k"}, None),
        (True, "", {}, JudgeEndpoint(None, PLACEHOLDER_KEY)),
        (None, "", {"OPENAI_API_KEY": "  "}, None),
    ],
)
def test_endpoint_from_config(
    enabled: bool | None, base_url: str, environ: dict[str, str], expected: JudgeEndpoint | None
) -> None:
    assert endpoint_from_config(JudgeConfig(enabled=enabled, base_url=base_url), environ) == expected


def test_endpoint_key_comes_from_the_named_variable_and_is_not_printed() -> None:
    config = JudgeConfig(api_key_env="MY_JUDGE_KEY")
    assert endpoint_from_config(config, {"OPENAI_API_KEY": "not this one"}) is None
    endpoint = endpoint_from_config(config, {"MY_JUDGE_KEY": "sk-secret"})
    assert endpoint == JudgeEndpoint(None, "sk-secret")
    assert "sk-secret" not in repr(endpoint)


# -- calls ----------------------------------------------------------------------------------


def test_completion_sends_schema_and_temperature_zero_and_reads_usage() -> None:
    with judge_server_thread(usage=(321, 45)) as server:
        server.script(reply('{"x": 1}'))
        (result,) = _complete(server)
        assert result == Completion('{"x": 1}', 321, 45, "judge-model", "stop")
        (body,) = server.requests
    assert body["temperature"] == 0 and body["model"] == "judge-model"
    # 64 (the object) + faithfulness 16 + 32 claims x 64 + answer relevance 160
    assert body["max_tokens"] == _request().max_tokens == 2288 and "max_completion_tokens" not in body
    assert body["response_format"] == _request().response_format
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["messages"] == [dict(m) for m in _request().messages]


def test_fallback_after_response_format_is_rejected_is_remembered() -> None:
    with judge_server_thread(supports_response_format=False) as server:
        first, second = _complete(server, calls=2)
        bodies = list(server.requests)
    assert isinstance(first, Completion) and isinstance(second, Completion)
    json.loads(first.text)
    assert ["response_format" in b for b in bodies] == [True, False, False]  # retried at once, then remembered
    assert bodies[1]["messages"] == [dict(m) for m in _request().fallback_messages]
    assert all(b["temperature"] == 0 for b in bodies)


def test_a_scripted_rejection_naming_response_format_also_switches() -> None:
    with judge_server_thread() as server:
        server.script(reply("{}"), reject_response_format())
        results = _complete(server, calls=3)
        assert all(isinstance(r, Completion) for r in results)
        assert ["response_format" in b for b in server.requests] == [True, True, False, False]


def test_a_plain_400_after_structured_output_worked_is_permanent() -> None:
    with judge_server_thread() as server:
        server.script(reply("{}"), status(400, error="context length exceeded"))
        ok, failed = _complete(server, calls=2)
        assert isinstance(ok, Completion)
        assert isinstance(failed, JudgePermanentError) and failed.status == 400
        assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("action", "kind", "code"),
    [
        (status(429, retry_after="0.25"), JudgeRetryableError, 429),
        (status(500), JudgeRetryableError, 500),
        (status(503), JudgeRetryableError, 503),
        (drop(), JudgeRetryableError, None),
        (status(401), JudgePermanentError, 401),
        (raw("{not json"), JudgePermanentError, None),
        (raw('{"object": "error"}'), JudgePermanentError, None),
        (status(404), JudgePermanentError, 404),
    ],
)
def test_failures_are_classified(action: Any, kind: type[Exception], code: int | None) -> None:
    with judge_server_thread() as server:
        server.script(action)
        (result,) = _complete(server)
        assert len(server.requests) == 1  # the openai client's own retries are off
    assert type(result) is kind and getattr(result, "status") == code
    if code == 429:
        assert isinstance(result, JudgeRetryableError) and result.retry_after == 0.25


def test_slow_answer_is_a_timeout() -> None:
    with judge_server_thread() as server:
        server.script(delay(0.3))
        (result,) = _complete(server, timeout=0.05)
    assert isinstance(result, JudgeTimeoutError)


def test_unreachable_endpoint_is_retryable() -> None:
    async def run() -> Exception:
        async with JudgeServer() as server:
            url = server.base_url
        client = JudgeClient(JudgeEndpoint(url, "k"), "m", 1.0)  # the port is closed now
        try:
            await client.complete(_request())
        except Exception as exc:  # noqa: BLE001
            return exc
        finally:
            await client.aclose()
        raise AssertionError("no error")

    assert isinstance(asyncio.run(run()), JudgeRetryableError)


def test_a_reply_without_content_is_empty_text() -> None:
    with judge_server_thread() as server:
        server.script(raw('{"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]}'))
        (result,) = _complete(server)
    assert result == Completion("", None, None, "judge-model", None)  # no usage: not reported, never 0


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}, (7, 3)),
    ({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, (0, 0)),  # the runner reads 0 as none
    ({"completion_tokens": 3}, (None, 3)),
    ({"prompt_tokens": -1, "completion_tokens": True}, (None, None)),
    ({"prompt_tokens": 10**12, "completion_tokens": 2.5}, (None, None)),
])
def test_usage_is_read_as_reported_or_none(usage: dict[str, Any], expected: tuple[int | None, int | None]) -> None:
    body = json.loads(completion("{}"))
    body["usage"] = usage
    with judge_server_thread() as server:
        server.script(raw(json.dumps(body)))
        (result,) = _complete(server)
    assert isinstance(result, Completion) and (result.input_tokens, result.output_tokens) == expected


def test_a_reply_cut_at_max_tokens_says_so() -> None:
    with judge_server_thread() as server:
        server.script(cut_at_max_tokens('{"faithfulness": {"claims": [{"claim": "Par'))
        (result,) = _complete(server)
    assert isinstance(result, Completion) and result.finish_reason == "length"


def test_a_server_refusing_max_tokens_gets_max_completion_tokens_from_then_on() -> None:
    """OpenAI's reasoning models refuse ``max_tokens`` and name ``max_completion_tokens``."""
    refusal = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
               "Use 'max_completion_tokens' instead.")
    with judge_server_thread() as server:
        server.script(status(400, error=refusal))
        first, second = _complete(server, calls=2)
        bodies = list(server.requests)
    assert isinstance(first, Completion) and isinstance(second, Completion)
    limits = [(b.get("max_tokens"), b.get("max_completion_tokens"), "response_format" in b) for b in bodies]
    n = _request().max_tokens
    assert limits == [(n, None, True), (None, n, True), (None, n, True)]  # structured output kept


def test_a_refusal_of_max_tokens_for_its_size_is_an_error() -> None:
    """A limit the model cannot give (older models: 4,096 output tokens) is this request's
    refusal (400), not a reason to rename the parameter."""
    with judge_server_thread() as server:
        server.script(status(400, error="max_tokens is too large: 2288. This model supports at most 2048 completion tokens"),
                      status(400, error="max_tokens is too large"))
        (result,) = _complete(server)
        bodies = list(server.requests)
    assert isinstance(result, JudgePermanentError) and result.status == 400
    assert [b.get("max_tokens") for b in bodies] == [2288, 2288] and all("max_completion_tokens" not in b for b in bodies)


# -- garbage and oversized replies -----------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (streamed(2 * MAX_REPLY_BYTES), "larger than"),  # a valid completion, chunked: cut while read
        (raw(completion("x" * MAX_REPLY_BYTES)), "larger than"),  # with a Content-Length
        (gzip_bomb(50_000_000), "compressed"),  # would inflate to 50 MB
        (raw('{"a":' * 100_000), "not JSON"),  # nesting too deep for the decoder
        (raw('{"choices": [1]}'), "not a chat completion"),
        (raw('{"choices": [{"message": "text"}]}'), "not a chat completion"),
        (raw("[1, 2]"), "no choices"),
    ],
)
def test_garbage_and_oversized_replies_are_permanent_errors(action: Any, message: str) -> None:
    with judge_server_thread() as server:
        server.script(action)
        (result,) = _complete(server)
        assert server.headers[0]["accept-encoding"] == "identity"
    assert isinstance(result, JudgePermanentError) and message in str(result)


def test_a_reply_just_under_the_cap_is_read() -> None:
    with judge_server_thread() as server:
        server.script(streamed(MAX_REPLY_BYTES - 1000))
        (result,) = _complete(server)
    assert isinstance(result, Completion) and len(result.text) >= MAX_REPLY_BYTES - 1000


def test_error_messages_carry_no_server_text() -> None:
    with judge_server_thread() as server:
        server.script(status(500, error="SERVERTEXT echo"), status(404, error="SERVERTEXT echo"),
                      raw("SERVERTEXT not json"), wire(b"HTTP/1.1 200 OK\r\nSERVERTEXT\r\n\r\n"))
        results = _complete(server, calls=4)
    assert [str(r) for r in results] == [
        "judge endpoint answered 500", "judge endpoint answered 404", "judge reply is not JSON",
        "judge connection failed (RemoteProtocolError)",
    ]


def test_status_detail_is_the_endpoints_own_message() -> None:
    """``detail`` of a status error: the error object's ``message``, else the body's text without
    the client's ``Error code: N -`` prefix (a proxy's plain-text 502)."""
    import httpx2
    import openai

    from ragmon.judge.client import _translate

    request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    plain = httpx2.Response(502, request=request, text="Bad gateway from the proxy")
    text = _translate(openai.InternalServerError("Error code: 502 - Bad gateway from the proxy", response=plain,
                                                 body="Bad gateway from the proxy"))
    assert (str(text), text.detail, text.status) == ("judge endpoint answered 502", "Bad gateway from the proxy", 502)
    shaped = httpx2.Response(429, request=request, json={"error": {"message": "Rate limit reached"}})
    limited = _translate(openai.RateLimitError("Error code: 429 - {...}", response=shaped,
                                               body={"error": {"message": "Rate limit reached"}}))
    assert (str(limited), limited.detail) == ("judge endpoint answered 429", "Rate limit reached")
