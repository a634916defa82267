"""OTLP/gRPC trace receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

The method takes raw bytes so a request is parsed once, by ``ragmon.decode``. Status codes as
the OTLP specification says: INVALID_ARGUMENT for an undecodable request, UNAUTHENTICATED for
a bad token, RESOURCE_EXHAUSTED past the size limit (enforced by gRPC), UNAVAILABLE with
``RetryInfo`` when the pipeline is full or ragmon is shutting down; success carries
``partial_success`` when some spans were rejected. gzip request compression is handled by gRPC.

Limits are gRPC's own: connections (``grpc.max_allowed_incoming_connections``, enforced before
the handshake), a handshake timeout (``header_timeout``), an idle-connection timeout and a cap
on RPCs in progress (messages being read count), from ``ListenerLimits``.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from ragmon.auth import bearer_token_matches
from ragmon.decode import DecodeError, decode_protobuf
from ragmon.listeners import ListenerLimits
from ragmon.ratelog import RateLimitedLog
from ragmon.receivers.ingest import IngestGate, IngestStats, ReceiverSettings, SpanSink, decode_body, hand_over
from ragmon.receivers.otlp_http import RETRY_AFTER_SECONDS

__all__ = ["PROTOCOL", "SERVICE", "concurrent_rpcs", "server_options", "start"]

PROTOCOL = "grpc"
SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


MIN_CONCURRENT_RPCS = 64


def concurrent_rpcs(settings: ReceiverSettings, limits: ListenerLimits) -> int:
    """RPCs in progress at once (gRPC answers RESOURCE_EXHAUSTED past it): enough full-size
    messages to fill ``max_inflight_bytes``, and never fewer than ``MIN_CONCURRENT_RPCS``."""
    return max(MIN_CONCURRENT_RPCS, limits.max_inflight_bytes // max(1, settings.max_body_bytes))


def server_options(settings: ReceiverSettings, limits: ListenerLimits) -> list[tuple[str, int]]:
    """The gRPC server's channel options: message size, connection cap, timeouts."""
    return [
        ("grpc.max_receive_message_length", settings.max_body_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.server_handshake_timeout_ms", max(1, round(limits.header_timeout * 1000))),
        ("grpc.max_connection_idle_ms", max(1, round(limits.idle_timeout * 1000))),
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
) -> grpc.GenericRpcHandler:
    def reject(reason: str, context: grpc.aio.ServicerContext[Any, Any], detail: str) -> None:
        stats.requests_rejected[(PROTOCOL, reason)] += 1
        log.warn(f"OTLP/gRPC {reason}", context.peer(), detail)

    async def export(body: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if settings.token:
            given = dict(context.invocation_metadata() or ()).get("authorization")
            if not bearer_token_matches(given, settings.token):
                reject("unauthorized", context, "missing or wrong bearer token")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        if not await gate.enter():
            reject("busy", context, "UNAVAILABLE, every ingest turn is taken")
            message = "ragmon is busy; retry later"
            await context.abort(grpc.StatusCode.UNAVAILABLE, message, _retry_metadata(message))
        try:
            decoded = await decode_body(decode_protobuf, body, settings.selection)
        except DecodeError as exc:
            reject("decode", context, str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            gate.leave()
        response = hand_over(decoded, sink, stats, PROTOCOL)
        if response is None:
            message = f"ragmon is {sink.refusal.replace('_', ' ')}; retry later"
            log.warn(f"OTLP/gRPC {sink.refusal}", context.peer(), "UNAVAILABLE, spans refused; the exporter retries")
            await context.abort(grpc.StatusCode.UNAVAILABLE, message, _retry_metadata(message))
            return b""  # not reached: abort raises
        return bytes(response.SerializeToString())

    method = grpc.unary_unary_rpc_method_handler(export)  # bytes in, bytes out
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": method})


async def start(
    host: str, port: int, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats,
    *, limits: ListenerLimits | None = None, log: RateLimitedLog | None = None, gate: IngestGate | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Serve the receiver on ``host:port`` (0: a free port) behind ``limits``; returns the
    server and bound port."""
    limits = limits or ListenerLimits()
    server = grpc.aio.server(
        options=server_options(settings, limits),
        maximum_concurrent_rpcs=concurrent_rpcs(settings, limits),
    )
    log = log or RateLimitedLog(logging.getLogger("ragmon"))
    server.add_generic_rpc_handlers((_handler(settings, sink, stats, log, gate or IngestGate()),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:  # grpcio reports a failed bind by raising, older releases by returning 0
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind the OTLP/gRPC receiver to {address}")
    await server.start()
    return server, bound
