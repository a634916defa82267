"""OTLP/gRPC trace receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

The method takes raw bytes so a request is parsed once, by ``ragmon.otlp.decode``. Status codes as
the OTLP specification says: INVALID_ARGUMENT for an undecodable request, UNAUTHENTICATED for
a bad token, RESOURCE_EXHAUSTED past the size limit (enforced by gRPC), UNAVAILABLE with
``RetryInfo`` when the in-flight byte budget has no room for another message, every decode
turn is taken, the pipeline is full or ragmon is shutting down; DEADLINE_EXCEEDED when a
message takes longer than ``body_timeout`` to arrive, or when it has not arrived after
``SLOW_SENDER_SECONDS`` and another request needs its bytes; success carries
``partial_success`` when some spans were rejected. gzip request compression is handled by gRPC.

Memory: gRPC buffers a message whole before the handler sees it, so its size is unknown until
then. The method is served as client-streaming (one message on the wire, as a unary call sends)
so the handler decides before the message is read: it reserves ``max_body_bytes`` in the
in-flight byte budget shared with OTLP/HTTP (``ByteBudget``) or refuses the export at once, then
charges the message's real size once it is whole. Decoding takes a turn of the ingest gate
and at most its ``slot_bytes`` (RESOURCE_EXHAUSTED past it, counted ``too_large``). At most ``concurrent_rpcs`` full-size messages
are so being read at once; a stream that declares an export and sends nothing loses its
reservation after ``SLOW_SENDER_SECONDS`` as soon as another request needs it, so it cannot
hold ingest for others. gRPC's own limits: connections
(``grpc.max_allowed_incoming_connections``, enforced before the handshake), a handshake
timeout (``header_timeout``), an idle-connection timeout, and a backstop of
``BACKSTOP`` × the RPC cap that gRPC answers RESOURCE_EXHAUSTED itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from ragmon.errors import DecodedTooLargeError, DecodeError
from ragmon.model import Offer
from ragmon.otlp.decode import decode_protobuf
from ragmon.net.auth import bearer_token_matches
from ragmon.receivers.ingest import (
    IngestGate,
    IngestStats,
    ReceiverSettings,
    SpanSink,
    decode_body,
    hand_over,
)
from ragmon.net.listeners import SLOW_SENDER_SECONDS, ByteBudget, ListenerLimits, Reservation
from ragmon.receivers.otlp_http import RETRY_AFTER_SECONDS
from ragmon.net.ratelog import RateLimitedLog

__all__ = ["PROTOCOL", "SERVICE", "concurrent_rpcs", "server_options", "start"]

PROTOCOL = "grpc"
SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


BACKSTOP = 16
"""gRPC refuses RPCs itself (RESOURCE_EXHAUSTED, before ragmon sees them) past this many times
``concurrent_rpcs``: those refused by ragmon cost a few hundred bytes each until answered."""


def concurrent_rpcs(settings: ReceiverSettings, limits: ListenerLimits) -> int:
    """Full-size messages being read at once at most: as many as ``max_inflight_bytes`` holds
    (at least one; ragmon answers UNAVAILABLE + ``RetryInfo`` past it). Smaller messages turn
    over faster; lower ``max_body_bytes`` to read more at once."""
    return max(1, limits.max_inflight_bytes // max(1, settings.max_body_bytes))


def server_options(settings: ReceiverSettings, limits: ListenerLimits) -> list[tuple[str, int]]:
    """The gRPC server's channel options: message size, connection cap, timeouts."""
    return [
        ("grpc.max_receive_message_length", settings.max_body_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.server_handshake_timeout_ms", max(1, round(limits.header_timeout * 1000))),
        ("grpc.max_connection_idle_ms", max(1, round(limits.idle_timeout * 1000))),
        ("grpc.http2.bdp_probe", 0),
    ]


def _retry_metadata(message: str) -> tuple[tuple[str, bytes], ...]:
    retry = RetryInfo(retry_delay=Duration(seconds=RETRY_AFTER_SECONDS))
    status = Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message=message)
    status.details.add().Pack(retry)
    return (
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
        ("grpc-status-details-bin", status.SerializeToString()),
    )


def _handler(
    settings: ReceiverSettings, sink: SpanSink, stats: IngestStats, log: RateLimitedLog, gate: IngestGate,
    limits: ListenerLimits, budget: ByteBudget,
) -> grpc.GenericRpcHandler:
    def reject(reason: str, context: grpc.aio.ServicerContext[Any, Any], detail: str) -> None:
        stats.requests_rejected[(PROTOCOL, reason)] += 1
        log.warn(f"OTLP/gRPC {reason}", context.peer(), detail)

    async def unavailable(context: grpc.aio.ServicerContext[Any, Any], message: str) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message, _retry_metadata(message))

    async def read_one(context: grpc.aio.ServicerContext[Any, Any]) -> bytes | None:
        # context.read(), not the request iterator: the iterator reads ahead (RSS 1.1 GB where
        # this keeps 0.45 GB under bench/overload.py --protocol grpc --concurrency 128)
        body = await context.read()
        return None if body is grpc.aio.EOF else body

    async def export(_requests: object, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if settings.token:
            given = dict(context.invocation_metadata() or ()).get("authorization")
            if not bearer_token_matches(given, settings.token):
                reject("unauthorized", context, "missing or wrong bearer token")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        loop = asyncio.get_running_loop()
        reservation: Reservation | None = None
        body: bytes | None = None
        try:
            try:
                async with asyncio.timeout(limits.body_timeout) as deadline:
                    reservation = budget.reserve(settings.max_body_bytes, lambda: deadline.reschedule(loop.time()))
                    if reservation is None:
                        reject("inflight_bytes", context, "UNAVAILABLE, the in-flight byte budget is full")
                        await unavailable(context, "ragmon is reading too many exports; retry later")
                        return b""  # not reached: abort raises
                    body = await read_one(context)
                    # at once (no await): the message's own size replaces the reservation
                    settled = body is None or budget.settle(reservation, len(body))
            except TimeoutError:
                if reservation is not None and reservation.cut:
                    reject("slow", context, f"no message after {SLOW_SENDER_SECONDS:g} s while its bytes were needed")
                    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the message arrived too slowly; retry")
                reject("timeout", context, f"the message took longer than {limits.body_timeout:g} s")
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the message arrived too slowly")
            if body is None:
                reject("decode", context, "no message")
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no message")
                return b""  # not reached: abort raises
            message, body = body, None  # an abort's traceback holds this frame until collected: not the body
            if not settled:
                message = b""
                reject("inflight_bytes", context, "UNAVAILABLE, the in-flight byte budget is full")
                await unavailable(context, "ragmon is reading too many exports; retry later")
            if not await gate.enter():
                message = b""
                reject("busy", context, "UNAVAILABLE, every ingest turn is taken")
                await unavailable(context, "ragmon is busy; retry later")
            failed: tuple[grpc.StatusCode, str, str] | None = None
            try:
                decoded = await decode_body(decode_protobuf, message, settings.selection, gate.slot_bytes)
            except DecodedTooLargeError as exc:
                failed = (grpc.StatusCode.RESOURCE_EXHAUSTED, "too_large", str(exc))
            except DecodeError as exc:
                failed = (grpc.StatusCode.INVALID_ARGUMENT, "decode", str(exc))
            finally:
                gate.leave()
            message = b""
            if failed is not None:  # out of the except block: the abort carries no decoder frames
                code, reason, detail = failed
                reject(reason, context, detail)
                await context.abort(code, detail)
        finally:
            if reservation is not None:
                budget.release(reservation)
        response = hand_over(decoded, sink, stats, PROTOCOL)
        if isinstance(response, Offer):
            refusal = response.value
            log.warn(f"OTLP/gRPC {refusal}", context.peer(), "UNAVAILABLE, spans refused; the exporter retries")
            await unavailable(context, f"ragmon is {refusal.replace('_', ' ')}; retry later")
            return b""  # not reached: abort raises
        return bytes(response.SerializeToString())

    method = grpc.stream_unary_rpc_method_handler(export)  # bytes in, bytes out; see the module's docstring
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": method})


async def start(
    host: str, port: int, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats,
    *, limits: ListenerLimits | None = None, log: RateLimitedLog | None = None, gate: IngestGate | None = None,
    budget: ByteBudget | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Serve the receiver on ``host:port`` (0: a free port) behind ``limits``; returns the
    server and bound port. ``budget``: the in-flight byte budget shared with OTLP/HTTP
    (default: the receiver's own, of ``limits.max_inflight_bytes``)."""
    limits = limits or ListenerLimits()
    server = grpc.aio.server(
        options=server_options(settings, limits),
        maximum_concurrent_rpcs=BACKSTOP * concurrent_rpcs(settings, limits),
    )
    log = log or RateLimitedLog(logging.getLogger("ragmon"))
    budget = budget or ByteBudget(limits.max_inflight_bytes)
    server.add_generic_rpc_handlers((_handler(settings, sink, stats, log, gate or IngestGate(), limits, budget),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:  # grpcio reports a failed bind by raising, older releases by returning 0
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind the OTLP/gRPC receiver to {address}")
    await server.start()
    return server, bound
