"""OTLP/HTTP trace receiver (``POST /v1/traces``) on aiohttp.

Answers as the OTLP specification says: 200 with an ``ExportTraceServiceResponse`` (with
``partial_success`` when some spans were rejected), 400 with a ``google.rpc.Status`` for an
undecodable body, 401 for a bad token, 408 when the body is too slow to arrive, 413 past the
size limit (compressed or not; a declared ``Content-Length`` past it is refused before a byte
of the body is read, ``Expect: 100-continue`` included) or when decoding a JSON body would
take more than the whole in-flight budget, 415 for an unknown content type or encoding, 503 with
``Retry-After`` when the pipeline is full, too many bytes are in flight, or ragmon is shutting
down. Responses use the request's content type (protobuf or JSON). Each rejection is counted
and logged as one rate-limited line (reason and peer, never content).

Memory: every body byte is charged to the shared in-flight budget (``ByteBudget``) as it
arrives, not as declared, so a client that declares 16 MB and sends one byte holds one byte; a
decompressed body is charged too. Decoding happens in a turn of the ingest gate, which holds at
most ``IngestGate.slot_bytes``: a JSON body's tree (``ragmon.receivers.weight``, known before it
is built) and the spans decoded; a body that would take more is refused with 413 before it is
decoded past it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http import HttpProcessingError, HttpVersion11
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from ragmon.errors import BodyTooLargeError, DecodedTooLargeError, DecodeError
from ragmon.model import Offer
from ragmon.otlp.decode import Decoded, decode_json, decode_protobuf
from ragmon.net.auth import bearer_token_matches
from ragmon.receivers.gunzip import gunzip
from ragmon.receivers.ingest import (
    IngestGate,
    IngestStats,
    ReceiverSettings,
    SpanSink,
    decode_body,
    hand_over,
)
from ragmon.net.listeners import (
    ByteBudget,
    Listener,
    ListenerLimits,
    ListenerStats,
)
from ragmon.net.ratelog import RateLimitedLog, format_peer
from ragmon.net.routes import local_base
from ragmon.receivers.weight import json_tree_bytes

__all__ = ["PROTOCOL", "RETRY_AFTER_SECONDS", "SHUTDOWN_TIMEOUT", "HttpReceiver", "misrouted", "start"]

PROTOCOL = "http"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_SECONDS = 1
SHUTDOWN_TIMEOUT = 2.0
"""Seconds a request still in the handler gets when the listener closes (twice: to finish, then
once cancelled)."""
_GRPC_INVALID_ARGUMENT, _GRPC_UNAUTHENTICATED, _GRPC_UNAVAILABLE = 3, 16, 14
_GRPC_RESOURCE_EXHAUSTED, _GRPC_UNIMPLEMENTED, _GRPC_DEADLINE_EXCEEDED = 8, 12, 4
GUNZIP_IN_THREAD_BYTES = 256 * 1024
"""Compressed bodies at least this large are decompressed off the event loop."""


def _reply(content_type: str, status: int, message: ExportTraceServiceResponse | Status,
           headers: dict[str, str] | None = None) -> web.Response:
    if content_type == JSON:
        body = json_format.MessageToJson(message, indent=None).encode()
    else:
        body = message.SerializeToString()
    return web.Response(status=status, body=body, content_type=content_type, headers=headers)


_RETRY = {"Retry-After": str(RETRY_AFTER_SECONDS)}
_FEEDBACK_REFUSALS = {
    413: "body too large", 408: "body not received in time", 503: "busy; retry later", 400: "malformed body",
}


class FeedbackHandler(Protocol):
    """Answers feedback bodies (``ragmon.groundtruth.feedback.Feedback``)."""

    def decode(self, body: bytes) -> Any:
        """The body decoded and checked (pure: run in a worker thread for large bodies)."""

    def join(self, decoded: Any) -> tuple[int, dict[str, str]]:
        """(HTTP status, JSON answer) for a decoded body (on the event loop)."""


def _json_reply(status: int, answer: dict[str, str], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=json.dumps(answer), content_type=JSON, headers=headers)


def _peer(request: web.Request) -> str:
    return format_peer(request.transport.get_extra_info("peername") if request.transport else request.remote)


class HttpReceiver:
    """``POST /v1/traces``: reads, limits, decodes and hands over one request at a time per
    connection; ``begin_shutdown`` turns new and slow requests into 503 ``shutting_down``."""

    def __init__(self, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats,
                 limits: ListenerLimits, log: RateLimitedLog, gate: IngestGate | None = None,
                 budget: ByteBudget | None = None) -> None:
        self.settings = settings
        self.gate = gate or IngestGate()
        self.sink = sink
        self.stats = stats
        self.limits = limits
        self.log = log
        self.budget = budget or ByteBudget(limits.max_inflight_bytes)
        self.listener: Listener | None = None
        self.port = 0
        self._draining = False
        self._reads: set[asyncio.Timeout] = set()
        """Deadlines of the bodies being read (brought forward by ``begin_shutdown``)."""
        self.feedback: FeedbackHandler | None = None
        """Answers ``POST /v1/feedback`` bodies (``ragmon.groundtruth.feedback.Feedback.answer``)."""

    def add_routes(self, app: web.Application) -> None:
        """Add ``POST /v1/traces`` and ``POST /v1/feedback`` to ``app``."""
        app.router.add_post("/v1/traces", self.export, expect_handler=self._expect)
        app.router.add_post("/v1/feedback", self.take_feedback, expect_handler=self._expect)

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue``: refuse at once what the handler would refuse before
        reading the body (shutting down, a bad token, a declared size past the limit), else let
        the client send it (aiohttp's default answer)."""
        refusal = None
        if self._draining:
            refusal = web.Response(status=503, text="ragmon is shutting down; retry later\n", headers=_RETRY)
        elif self.settings.token and not bearer_token_matches(request.headers.get("Authorization"), self.settings.token):
            self.stats.requests_rejected[(PROTOCOL, "unauthorized")] += 1
            refusal = web.Response(status=401, text="missing or wrong bearer token\n")
        elif request.content_length is not None and request.content_length > self.settings.max_body_bytes:
            self.stats.requests_rejected[(PROTOCOL, "too_large")] += 1
            self.log.warn("OTLP/HTTP too_large", _peer(request), "413 before the body (Expect: 100-continue)")
            refusal = web.Response(status=413, text=f"body larger than {self.settings.max_body_bytes} bytes\n")
        if refusal is not None:
            refusal.force_close()
            return refusal
        if request.version != HttpVersion11 or request.headers.get("Expect", "").lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"Unknown Expect: {request.headers.get('Expect', '')}")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # as aiohttp's default handler
        request.writer.output_size = 0
        return None

    async def take_feedback(self, request: web.Request) -> web.Response:
        """The ``POST /v1/feedback`` handler: JSON in, JSON out; the same token, body cap,
        body timeout and in-flight byte budget as ``/v1/traces``."""
        if self._draining:
            return _json_reply(503, {"error": "ragmon is shutting down; retry later"}, _RETRY)
        if self.feedback is None:
            return _json_reply(404, {"error": "feedback is not served here"})
        settings = self.settings
        if settings.token and not bearer_token_matches(request.headers.get("Authorization"), settings.token):
            self.stats.requests_rejected[(PROTOCOL, "unauthorized")] += 1
            return _json_reply(401, {"error": "missing or wrong bearer token"})
        limit = settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            self.stats.requests_rejected[(PROTOCOL, "too_large")] += 1
            return _json_reply(413, {"error": f"body larger than {limit} bytes"})
        held = [0]
        try:
            body = await self._read(request, JSON, held)
            if isinstance(body, web.Response):  # 413, 408, 503, 400: keep the status, answer in JSON
                return _json_reply(body.status, {"error": _FEEDBACK_REFUSALS.get(body.status, "body not read")},
                                   _RETRY if body.status == 503 else None)
            if not await self.gate.enter():  # parsing takes a turn, as decoding spans does
                self.stats.requests_rejected[(PROTOCOL, "busy")] += 1
                return _json_reply(503, {"error": "busy; retry later"}, _RETRY)
            try:
                if json_tree_bytes(body) > self.gate.slot_bytes:
                    self.stats.requests_rejected[(PROTOCOL, "too_large")] += 1
                    return _json_reply(413, {"error": "body too large to decode: its JSON tree would take more than "
                                                      "receiver.max_inflight_bytes / 2"})
                if len(body) >= GUNZIP_IN_THREAD_BYTES:  # a large JSON body takes a while to parse
                    decoded = await asyncio.to_thread(self.feedback.decode, body)
                else:
                    decoded = self.feedback.decode(body)
            finally:
                self.gate.leave()
        finally:
            self.budget.give(held[0])
        status, answer = self.feedback.join(decoded)
        return _json_reply(status, answer)

    def begin_shutdown(self, grace: float) -> None:
        """New requests get 503 ``shutting_down`` at once; bodies still arriving get ``grace``
        seconds, then the same answer."""
        self._draining = True
        loop = asyncio.get_running_loop()
        cut = loop.time() + grace
        for deadline in self._reads:
            when = deadline.when()
            deadline.reschedule(cut if when is None else min(when, cut))

    async def close(self) -> None:
        """Stop accepting and close every connection (see ``Listener.close``)."""
        if self.listener is not None:
            await self.listener.close()

    def _reject(self, request: web.Request, reply_type: str, status: int, code: int, reason: str,
                message: str, headers: dict[str, str] | None = None) -> web.Response:
        """Count, log (rate-limited, no content) and answer a request refused whole."""
        self.stats.requests_rejected[(PROTOCOL, reason)] += 1
        self.log.warn(f"OTLP/HTTP {reason}", _peer(request), f"{status} {message}")
        response = _reply(reply_type, status, Status(code=code, message=message), headers)
        if status in (408, 503) or reason == "malformed":
            response.force_close()
        return response

    async def export(self, request: web.Request) -> web.Response:
        """The ``POST /v1/traces`` handler."""
        media = request.content_type
        reply_type = JSON if media == JSON else PROTOBUF
        if self._draining:
            return self._reject(request, reply_type, 503, _GRPC_UNAVAILABLE, "shutting_down",
                                "ragmon is shutting down; retry later", _RETRY)
        settings = self.settings
        if settings.token and not bearer_token_matches(request.headers.get("Authorization"), settings.token):
            return self._reject(request, reply_type, 401, _GRPC_UNAUTHENTICATED, "unauthorized", "missing or wrong bearer token")
        if media not in (PROTOBUF, JSON):
            return self._reject(request, PROTOBUF, 415, _GRPC_UNIMPLEMENTED, "content_type",
                                f"unsupported content type; use {PROTOBUF} or {JSON}")
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", ""):
            return self._reject(request, reply_type, 415, _GRPC_UNIMPLEMENTED, "content_encoding",
                                "unsupported content encoding; use gzip or none")
        limit = settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._reject(request, reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, "too_large",
                                f"body larger than {limit} bytes")
        held = [0]
        try:
            body = await self._read(request, reply_type, held)
            if isinstance(body, web.Response):
                return body
            # the body is read (a slow client holds no turn); the CPU work waits for a turn
            if not await self.gate.enter():
                return self._reject(request, reply_type, 503, _GRPC_UNAVAILABLE, "busy",
                                    "every ingest turn is taken; retry later", _RETRY)
            try:
                decoded = await self._decode(request, body, media, reply_type, encoding, held)
            finally:
                self.gate.leave()
        finally:
            self.budget.give(held[0])
        if isinstance(decoded, web.Response):
            return decoded
        response = hand_over(decoded, self.sink, self.stats, PROTOCOL)
        if isinstance(response, Offer):
            refusal = response.value
            self.log.warn(f"OTLP/HTTP {refusal}", _peer(request), "503, spans refused; the exporter retries")
            message = f"ragmon is {refusal.replace('_', ' ')}; retry later"
            answer = _reply(reply_type, 503, Status(code=_GRPC_UNAVAILABLE, message=message), _RETRY)
            if refusal == "shutting_down":
                answer.force_close()
            return answer
        return _reply(reply_type, 200, response)

    async def _decode(self, request: web.Request, body: bytes, media: str, reply_type: str,
                      encoding: str, held: list[int]) -> Decoded | web.Response:
        """The body decompressed and decoded, or the answer refusing it; what decompressing and
        decoding take is charged to the budget first (``held[0]``: bytes charged so far)."""
        limit = self.settings.max_body_bytes
        if encoding == "gzip":
            try:
                if len(body) >= GUNZIP_IN_THREAD_BYTES:  # a body of many tiny members takes seconds
                    body = await asyncio.to_thread(gunzip, body, limit)
                else:
                    body = gunzip(body, limit)
            except BodyTooLargeError:
                return self._reject(request, reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, "too_large",
                                    f"decompressed body larger than {limit} bytes")
            except zlib.error as exc:
                return self._reject(request, reply_type, 400, _GRPC_INVALID_ARGUMENT, "decode", f"invalid gzip body: {exc}")
            if not self.budget.take(len(body), held[0]):  # held next to the compressed one until the end
                return self._busy(request, reply_type)
            held[0] += len(body)
        room = self.gate.slot_bytes  # what this turn may hold while decoding
        if media == JSON:
            tree = json_tree_bytes(body)
            if tree >= room:
                return self._reject(request, reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, "too_large",
                                    f"decoding this JSON body would take about {tree >> 20} MiB, more than a "
                                    f"decode may hold ({room >> 20} MiB: receiver.max_inflight_bytes / 2); "
                                    "send smaller batches or protobuf")
            room -= tree
        try:
            return await decode_body(decode_json if media == JSON else decode_protobuf, body, self.settings.selection, room)
        except DecodedTooLargeError as exc:
            return self._reject(request, reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, "too_large", str(exc))
        except DecodeError as exc:
            return self._reject(request, reply_type, 400, _GRPC_INVALID_ARGUMENT, "decode", str(exc))

    async def _read(self, request: web.Request, reply_type: str, held: list[int]) -> bytes | web.Response:
        """The body, within ``body_timeout``, ``max_body_bytes`` and the in-flight byte budget,
        charged as its bytes arrive (``held[0]``: bytes charged, given back by the caller); or
        the answer refusing it."""
        limit = self.settings.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_timeout) as deadline:
                self._reads.add(deadline)
                try:
                    async for chunk in request.content.iter_any():
                        size += len(chunk)
                        if size > limit:
                            return self._reject(request, reply_type, 413, _GRPC_RESOURCE_EXHAUSTED,
                                                "too_large", f"body larger than {limit} bytes")
                        if not self.budget.take(len(chunk), held[0]):  # charged as received, not as declared
                            return self._busy(request, reply_type)
                        held[0] += len(chunk)
                        chunks.append(chunk)
                finally:
                    self._reads.discard(deadline)
        except TimeoutError:
            if self._draining:
                return self._reject(request, reply_type, 503, _GRPC_UNAVAILABLE, "shutting_down",
                                    "ragmon is shutting down; retry later", _RETRY)
            return self._reject(request, reply_type, 408, _GRPC_DEADLINE_EXCEEDED, "timeout",
                                f"body not received within {self.limits.body_timeout:g}s")
        except (web.RequestPayloadError, HttpProcessingError):  # bad chunked framing mid-body
            return self._reject(request, reply_type, 400, _GRPC_INVALID_ARGUMENT, "malformed",
                                "malformed body framing")
        except ConnectionError:  # the client went away mid-body: nobody to answer
            return self._reject(request, reply_type, 400, _GRPC_INVALID_ARGUMENT, "aborted",
                                "connection closed before the body arrived")
        return b"".join(chunks)

    def _busy(self, request: web.Request, reply_type: str) -> web.Response:
        return self._reject(request, reply_type, 503, _GRPC_UNAVAILABLE, "inflight_bytes",
                            "too many request bytes in flight; retry later", _RETRY)


def misrouted(request: web.Request, status: int) -> str:
    """The receiver's answer to a path or method it does not serve (``net.routes.Unrouted``)."""
    base = local_base(request)
    if status == 405:
        return f"{request.method} is not served here: POST OTLP/HTTP traces (protobuf or JSON) to {base}/v1/traces"
    return f"no such path: send OTLP/HTTP traces to {base}/v1/traces (user feedback: {base}/v1/feedback)"


async def start(
    host: str, port: int, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats,
    app: web.Application | None = None, *, limits: ListenerLimits | None = None,
    listeners: ListenerStats | None = None, log: RateLimitedLog | None = None, gate: IngestGate | None = None,
    budget: ByteBudget | None = None,
) -> HttpReceiver:
    """Serve the receiver on ``host:port`` (0: a free port) behind ``limits``; its ``port`` is
    the bound port. ``budget``: the in-flight byte budget shared with the gRPC receiver
    (default: the receiver's own, of ``limits.max_inflight_bytes``).

    Request bodies are not decompressed by aiohttp: the receiver does it, to enforce the size
    limit on both the compressed and the decompressed body. Pass ``app`` to serve more routes
    on the same port.
    """
    limits = limits or ListenerLimits()
    log = log or RateLimitedLog(logging.getLogger("ragmon"))
    receiver = HttpReceiver(settings, sink, stats, limits, log, gate, budget)
    app = app or web.Application()
    receiver.add_routes(app)
    receiver.listener = Listener(
        "otlp_http", app, limits, listeners or ListenerStats(), log,
        shutdown_timeout=SHUTDOWN_TIMEOUT, auto_decompress=False,
    )
    receiver.port = await receiver.listener.start(host, port)
    return receiver

