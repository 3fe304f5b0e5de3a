"""A real OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1, for tests (no network).

``with EmbeddingServer() as server:`` serves on a free port; point memoryd at it with
``[embedding] provider = "openai"``, ``base_url = server.base_url``, ``model = "mini"``.
Every text gets a 16-d vector (deterministic, from its hash); ``hang=True`` makes each request
wait (until the server stops) so a client's timeout can be tested, ``secs_per_text=S`` makes a
request of N texts take N × S seconds (a small model on a slow CPU); :attr:`requests` counts
requests and :attr:`texts` the texts embedded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIMS = 16


def vector(text: str) -> list[float]:
    """A deterministic vector of :data:`DIMS` dimensions (different texts: far apart)."""
    digest = hashlib.blake2b(text.encode(), digest_size=DIMS).digest()
    return [byte - 127.5 for byte in digest]


class EmbeddingServer:
    """A loopback `/v1/embeddings` endpoint answering 3-d vectors (or hanging on request)."""

    def __init__(self, *, hang: bool = False, secs_per_text: float = 0.0) -> None:
        self.hang = hang
        self.secs_per_text = secs_per_text  # a slow server: this long per text of a request
        self.requests = 0
        self.texts = 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                server.texts += len(body["input"])
                if server.hang:
                    server.release.wait(10)
                if server.secs_per_text:
                    server.release.wait(server.secs_per_text * len(body["input"]))
                data = [
                    {"index": i, "embedding": vector(text)} for i, text in enumerate(body["input"])
                ]
                payload = json.dumps({"data": data}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> EmbeddingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
