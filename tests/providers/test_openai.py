"""The ``openai`` provider against a real HTTP server on 127.0.0.1 started by each test."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memoryd.errors import EmbeddingError
from memoryd.providers.embeddings import HashProvider
from memoryd.providers.openai import OpenAIEmbeddings

DIMS = 8
REFERENCE = HashProvider(DIMS)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: Any = None  # None: embeddings of the request's input
    headers: dict[str, str] = field(default_factory=dict)
    dims: int = DIMS
    reverse: bool = False
    hang: bool = False


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]


class Server:
    """A scripted embeddings endpoint: answers come from ``script`` (the last one repeats)."""

    def __init__(self) -> None:
        self.script: list[Answer] = [Answer()]
        self.seen: list[Seen] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                assert self.path == "/v1/embeddings"
                server.seen.append(Seen(dict(self.headers), body))
                index = min(len(server.seen), len(server.script)) - 1
                answer = server.script[index]
                if answer.hang:
                    server.release.wait(30)
                    return
                payload = answer.body if answer.body is not None else embeddings(body, answer)
                data = json.dumps(payload).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def embeddings(body: dict[str, Any], answer: Answer) -> dict[str, Any]:
    source = HashProvider(answer.dims)
    items = [
        {"object": "embedding", "index": i, "embedding": [2.0 * x for x in source.embed_one(t)]}
        for i, t in enumerate(body["input"])
    ]
    if answer.reverse:
        items.reverse()
    return {"object": "list", "data": items, "model": body["model"]}


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


MakeProvider = Callable[..., OpenAIEmbeddings]


@pytest.fixture
def make(server: Server) -> MakeProvider:
    def factory(**overrides: Any) -> OpenAIEmbeddings:
        options: dict[str, Any] = {
            "base_url": server.url,
            "model": "test-embed",
            "dimensions": 0,
            "env": {},
            "batch_size": 32,
            "timeout_secs": 5.0,
            "max_retries": 3,
            "backoff_base": 0.01,
            "backoff_cap": 0.05,
        }
        options.update(overrides)
        return OpenAIEmbeddings(**options)

    return factory


@pytest.mark.anyio
async def test_seventy_inputs_go_in_three_batches_and_come_back_in_order(
    server: Server, make: MakeProvider
) -> None:
    provider = make(batch_size=32)
    texts = [f"note number {i} about topic {i % 7}" for i in range(70)]
    vectors = await provider.embed(texts)
    await provider.aclose()
    assert [len(s.body["input"]) for s in server.seen] == [32, 32, 6]
    assert vectors == [pytest.approx(REFERENCE.embed_one(t)) for t in texts]


@pytest.mark.anyio
async def test_items_are_put_back_in_the_order_of_their_index(
    server: Server, make: MakeProvider
) -> None:
    server.script = [Answer(reverse=True)]
    provider = make()
    texts = ["alpha", "beta", "gamma"]
    vectors = await provider.embed(texts)
    await provider.aclose()
    assert vectors == [pytest.approx(REFERENCE.embed_one(t)) for t in texts]


@pytest.mark.anyio
@pytest.mark.parametrize("status", [500, 503, 429])
async def test_a_server_error_twice_then_success_takes_three_requests(
    server: Server, make: MakeProvider, status: int
) -> None:
    failing = Answer(status=status, body={"error": {"message": "busy"}})
    server.script = [failing, failing, Answer()]
    provider = make()
    vectors = await provider.embed(["hello"])
    await provider.aclose()
    assert len(server.seen) == 3
    assert vectors == [pytest.approx(REFERENCE.embed_one("hello"))]


@pytest.mark.anyio
async def test_persistent_server_errors_give_up_after_max_retries(
    server: Server, make: MakeProvider
) -> None:
    server.script = [Answer(status=502, body={"error": "bad gateway upstream"})]
    provider = make(max_retries=2)
    with pytest.raises(EmbeddingError, match="HTTP 502: bad gateway upstream"):
        await provider.embed(["hello"])
    await provider.aclose()
    assert len(server.seen) == 3


@pytest.mark.anyio
async def test_a_client_error_fails_at_once_with_the_server_message(
    server: Server, make: MakeProvider
) -> None:
    message = "This model's maximum context length is 8192 tokens"
    server.script = [Answer(status=400, body={"error": {"message": message}})]
    provider = make()
    with pytest.raises(EmbeddingError, match="HTTP 400: This model's maximum context") as caught:
        await provider.embed(["hello"])
    await provider.aclose()
    assert len(server.seen) == 1
    assert caught.value.data["status"] == 400


@pytest.mark.anyio
async def test_a_vector_of_the_wrong_dimension_is_refused(
    server: Server, make: MakeProvider
) -> None:
    server.script = [Answer(dims=4)]
    provider = make(dimensions=DIMS)
    with pytest.raises(EmbeddingError, match=r"dimension 4 .*expected 8"):
        await provider.embed(["hello"])
    await provider.aclose()
    assert server.seen[0].body["dimensions"] == DIMS


@pytest.mark.anyio
async def test_the_probe_fixes_the_dimension_and_later_answers_must_match(
    server: Server, make: MakeProvider
) -> None:
    provider = make(dimensions=0)
    assert not provider.dims_known
    assert provider.model_id == "openai/test-embed"
    with pytest.raises(EmbeddingError, match="not known yet"):
        _ = provider.dims
    assert await provider.probe() == DIMS
    assert (provider.dims, provider.model_id) == (DIMS, "openai/test-embed@8")
    assert "dimensions" not in server.seen[0].body
    server.script = [Answer(dims=16)]
    with pytest.raises(EmbeddingError, match="dimension 16"):
        await provider.embed(["later"])
    await provider.aclose()


@pytest.mark.anyio
async def test_a_wrong_count_of_vectors_is_refused(server: Server, make: MakeProvider) -> None:
    server.script = [Answer(body={"data": [{"index": 0, "embedding": [1.0] * DIMS}]})]
    provider = make()
    with pytest.raises(EmbeddingError, match="1 vectors for 2 inputs"):
        await provider.embed(["one", "two"])
    await provider.aclose()


@pytest.mark.anyio
async def test_a_hung_server_times_out_without_retrying(server: Server, make: MakeProvider) -> None:
    server.script = [Answer(hang=True)]
    provider = make(timeout_secs=0.5)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"did not answer within 0\.5 s"):
        await provider.embed(["hello"])
    elapsed = time.monotonic() - started
    await provider.aclose()
    assert elapsed < 0.5 + 1.0, "hang guard: the timeout did not fire"
    assert len(server.seen) == 1


@pytest.mark.anyio
async def test_an_unreachable_server_is_retried_then_reported(make: MakeProvider) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = make(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2)
    with pytest.raises(EmbeddingError, match=r"cannot be reached: .*gave up after 3 attempts"):
        await provider.embed(["hello"])
    await provider.aclose()
    assert provider.requests == 3


@pytest.mark.anyio
async def test_the_api_key_is_sent_only_when_its_variable_is_set_and_never_shown(
    server: Server, make: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = make(env={}, api_key_env="MEMORYD_TEST_KEY")
    await without.embed(["hello"])
    await without.aclose()
    assert "Authorization" not in server.seen[0].headers

    monkeypatch.setenv("MEMORYD_TEST_KEY", "sk-secret-123")
    with_key = OpenAIEmbeddings(
        base_url=server.url, model="test-embed", api_key_env="MEMORYD_TEST_KEY"
    )
    await with_key.embed(["hello"])
    assert server.seen[1].headers["Authorization"] == "Bearer sk-secret-123"

    server.script = [
        Answer(),
        Answer(),
        Answer(status=401, body={"error": "bad key sk-secret-123"}),
    ]
    with pytest.raises(EmbeddingError) as caught:
        await with_key.embed(["hello"])
    await with_key.aclose()
    assert "sk-secret-123" not in str(caught.value)
    assert "bad key ***" in str(caught.value)


@pytest.mark.anyio
async def test_a_slow_server_gets_batches_that_fit_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.fake_embeddings import EmbeddingServer

    # 20 ms per text: a batch of 32 needs 0.64 s, 16 need 0.32 s; the timeout is 0.3 s
    with EmbeddingServer(secs_per_text=0.02) as slow:
        provider = OpenAIEmbeddings(
            base_url=slow.base_url, model="mini", env={}, batch_size=32, timeout_secs=0.3
        )
        texts = [f"note {i}" for i in range(64)]
        started = time.monotonic()
        vectors = await provider.embed(texts)
        elapsed = time.monotonic() - started
        again = await provider.embed(texts[:20])  # later calls start at the size that fits
        await provider.aclose()
    assert len(vectors) == 64
    assert provider.timeouts == 2  # 32 texts, then 16, timed out; 8 fit
    assert provider.fit <= 7  # what takes at most half the timeout at the measured rate
    assert provider.advice is not None
    assert "embedding.timeout_secs" in provider.advice and "embedding.batch_size" in provider.advice
    # two timeouts (0.6 s) plus the work (64 × 20 ms), not one failure after another
    assert elapsed < 5.0, elapsed
    assert len(again) == 20 and provider.timeouts == 2


@pytest.mark.anyio
async def test_one_text_that_does_not_fit_the_timeout_fails_saying_what_to_change() -> None:
    from tests.support.fake_embeddings import EmbeddingServer

    with EmbeddingServer(secs_per_text=1.0) as slow:
        provider = OpenAIEmbeddings(
            base_url=slow.base_url, model="mini", env={}, batch_size=4, timeout_secs=0.2
        )
        with pytest.raises(EmbeddingError, match=r"raise embedding\.timeout_secs"):
            await provider.embed(["a", "b"])
        await provider.aclose()
    assert provider.timeouts == 2  # two texts, then one
