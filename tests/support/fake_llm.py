"""A real OpenAI-compatible chat completions server on 127.0.0.1, for tests (no network).

memoryd talks to it exactly as to a real endpoint — HTTP over TCP, ``POST
/v1/chat/completions`` — so a daemon (in this process or a child process) is pointed at it
with ``[llm] base_url = "http://127.0.0.1:<port>/v1"``, ``model = "fake"``
(:meth:`FakeLLM.config_toml`) or the equivalent ``MEMORYD_LLM_*`` variables
(:meth:`FakeLLM.env`).

- **Scripted answers**: a queue (:meth:`FakeLLM.queue`), consumed in order; when it is empty,
  ``respond(prompt)`` (a function of the prompt) answers; with neither, the server answers
  HTTP 400 (not retried: the daemon sees a model error at once). An answer is a string (the
  completion's content) or a :class:`Reply` (any status and body: 500s, garbage, …).
- **Hold**: while :meth:`FakeLLM.hold` is on, every call waits (up to ``hold_timeout``)
  until :meth:`FakeLLM.release` — so a test can act, or SIGKILL the daemon, while a model
  call is in flight; :meth:`FakeLLM.wait_held` waits until that many calls are waiting.
- **Capture**: :attr:`FakeLLM.requests` counts calls, :attr:`FakeLLM.prompts` keeps each
  call's system and user text and arrival time.

``with FakeLLM(...) as llm:`` starts it on a free port and stops it (releasing held calls).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

MODEL = "fake"
DREAM_MARK = "long-term memory of one software project"  # in the dream system prompt only


@dataclass(frozen=True)
class Prompt:
    """One chat call as the server received it."""

    system: str
    user: str
    at: float
    """``time.monotonic()`` on arrival."""

    @property
    def kind(self) -> Literal["dream", "flush"]:
        """Which memoryd prompt this is (the dream and flush system prompts differ)."""
        return "dream" if DREAM_MARK in self.system else "flush"


@dataclass(frozen=True)
class Reply:
    """A scripted HTTP answer: ``status`` and ``body`` (a dict is sent as JSON)."""

    status: int = 200
    body: str | dict[str, Any] = field(default_factory=dict)


Answer = str | Reply
Responder = Callable[[Prompt], Answer]


def completion(content: str) -> dict[str, Any]:
    """An OpenAI chat completion body answering ``content``."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


class FakeLLM:
    """The fake chat completions server (see the module docstring)."""

    def __init__(
        self,
        answers: Iterable[Answer] = (),
        *,
        respond: Responder | None = None,
        hold_timeout: float = 30.0,
    ) -> None:
        self.respond = respond
        self.hold_timeout = hold_timeout
        self._answers: deque[Answer] = deque(answers)
        self._prompts: list[Prompt] = []
        self._held = 0
        self._holding = False
        self._released = threading.Event()
        self._cond = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life

    def start(self) -> FakeLLM:
        server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the server first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def config_toml(self, *, max_retries: int = 0, timeout_secs: float = 30.0) -> str:
        """The ``[llm]`` section pointing a daemon at this server."""
        return (
            f'[llm]\nbase_url = "{self.base_url}"\nmodel = "{MODEL}"\n'
            f"max_retries = {max_retries}\ntimeout_secs = {timeout_secs}\n"
        )

    def env(self) -> dict[str, str]:
        """The ``MEMORYD_LLM_*`` variables pointing a daemon at this server."""
        return {
            "MEMORYD_LLM_BASE_URL": self.base_url,
            "MEMORYD_LLM_MODEL": MODEL,
            "MEMORYD_LLM_MAX_RETRIES": "0",
        }

    # ------------------------------------------------------------------ script

    def queue(self, *answers: Answer) -> None:
        with self._cond:
            self._answers.extend(answers)

    @property
    def pending_answers(self) -> int:
        with self._cond:
            return len(self._answers)

    def hold(self) -> None:
        """Keep every call from now on waiting until :meth:`release`."""
        with self._cond:
            self._holding = True
            self._released.clear()

    def release(self) -> None:
        with self._cond:
            self._holding = False
            self._released.set()

    @contextmanager
    def holding(self) -> Iterator[FakeLLM]:
        self.hold()
        try:
            yield self
        finally:
            self.release()

    # ------------------------------------------------------------------ capture

    @property
    def requests(self) -> int:
        with self._cond:
            return len(self._prompts)

    @property
    def prompts(self) -> list[Prompt]:
        with self._cond:
            return list(self._prompts)

    def of_kind(self, kind: str) -> list[Prompt]:
        return [p for p in self.prompts if p.kind == kind]

    @property
    def held(self) -> int:
        """How many calls are waiting for :meth:`release` now."""
        with self._cond:
            return self._held

    def wait_for_requests(self, count: int, within: float = 10.0) -> list[Prompt]:
        """Wait until at least ``count`` calls arrived; their prompts (fails after ``within``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._prompts) >= count, within):
                raise AssertionError(
                    f"the fake model got {len(self._prompts)} call(s), not {count}, "
                    f"within {within}s"
                )
            return list(self._prompts)

    def wait_held(self, count: int = 1, within: float = 10.0) -> None:
        """Wait until ``count`` calls are held (fails after ``within``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._held >= count, within):
                raise AssertionError(f"{self._held} call(s) held, not {count}, within {within}s")

    # ------------------------------------------------------------------ serving

    def _answer(self, prompt: Prompt) -> Answer:
        """Record the call, wait while held, and pick the scripted answer."""
        with self._cond:
            self._prompts.append(prompt)
            holding = self._holding
            if holding:
                self._held += 1
            self._cond.notify_all()
        if holding:
            self._released.wait(self.hold_timeout)
            with self._cond:
                self._held -= 1
                self._cond.notify_all()
        with self._cond:
            if self._answers:
                return self._answers.popleft()
        if self.respond is not None:
            return self.respond(prompt)
        return Reply(400, {"error": {"message": "the fake model has no scripted answer"}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (a killed daemon) is no test failure


def _handler_for(llm: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                return
            try:
                body = json.loads(raw)
                messages = body["messages"]
                system = next(m["content"] for m in messages if m["role"] == "system")
                user = next(m["content"] for m in messages if m["role"] == "user")
            except (ValueError, KeyError, StopIteration, TypeError):
                self._send(Reply(400, {"error": {"message": "not a chat completions request"}}))
                return
            answer = llm._answer(Prompt(system, user, time.monotonic()))
            self._send(answer if isinstance(answer, Reply) else Reply(200, completion(answer)))

        def _send(self, reply: Reply) -> None:
            data = (
                json.dumps(reply.body).encode()
                if isinstance(reply.body, dict)
                else reply.body.encode()
            )
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client (a killed daemon) is gone

    return Handler


# ---------------------------------------------------------------------- ready-made answers

_SEPARATOR = re.compile(r"^--- (?:MEMORY\.md|Session: .*) ---$")


def echo_dream(prompt: Prompt) -> str:
    """A dream answer keeping every line of its input except the separators, in order.

    A model that never merges: whatever was in ``MEMORY.md`` stays, and every session log's
    sections are added — so a log consumed twice shows up as a duplicated section.
    """
    lines = [line for line in prompt.user.splitlines() if not _SEPARATOR.match(line)]
    return "\n".join(lines).strip() + "\n"
