"""What a body decodes to is bounded as it is decoded (issue 23: a body of ~560k minimal spans
decoded to about 12 times its bytes, and an empty queue took the whole batch). Each decoder
stops once the spans it keeps take more than ``max_bytes`` (``Span.size``, which counts every
kept byte): ``DecodedTooLargeError``; the receivers answer 413 / RESOURCE_EXHAUSTED, counted
``too_large``, before memory goes past a turn's ``slot_bytes``."""

from __future__ import annotations

import json
from collections.abc import Callable

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from net_helpers import wait_until
from server_helpers import LoopThread, post
from test_receiver_grpc import METHOD
from test_receiver_grpc import _start as start_grpc
from test_receiver_http import JS, PB, SELECTION
from test_receiver_http import _start as start_http
from test_receiver_http import loop  # noqa: F401  (the fixture)

from ragmon.errors import DecodedTooLargeError
from ragmon.otlp.decode import Decoded, SpanSelection, decode_json, decode_protobuf, python_decode_protobuf
from ragmon.receivers.ingest import IngestGate

DECODERS: dict[str, Callable[[bytes, SpanSelection, int], Decoded]] = {
    "protobuf (running)": decode_protobuf, "protobuf (python)": python_decode_protobuf,
}


def _minimal(spans: int) -> ExportTraceServiceRequest:
    """``spans`` spans of one trace with ids and a one-letter name: the least bytes a span can be."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(spans):
        span = scope.spans.add()
        span.trace_id = bytes(15) + b"\x01"
        span.span_id = (i + 1).to_bytes(8, "big")
        span.name = "x"
    return request


def _as_json(request: ExportTraceServiceRequest) -> bytes:
    spans = [{"traceId": s.trace_id.hex(), "spanId": s.span_id.hex(), "name": s.name}
             for s in request.resource_spans[0].scope_spans[0].spans]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_decoder_stops_once_the_spans_take_more_than_max_bytes(decoder: str) -> None:
    body = _minimal(1000).SerializeToString()
    decode = DECODERS[decoder]
    whole = decode(body, SELECTION, 10**12)
    sizes = [s.size for s in whole.spans]
    assert len(sizes) == 1000 and sum(sizes) > 20 * len(body)  # tiny on the wire, not in memory
    assert decode(body, SELECTION, sum(sizes)).spans == whole.spans  # exactly enough: decoded
    with pytest.raises(DecodedTooLargeError) as info:
        decode(body, SELECTION, sum(sizes) - 1)
    assert info.value.max_bytes == sum(sizes) - 1
    assert str(info.value) == f"the spans of this body take more than {sum(sizes) - 1} bytes once decoded; send smaller batches"


def test_the_json_decoder_stops_likewise() -> None:
    body = _as_json(_minimal(300))
    whole = decode_json(body, SELECTION, 10**12)
    total = sum(s.size for s in whole.spans)
    assert len(decode_json(body, SELECTION, total).spans) == 300
    with pytest.raises(DecodedTooLargeError):
        decode_json(body, SELECTION, total - 1)


def test_an_http_body_that_decodes_past_a_turn_gets_413(loop: LoopThread) -> None:  # noqa: F811
    body = _minimal(5000).SerializeToString()
    total = sum(s.size for s in decode_protobuf(body, SELECTION, 10**12).spans)
    for receiver in start_http(loop, gate=IngestGate(slot_bytes=total - 1)):
        code, _, answer = post(receiver.url, body, PB)
        assert code == 413 and "once decoded; send smaller batches" in answer.decode(errors="replace")
        assert receiver.stats.requests_rejected[("http", "too_large")] == 1 and not receiver.sink.spans
        assert receiver.server.budget.used == 0
        code, _, answer = post(receiver.url, _as_json(_minimal(2000)), JS)
        assert code == 413 and receiver.stats.requests_rejected[("http", "too_large")] == 2
    for receiver in start_http(loop, gate=IngestGate(slot_bytes=total)):
        assert post(receiver.url, body, PB)[0] == 200 and len(receiver.sink.spans) == 5000


def test_a_grpc_message_that_decodes_past_a_turn_gets_resource_exhausted(loop: LoopThread) -> None:  # noqa: F811
    body = _minimal(5000).SerializeToString()
    total = sum(s.size for s in decode_protobuf(body, SELECTION, 10**12).spans)
    for receiver in start_grpc(loop, gate=IngestGate(slot_bytes=total - 1)):
        with grpc.insecure_channel(receiver.url) as channel:
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(METHOD)(body, timeout=10)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert receiver.stats.requests_rejected[("grpc", "too_large")] == 1 and not receiver.sink.spans
        wait_until(lambda: receiver.server.budget.used == 0)  # given back once the handler ends
