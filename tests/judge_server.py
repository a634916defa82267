"""A scripted OpenAI-compatible chat server for judge tests (aiohttp, 127.0.0.1, free port).

``POST /v1/chat/completions`` answers in OpenAI's ``chat.completion`` shape. Each request
takes the next scripted ``Action`` if any (``server.script(...)``), else the default
``responder(body) -> content``, which by default builds a valid verdict for whatever the
request asks (``verdict_for``). Every request body is recorded (``requests``) and concurrent
requests are counted (``current``, ``max_concurrent``); their headers too (``headers``). A client that goes away cancels its
handler (a hung or slow reply ends with it), and ``close`` releases every ``hang``.

Async code: ``async with JudgeServer() as server: ... server.base_url``.
Sync tests: ``with judge_server_thread() as server: ...`` runs it on its own loop thread.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from server_helpers import LoopThread

from ragmon.judge.prompts import COHERENCE_CHECKS, TOXICITY_CATEGORIES

Responder = Callable[[dict[str, Any]], str]

_KEYS = re.compile(r"exactly these keys: ([^\n]*?)\.\n")
_DOCS = re.compile(r"DOCUMENTS \((\d+)[):;]")


@dataclass(frozen=True)
class Action:
    """One scripted reply: ``content`` (``None``: the responder's), an HTTP ``status`` with an
    ``error`` message, a ``delay`` first, a ``retry_after`` header, ``drop`` the connection, a
    ``raw`` 200 body that is not a chat completion (``raw_bytes`` with extra ``headers``),
    ``hang`` (never answer), ``stream`` that many bytes chunked, with no length, or ``wire``
    bytes written as they are instead of an HTTP response. ``finish_reason`` is the reply's
    (``"length"``: cut at ``max_tokens``); ``no_usage`` leaves ``usage`` out of the reply."""

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    retry_after: str | None = None
    drop: bool = False
    error: str = "scripted error"
    usage: tuple[int, int] | None = None
    raw: str | None = None
    raw_bytes: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False
    stream: int = 0
    wire: bytes | None = None
    finish_reason: str = "stop"
    no_usage: bool = False


def reply(content: str, usage: tuple[int, int] | None = None) -> Action:
    """Answer 200 with this message content."""
    return Action(content=content, usage=usage)


def cut_at_max_tokens(content: str | None = None) -> Action:
    """Answer 200 with finish reason ``length``: the reply was cut at ``max_tokens``."""
    return Action(content=content, finish_reason="length")


def without_usage(content: str | None = None) -> Action:
    """Answer 200 with no ``usage`` object at all."""
    return Action(content=content, no_usage=True)


def status(code: int, retry_after: str | None = None, error: str = "scripted error") -> Action:
    """Answer an error status with an OpenAI-shaped error body."""
    return Action(status=code, retry_after=retry_after, error=error)


def delay(seconds: float, content: str | None = None) -> Action:
    """Wait, then answer normally."""
    return Action(content=content, delay=seconds)


def drop() -> Action:
    """Close the connection without answering."""
    return Action(drop=True)


def raw(body: str) -> Action:
    """Answer 200 with this body as is (JSON content type), not a chat completion."""
    return Action(raw=body)


def wire(data: bytes) -> Action:
    """Write ``data`` to the connection instead of an HTTP response, then close it."""
    return Action(wire=data)


def hang() -> Action:
    """Never answer (until the client goes away or the server closes)."""
    return Action(hang=True)


def streamed(size: int) -> Action:
    """Answer 200 with a chat completion of about ``size`` bytes (its message a run of ``x``),
    sent chunked, without a Content-Length."""
    return Action(stream=size)


def gzip_bomb(size: int) -> Action:
    """Answer 200 with a gzip body (``Content-Encoding: gzip``) that inflates to a chat
    completion of about ``size`` bytes."""
    return Action(raw_bytes=gzip.compress(completion("x" * size).encode()), headers=(("Content-Encoding", "gzip"),))


def completion(content: str, model: str = "judge-model", usage: Any = None) -> str:
    """A chat completion body (for ``raw``) with this content, model and usage object."""
    return json.dumps({
        "id": "chatcmpl-raw", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })


def reject_response_format() -> Action:
    """Answer 400 as a server without JSON-schema support does."""
    return status(400, error="response_format of type json_schema is not supported by this model")


def user_text(body: dict[str, Any]) -> str:
    """All message contents of a request, joined."""
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def requested(body: dict[str, Any]) -> tuple[list[str], int]:
    """The evaluators a judge request asks for and its number of documents."""
    text = user_text(body)
    keys = _KEYS.search(text)
    docs = _DOCS.search(text)
    names = re.findall(r"'([a-z_]+)'", keys.group(1)) if keys else []
    return names, int(docs.group(1)) if docs else 0


def verdict_for(
    body: dict[str, Any],
    supported: tuple[bool, ...] = (True, True),
    relevance: str = "yes",
    relevant: Callable[[int], bool] = lambda i: True,
    covered: tuple[bool, ...] = (True,),
    coherence: dict[str, bool] | None = None,
    toxicity: dict[str, str] | None = None,
) -> str:
    """A valid verdict JSON for ``body``'s evaluators, with the given claim flags; coherence
    checks pass and toxicity severities are ``none`` unless ``coherence`` / ``toxicity`` say."""
    names, n_docs = requested(body)
    out: dict[str, Any] = {}
    for name in names:
        if name == "faithfulness":
            out[name] = {"claims": [{"claim": f"claim {i}", "supported": s} for i, s in enumerate(supported)]}
        elif name == "answer_relevance":
            out[name] = {"reason": "scripted", "verdict": relevance}
        elif name == "context_relevance":
            out[name] = {"documents": [{"index": i, "relevant": relevant(i)} for i in range(n_docs)]}
        elif name == "answer_correctness":
            out[name] = {"reference_claims": [{"claim": f"ref {i}", "covered": c} for i, c in enumerate(covered)]}
        elif name == "coherence":
            out[name] = {check: True for check in COHERENCE_CHECKS} | (coherence or {})
        elif name == "toxicity":
            out[name] = {category: "none" for category in TOXICITY_CATEGORIES} | (toxicity or {})
    return json.dumps(out)


class JudgeServer:
    """See the module docstring. ``supports_response_format=False`` rejects every request that
    carries ``response_format`` with 400, as a server without structured output."""

    def __init__(
        self,
        responder: Responder = verdict_for,
        usage: tuple[int, int] = (100, 20),
        supports_response_format: bool = True,
    ) -> None:
        self.responder = responder
        self.usage = usage
        self.supports_response_format = supports_response_format
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.current = 0
        self.max_concurrent = 0
        self._script: deque[Action] = deque()
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` of this server."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *actions: Action) -> None:
        """Queue replies for the next requests, in order (thread-safe)."""
        with self._lock:
            self._script.extend(actions)

    @property
    def scripted(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._script)

    def _next(self) -> Action | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def bodies_text(self) -> str:
        """Every recorded request body as one JSON text (for leak checks)."""
        return "\n".join(json.dumps(b, ensure_ascii=False) for b in list(self.requests))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.current += 1
        self.max_concurrent = max(self.max_concurrent, self.current)
        try:
            action = self._next() or Action()
            if action.delay:
                await asyncio.sleep(action.delay)
            if action.hang:
                assert self._released is not None
                await self._released.wait()
                assert request.transport is not None
                request.transport.abort()
                raise asyncio.CancelledError
            if action.wire is not None:
                assert request.transport is not None
                request.transport.write(action.wire)
                request.transport.close()
                raise asyncio.CancelledError
            if action.drop:
                assert request.transport is not None
                request.transport.abort()
                raise asyncio.CancelledError  # aiohttp treats the handler as done
            if "response_format" in body and not self.supports_response_format:
                action = reject_response_format()
            if action.status != 200:
                headers = {"Retry-After": action.retry_after} if action.retry_after is not None else {}
                error = {"error": {"message": action.error, "type": "invalid_request_error", "code": None}}
                return web.json_response(error, status=action.status, headers=headers)
            if action.raw is not None:
                return web.Response(text=action.raw, content_type="application/json")
            if action.raw_bytes is not None:
                return web.Response(body=action.raw_bytes, content_type="application/json", headers=dict(action.headers))
            if action.stream:
                head, tail = completion("\0").encode().split(b"\\u0000")
                response = web.StreamResponse(headers={"Content-Type": "application/json"})
                response.enable_chunked_encoding()
                await response.prepare(request)
                await response.write(head)
                for start in range(0, action.stream, 65536):
                    await response.write(b"x" * min(65536, action.stream - start))
                await response.write(tail)
                await response.write_eof()
                return response
            content = action.content if action.content is not None else self.responder(body)
            prompt, completion_tokens = action.usage or self.usage
            answer: dict[str, Any] = {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": action.finish_reason,
                }],
            }
            if not action.no_usage:
                answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                                   "total_tokens": prompt + completion_tokens}
            return web.json_response(answer)
        finally:
            self.current -= 1

    async def start(self) -> None:
        self._released = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._released is not None:
            self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> JudgeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextmanager
def judge_server_thread(**kwargs: Any) -> Iterator[JudgeServer]:
    """A ``JudgeServer`` running on its own event loop thread (for sync tests)."""
    thread = LoopThread()
    server = JudgeServer(**kwargs)
    try:
        thread.run(server.start())
        yield server
    finally:
        thread.run(server.close())
        thread.close()
        thread.loop.close()
