"""OTLP/HTTP trace receiver (``POST /v1/traces``) on aiohttp.

Answers as the OTLP specification says: 200 with an ``ExportTraceServiceResponse`` (with
``partial_success`` when some spans were rejected), 400 with a ``google.rpc.Status`` for an
undecodable body, 401 for a bad token, 413 past the size limit (compressed or not), 415 for
an unknown content type or encoding, 503 with ``Retry-After`` when the pipeline is full.
Responses use the request's content type (protobuf or JSON).
"""

from __future__ import annotations

import hmac
import zlib

from aiohttp import web
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragmon.decode import DecodeError, Decoded, decode_json, decode_protobuf
from ragmon.receivers.ingest import IngestStats, ReceiverSettings, SpanSink, hand_over

__all__ = ["PROTOCOL", "RETRY_AFTER_SECONDS", "add_routes", "start"]

PROTOCOL = "http"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_SECONDS = 1
_GRPC_INVALID_ARGUMENT, _GRPC_UNAUTHENTICATED, _GRPC_UNAVAILABLE = 3, 16, 14
_GRPC_RESOURCE_EXHAUSTED, _GRPC_UNIMPLEMENTED = 8, 12


class _TooLarge(Exception):
    pass


def _gunzip(body: bytes, limit: int) -> bytes:
    """Decompress gzip up to ``limit`` bytes; ``_TooLarge`` past it, ``zlib.error`` if corrupt."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise _TooLarge
    if not inflater.eof:
        raise zlib.error("truncated gzip stream")
    return out


def _reply(content_type: str, status: int, message: ExportTraceServiceResponse | Status, headers: dict[str, str] | None = None) -> web.Response:
    if content_type == JSON:
        body = json_format.MessageToJson(message, indent=None).encode()
    else:
        body = message.SerializeToString()
    return web.Response(status=status, body=body, content_type=content_type, headers=headers)


def _error(content_type: str, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return _reply(content_type, status, Status(code=code, message=message), headers)


def add_routes(app: web.Application, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats) -> None:
    """Add ``POST /v1/traces`` to ``app``, handing decoded spans to ``sink``."""
    expected_auth = f"Bearer {settings.token}".encode() if settings.token else None

    def reject(reason: str) -> None:
        stats.requests_rejected[(PROTOCOL, reason)] += 1

    async def export(request: web.Request) -> web.Response:
        media = request.content_type
        reply_type = JSON if media == JSON else PROTOBUF
        if expected_auth is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected_auth):
                reject("unauthorized")
                return _error(reply_type, 401, _GRPC_UNAUTHENTICATED, "missing or wrong bearer token")
        if media not in (PROTOBUF, JSON):
            reject("content_type")
            return _error(PROTOBUF, 415, _GRPC_UNIMPLEMENTED, f"unsupported content type {media!r}; use {PROTOBUF} or {JSON}")
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", ""):
            reject("content_encoding")
            return _error(reply_type, 415, _GRPC_UNIMPLEMENTED, f"unsupported content encoding {encoding!r}")
        limit = settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            reject("too_large")
            return _error(reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, f"body larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                reject("too_large")
                return _error(reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, f"body larger than {limit} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        if encoding == "gzip":
            try:
                body = _gunzip(body, limit)
            except _TooLarge:
                reject("too_large")
                return _error(reply_type, 413, _GRPC_RESOURCE_EXHAUSTED, f"decompressed body larger than {limit} bytes")
            except zlib.error as exc:
                reject("decode")
                return _error(reply_type, 400, _GRPC_INVALID_ARGUMENT, f"invalid gzip body: {exc}")
        try:
            decoded: Decoded = decode_json(body, settings.selection) if media == JSON else decode_protobuf(body, settings.selection)
        except DecodeError as exc:
            reject("decode")
            return _error(reply_type, 400, _GRPC_INVALID_ARGUMENT, str(exc))
        response = hand_over(decoded, sink, stats, PROTOCOL)
        if response is None:
            return _error(reply_type, 503, _GRPC_UNAVAILABLE, "ragmon is overloaded; retry later",
                          {"Retry-After": str(RETRY_AFTER_SECONDS)})
        return _reply(reply_type, 200, response)

    app.router.add_post("/v1/traces", export)



async def start(
    host: str, port: int, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats,
    app: web.Application | None = None,
) -> tuple[web.AppRunner, int]:
    """Serve the receiver on ``host:port`` (0: a free port); returns the runner and bound port.

    Request bodies are not decompressed by aiohttp: the receiver does it, to enforce the size
    limit on both the compressed and the decompressed body. Pass ``app`` to serve more routes
    (e.g. ``/v1/feedback``) on the same port.
    """
    app = app or web.Application()
    add_routes(app, settings, sink, stats)
    runner = web.AppRunner(app, auto_decompress=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, int(runner.addresses[0][1])
