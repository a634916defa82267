"""A minimal OpenAI-compatible HTTP server for instrumentation tests (not the judge's scripted
server, ``judge_server.py``): each POST is answered with the JSON that ``reply`` builds from the
path and the request body."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``(path, request JSON) -> reply JSON``."""


@contextlib.contextmanager
def fake_openai(reply: Reply, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Serve ``reply`` on 127.0.0.1 (proxies off for it) and yield the ``/v1`` base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            body = json.dumps(reply(self.path, request)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
