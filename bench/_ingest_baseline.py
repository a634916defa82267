"""The baseline server of ``bench/ingest.py``: a bare aiohttp OTLP/HTTP trace receiver.

Run as ``python bench/_ingest_baseline.py [--host 127.0.0.1] [--port 0]``. It serves
``POST /v1/traces`` and does the least any Python OTLP receiver must do with a protobuf body:
parse the ``ExportTraceServiceRequest``, then walk every resource and every span and turn
each attribute into a Python value (``WhichOneof``; arrays become tuples, key-value lists
dicts), keeping one dict per span (ids, name, times, attributes) for the duration of the
request. It then answers 200 with an empty ``ExportTraceServiceResponse``. It keeps nothing
between requests: no assembly, no scoring, no metrics. A body that does not parse gets 400.

Like ``ragmon run`` it logs ``OTLP/HTTP on HOST:PORT`` on stderr once it listens, and stops
on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF = "application/x-protobuf"
_EMPTY_RESPONSE = ExportTraceServiceResponse().SerializeToString()


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (``None`` when unset)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value
    return None


def attributes(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    """Every attribute of a span or resource, key -> Python value."""
    return {kv.key: any_value(kv.value) for kv in kvs}


def walk(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """One dict per span, with all its attributes and its resource's."""
    spans: list[dict[str, Any]] = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "trace_id": span.trace_id,
                    "span_id": span.span_id,
                    "parent_span_id": span.parent_span_id,
                    "name": span.name,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "status": span.status.code,
                    "attributes": attributes(span.attributes),
                    "events": [(e.name, attributes(e.attributes)) for e in span.events],
                    "resource": resource,
                })
    return spans


async def export(request: web.Request) -> web.Response:
    """``POST /v1/traces``: parse, walk every span's attributes, answer an empty response."""
    body = await request.read()
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        return web.Response(status=400, text=f"invalid OTLP protobuf: {exc}\n")
    walk(message)
    return web.Response(status=200, body=_EMPTY_RESPONSE, content_type=PROTOBUF)


async def serve(host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", export)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = int(runner.addresses[0][1])
    print(f"baseline: OTLP/HTTP on {host}:{bound}", file=sys.stderr, flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
