"""Chat model clients: the OpenAI-compatible one against a real HTTP server on 127.0.0.1,
the fake one, and choosing the model from ``[llm]`` (SPEC §7)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memoryd.core.config import Config, LlmConfig
from memoryd.errors import ConfigError, ModelError
from memoryd.providers.llm import ChatModel, FakeChatModel, OpenAIChatModel, make_chat_model

KEY = "sk-test-secret-0123456789"


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict → JSON; str → raw text
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def answer(text: str | None) -> Reply:
    return Reply(
        body={"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    )


class ChatServer:
    """A scripted chat completions server: replies in order, records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                reply = server.replies.pop(0) if server.replies else Reply(500, "no reply queued")
                if reply.delay:
                    server.release.wait(reply.delay)
                payload = reply.body
                data = (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def model(self, **kwargs: Any) -> OpenAIChatModel:
        options: dict[str, Any] = {
            "api_key_env": "MEMORYD_TEST_LLM_KEY",
            "timeout_secs": 5.0,
            "max_retries": 2,
            "backoff_base": 0.01,
            "backoff_cap": 0.05,
        }
        options.update(kwargs)
        return OpenAIChatModel(self.base_url, "test-model", **options)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    srv.thread.start()
    yield srv
    srv.release.set()
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=5)


@pytest.mark.anyio
async def test_a_successful_call_returns_the_content(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_TEST_LLM_KEY", KEY)
    server.replies = [answer("## Build\n\nmake")]
    model = server.model()
    assert isinstance(model, ChatModel)
    assert model.model_id == "test-model"
    assert await model.complete("the system text", "the user text") == "## Build\n\nmake"
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["body"] == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "the system text"},
            {"role": "user", "content": "the user text"},
        ],
    }


@pytest.mark.anyio
async def test_no_key_in_the_environment_sends_no_authorization(server: ChatServer) -> None:
    server.replies = [answer("ok")]
    assert await server.model().complete("s", "u") == "ok"
    assert "Authorization" not in server.requests[0]["headers"]


@pytest.mark.anyio
async def test_500_twice_then_success_is_retried(server: ChatServer) -> None:
    server.replies = [Reply(500, "boom"), Reply(503, "busy"), answer("third time")]
    assert await server.model(max_retries=2).complete("s", "u") == "third time"
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_429_is_retried(server: ChatServer) -> None:
    server.replies = [Reply(429, "slow down", headers={"Retry-After": "0"}), answer("ok")]
    assert await server.model().complete("s", "u") == "ok"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_retries_give_up_after_max_retries(server: ChatServer) -> None:
    server.replies = [Reply(502, "bad gateway")] * 5
    with pytest.raises(ModelError, match=r"HTTP 502: bad gateway \(gave up after 2 attempts\)"):
        await server.model(max_retries=1).complete("s", "u")
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_400_fails_at_once_and_never_shows_the_key(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_TEST_LLM_KEY", KEY)
    server.replies = [Reply(400, {"error": f"bad request; you sent key {KEY}"}), answer("never")]
    with pytest.raises(ModelError) as caught:
        await server.model().complete("s", "u")
    assert len(server.requests) == 1
    message = str(caught.value)
    assert "HTTP 400" in message and "bad request" in message and "test-model" in message
    assert KEY not in message
    assert KEY not in json.dumps(caught.value.to_dict())
    assert caught.value.to_dict()["code"] == "model_error"


@pytest.mark.anyio
async def test_a_slow_server_times_out_without_retrying(server: ChatServer) -> None:
    server.replies = [Reply(delay=10.0, body={}), Reply(delay=10.0, body={})]
    with pytest.raises(ModelError, match=r"test-model.* did not answer within 0.2 s"):
        await server.model(timeout_secs=0.2, max_retries=1).complete("s", "u")
    assert len(server.requests) == 1  # the deadline covers the whole call, retries included


@pytest.mark.anyio
async def test_a_refused_connection_is_a_model_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_base=0.01)
    with pytest.raises(ModelError, match=r"ConnectError.*\(gave up after 2 attempts\)"):
        await model.complete("s", "u")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        (Reply(200, "not json"), "invalid JSON"),
        (Reply(200, {"choices": []}), "no choices"),
        (Reply(200, {"choices": [{"message": {"content": 5}}]}), "answered a int"),
    ],
)
async def test_unusable_answers_fail_without_retry(
    server: ChatServer, reply: Reply, fragment: str
) -> None:
    server.replies = [reply, answer("never")]
    with pytest.raises(ModelError, match=fragment):
        await server.model().complete("s", "u")
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_content_parts_and_null_content(server: ChatServer) -> None:
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "## A"}, {"x": 1}]}}]}
    server.replies = [Reply(200, parts), answer(None)]
    model = server.model()
    assert await model.complete("s", "u") == "## A"
    assert await model.complete("s", "u") == ""


def test_make_chat_model_needs_base_url_and_model() -> None:
    def config(**llm: Any) -> Config:
        return dataclasses.replace(Config(), llm=LlmConfig(**llm))

    assert make_chat_model(Config()) is None
    assert make_chat_model(config(base_url="http://localhost:11434/v1")) is None
    assert make_chat_model(config(model="llama3")) is None
    model = make_chat_model(
        config(base_url="http://localhost:11434/v1/", model="llama3", timeout_secs=7.0)
    )
    assert isinstance(model, OpenAIChatModel)
    assert model.endpoint.url == "http://localhost:11434/v1/chat/completions"
    assert model.model_id == "llama3"
    assert model.endpoint.timeout_secs == 7.0
    assert model.endpoint.retry.max_retries == 2
    with pytest.raises(ConfigError, match=r"llm.base_url") as caught:
        make_chat_model(config(base_url="localhost:11434", model="m"))
    assert caught.value.key == "llm.base_url"


@pytest.mark.anyio
async def test_the_fake_model_answers_in_order_and_records_prompts() -> None:
    model = FakeChatModel(["first", ModelError("down")])
    model.queue("third")
    assert await model.complete("s1", "u1") == "first"
    with pytest.raises(ModelError, match="down"):
        await model.complete("s2", "u2")
    assert await model.complete("s3", "u3") == "third"
    with pytest.raises(ModelError, match="no queued answer"):
        await model.complete("s4", "u4")
    assert [p.user for p in model.prompts] == ["u1", "u2", "u3", "u4"]
    assert model.calls == 4
