"""The judge endpoint: any OpenAI-compatible chat API through the ``openai`` async client.

One ``complete`` call is one HTTP request (the ``openai`` client's own retries are off; the
runner retries). Structured output (``response_format`` with a strict JSON schema) is used
until the server rejects it; from then on the client sends ``fallback_messages`` (JSON-only
instructions) without ``response_format``. Every call carries the request's ``max_tokens``; a
server that refuses that parameter and names ``max_completion_tokens`` instead (OpenAI's
reasoning models) gets the limit under that name from then on. Failures are translated at this
boundary:

- ``JudgeRetryableError``: 429, 5xx, a refused or dropped connection;
- ``JudgeTimeoutError``: no answer within the timeout;
- ``JudgePermanentError``: any other 4xx, or anything else the server or client did wrong:
  a 200 that is not a chat completion, a reply body over ``MAX_REPLY_BYTES``, or a compressed
  one (the client asks for ``identity``, so a size cap on the wire bounds the memory used).

Error messages carry the kind of failure and the HTTP status only, never the server's error
text or reply (they may echo the request's content) nor the key.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from ragmon.errors import JudgeCallError, JudgePermanentError, JudgeRetryableError, JudgeTimeoutError
from ragmon.judge.endpoint import PLACEHOLDER_KEY, Completion, JudgeEndpoint, endpoint_from_config
from ragmon.judge.prompts import JudgeRequest

__all__ = [
    "Completion",
    "JudgeClient",
    "JudgeEndpoint",
    "MAX_REPLY_BYTES",
    "PLACEHOLDER_KEY",
    "endpoint_from_config",
]

_log = logging.getLogger(__name__)

MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
"""A judge reply body (success or error) longer than this is refused while it is read."""
_MAX_TOKENS: Final = 10**9
"""A usage count above this is not a real call's; it counts as not reported (``None``)."""
_MAX_MODEL_CHARS: Final = 256
_MAX_FINISH_REASON_CHARS: Final = 64

_UNSUPPORTED = re.compile(r"response_format|json_schema|structured.output|guided", re.IGNORECASE)
_NOT_MAX_TOKENS = re.compile(r"max_tokens.*max_completion_tokens", re.IGNORECASE | re.DOTALL)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after-ms")
    scale = 0.001
    if value is None:
        value, scale = headers.get("retry-after"), 1.0
    try:
        seconds = float(value) * scale if value is not None else None
    except ValueError:
        return None  # an HTTP date: ignored, our own backoff applies
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


class _UnsafeReply(httpx2.RequestError):
    """A reply body over the byte cap, or compressed (its decoded size would be unbounded)."""


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that raises ``_UnsafeReply`` once more than ``limit`` bytes arrive."""

    def __init__(self, stream: httpx2.AsyncByteStream, limit: int) -> None:
        self._stream = stream
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise _UnsafeReply(f"judge reply larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _capped(limit: int) -> httpx2.AsyncClient:
    """An HTTP client for ``openai`` whose reply bodies are read up to ``limit`` bytes."""

    async def cap(response: httpx2.Response) -> None:
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise _UnsafeReply("judge reply is compressed (identity was asked for)")
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedStream(response.stream, limit)

    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [cap]})


def _rejects_structured_output(exc: openai.APIStatusError, first: bool) -> bool:
    if exc.status_code not in (400, 422):
        return False
    detail = f"{exc.message} {exc.body!r}"
    return bool(_UNSUPPORTED.search(detail)) or (first and exc.status_code == 400)


def _rejects_max_tokens(exc: openai.APIStatusError) -> bool:
    """A 400 that refuses ``max_tokens`` and names ``max_completion_tokens`` instead."""
    return exc.status_code == 400 and bool(_NOT_MAX_TOKENS.search(f"{exc.message} {exc.body!r}"))


MAX_DETAIL_CHARS: Final = 200
"""The longest first message kept of a failure (``JudgeCallError.detail``)."""


def _first_line(text: object) -> str:
    """The first line of ``text``, at most ``MAX_DETAIL_CHARS`` characters."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:MAX_DETAIL_CHARS] + ("…" if len(line) > MAX_DETAIL_CHARS else "")


def _root(exc: BaseException) -> BaseException:
    """The innermost cause or context of ``exc`` (the refused connection under the HTTP
    client's and the event loop's errors), at most 16 links down."""
    for _ in range(16):
        inner = exc.__cause__ or exc.__context__
        if inner is None or inner is exc:
            break
        exc = inner
    return exc


def _said(exc: openai.APIStatusError) -> str:
    """What the endpoint said: its error object's ``message``, else its body's text."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return _STATUS_PREFIX.sub("", exc.message)


_STATUS_PREFIX: Final = re.compile(r"^Error code: \d+ - ")
"""How ``openai`` begins a status error's message (the status is said already)."""


def _translate(exc: openai.OpenAIError) -> JudgeCallError:
    """The ``openai`` exception as one of ours: kind and status in the message (safe to log),
    the server's or the connection's first message in ``detail``."""
    if isinstance(exc, openai.APITimeoutError):
        return JudgeTimeoutError("judge call timed out")
    if isinstance(exc, openai.APIConnectionError):
        if isinstance(exc.__cause__, _UnsafeReply):
            return JudgePermanentError(str(exc.__cause__))
        near, root = exc.__cause__ or exc, _root(exc)
        said = _first_line(root)
        detail = f"{type(root).__name__}: {said}" if said else type(root).__name__
        return JudgeRetryableError(f"judge connection failed ({type(near).__name__})", detail=detail)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"judge endpoint answered {status}"  # its error text may echo the request
        detail = _first_line(_said(exc))
        if status == 429 or status >= 500:
            return JudgeRetryableError(message, status, _retry_after(exc.response.headers), detail)
        return JudgePermanentError(message, status, detail)
    return JudgePermanentError(f"judge call failed ({type(exc).__name__})")


def _usage(value: Any) -> int | None:
    """A token count as reported, or ``None`` when missing, not an integer, negative or implausible."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_TOKENS:
        return value
    return None


class JudgeClient:
    """Calls one model on one endpoint; see the module docstring. Close with ``aclose``."""

    def __init__(self, endpoint: JudgeEndpoint, model: str, timeout: float) -> None:
        self.model = model
        self.timeout = timeout
        self._client = openai.AsyncOpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0, timeout=timeout,
            default_headers={"Accept-Encoding": "identity"}, http_client=_capped(MAX_REPLY_BYTES),
        )
        self._structured = True
        self._structured_worked = False
        self._limit_parameter = "max_tokens"

    @property
    def structured(self) -> bool:
        """Whether calls still send ``response_format`` (False once the server rejected it)."""
        return self._structured

    async def complete(self, request: JudgeRequest) -> Completion:
        """One call at ``temperature=0``; raises a ``JudgeCallError`` subclass on failure.

        A server that rejects ``response_format`` (a 400/422 naming it, or any 400 before a
        structured call ever succeeded) switches this client to the fallback for good, and the
        call is repeated once at once without it. A server that refuses ``max_tokens`` for
        ``max_completion_tokens`` switches this client to that name for good, and the call is
        repeated once at once with it.
        """
        if self._structured:
            try:
                completion = await self._create(request, structured=True)
            except openai.APIStatusError as exc:
                if self._switch_limit_parameter(exc):
                    return await self.complete(request)
                if not _rejects_structured_output(exc, first=not self._structured_worked):
                    raise _translate(exc) from exc
                if self._structured:
                    _log.warning("judge endpoint rejected response_format (%s); using JSON instructions", exc.status_code)
                self._structured = False
            except openai.OpenAIError as exc:
                raise _translate(exc) from exc
            else:
                self._structured_worked = True
                return completion
        try:
            return await self._create(request, structured=False)
        except openai.APIStatusError as exc:
            if self._switch_limit_parameter(exc):
                return await self.complete(request)
            raise _translate(exc) from exc
        except openai.OpenAIError as exc:
            raise _translate(exc) from exc

    def _switch_limit_parameter(self, exc: openai.APIStatusError) -> bool:
        """Send ``max_completion_tokens`` from now on if ``exc`` refuses ``max_tokens`` (once)."""
        if self._limit_parameter != "max_tokens" or not _rejects_max_tokens(exc):
            return False
        _log.warning("judge endpoint rejected max_tokens (%s); using max_completion_tokens", exc.status_code)
        self._limit_parameter = "max_completion_tokens"
        return True

    async def _create(self, request: JudgeRequest, structured: bool) -> Completion:
        messages = cast("list[ChatCompletionMessageParam]", [dict(m) for m in (
            request.messages if structured else request.fallback_messages
        )])
        limit = request.max_tokens if request.max_tokens > 0 else openai.omit
        as_completion_tokens = self._limit_parameter == "max_completion_tokens"
        max_tokens = openai.omit if as_completion_tokens else limit
        max_completion_tokens = limit if as_completion_tokens else openai.omit
        try:
            if structured:
                response_format = cast("ResponseFormatJSONSchema", request.response_format)
                response = await self._client.chat.completions.create(
                    model=self.model, messages=messages, response_format=response_format, temperature=0,
                    max_tokens=max_tokens, max_completion_tokens=max_completion_tokens,
                )
            else:
                response = await self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0,
                    max_tokens=max_tokens, max_completion_tokens=max_completion_tokens,
                )
        except openai.OpenAIError:
            raise
        except (ValueError, RecursionError) as exc:  # a 200 whose body is not JSON (or absurdly nested)
            raise JudgePermanentError("judge reply is not JSON") from exc
        try:
            choices = getattr(response, "choices", None)
            if not isinstance(choices, list) or not choices:
                raise JudgePermanentError("judge reply has no choices")
            message = getattr(choices[0], "message", None)
            if not hasattr(message, "content"):
                raise JudgePermanentError("judge reply is not a chat completion")
            content = getattr(message, "content", None)
            usage = getattr(response, "usage", None)
            model = getattr(response, "model", None)
            finish = getattr(choices[0], "finish_reason", None)
            return Completion(
                text=content if isinstance(content, str) else "",
                input_tokens=_usage(getattr(usage, "prompt_tokens", None)),
                output_tokens=_usage(getattr(usage, "completion_tokens", None)),
                model=model if isinstance(model, str) and 0 < len(model) <= _MAX_MODEL_CHARS else self.model,
                finish_reason=finish if isinstance(finish, str) and len(finish) <= _MAX_FINISH_REASON_CHARS else None,
            )
        except (AttributeError, TypeError, LookupError) as exc:  # a 200 of another shape
            raise JudgePermanentError("judge reply is not a chat completion") from exc

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()
