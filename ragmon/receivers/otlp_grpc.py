"""OTLP/gRPC trace receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

The method takes raw bytes so a request is parsed once, by ``ragmon.decode``. Status codes as
the OTLP specification says: INVALID_ARGUMENT for an undecodable request, UNAUTHENTICATED for
a bad token, RESOURCE_EXHAUSTED past the size limit (enforced by gRPC), UNAVAILABLE with
``RetryInfo`` when the pipeline is full; success carries ``partial_success`` when some spans
were rejected. gzip request compression is handled by gRPC.
"""

from __future__ import annotations

import hmac
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from ragmon.decode import DecodeError, decode_protobuf
from ragmon.receivers.ingest import IngestStats, ReceiverSettings, SpanSink, hand_over
from ragmon.receivers.otlp_http import RETRY_AFTER_SECONDS

__all__ = ["PROTOCOL", "SERVICE", "start"]

PROTOCOL = "grpc"
SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def _retry_metadata() -> tuple[tuple[str, bytes], ...]:
    retry = RetryInfo(retry_delay=Duration(seconds=RETRY_AFTER_SECONDS))
    status = Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message="ragmon is overloaded; retry later")
    status.details.add().Pack(retry)
    return (
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
        ("grpc-status-details-bin", status.SerializeToString()),
    )


def _handler(settings: ReceiverSettings, sink: SpanSink, stats: IngestStats) -> grpc.GenericRpcHandler:
    expected = f"Bearer {settings.token}".encode() if settings.token else None
    retry_metadata = _retry_metadata()

    def reject(reason: str) -> None:
        stats.requests_rejected[(PROTOCOL, reason)] += 1

    async def export(body: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if expected is not None:
            given = dict(context.invocation_metadata() or ()).get("authorization", "")
            given_bytes = given.encode() if isinstance(given, str) else given
            if not hmac.compare_digest(given_bytes, expected):
                reject("unauthorized")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            decoded = decode_protobuf(body, settings.selection)
        except DecodeError as exc:
            reject("decode")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        response = hand_over(decoded, sink, stats, PROTOCOL)
        if response is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "ragmon is overloaded; retry later", retry_metadata)
            return b""  # not reached: abort raises
        return bytes(response.SerializeToString())

    method = grpc.unary_unary_rpc_method_handler(export)  # bytes in, bytes out
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": method})


async def start(
    host: str, port: int, settings: ReceiverSettings, sink: SpanSink, stats: IngestStats
) -> tuple[grpc.aio.Server, int]:
    """Serve the receiver on ``host:port`` (0: a free port); returns the server and bound port."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers((_handler(settings, sink, stats),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    bound = server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot bind the OTLP/gRPC receiver to {address}")
    await server.start()
    return server, bound
