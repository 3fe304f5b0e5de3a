"""Chat models used by flush, dream and confluence (SPEC §7).

A :class:`ChatModel` answers one prompt (a system text and a user text) with one string.
:class:`OpenAIChatModel` speaks to any OpenAI-compatible chat completions endpoint and
:func:`make_chat_model` builds it from ``[llm]`` (or None: no model configured).
:class:`FakeChatModel` ships in the package for tests: it returns queued answers in order
(or raises queued exceptions) and records every prompt it was given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio
import httpx

from memoryd.core.config import Config
from memoryd.errors import ConfigError, ModelError
from memoryd.providers.http import (
    BACKOFF_BASE_SECS,
    BACKOFF_CAP_SECS,
    Endpoint,
    RetryPolicy,
    excerpt,
)


@runtime_checkable
class ChatModel(Protocol):
    """One prompt in, one answer out."""

    @property
    def model_id(self) -> str: ...

    async def complete(self, system: str, user: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    user: str


class FakeChatModel:
    """A chat model with queued answers, for tests (never used unless a test builds it).

    Each queued item is a string (the answer) or an exception (raised instead). When the
    queue is empty, :meth:`complete` raises :class:`ModelError`. ``delay`` makes each call
    sleep first, so tests can act while a model call is in flight; ``gate``, when given,
    is awaited before answering.
    """

    def __init__(
        self,
        answers: Iterable[str | BaseException] = (),
        *,
        model_id: str = "fake",
        delay: float = 0.0,
    ) -> None:
        self._answers: deque[str | BaseException] = deque(answers)
        self._model_id = model_id
        self.delay = delay
        self.gate: anyio.Event | None = None
        self.prompts: list[Prompt] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def queue(self, *answers: str | BaseException) -> None:
        self._answers.extend(answers)

    async def complete(self, system: str, user: str) -> str:
        self.prompts.append(Prompt(system, user))
        if self.delay:
            await anyio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        if not self._answers:
            raise ModelError("the fake chat model has no queued answer")
        answer = self._answers.popleft()
        if isinstance(answer, BaseException):
            raise answer
        return answer


# ---------------------------------------------------------------------- OpenAI-compatible


class OpenAIChatModel:
    """An OpenAI-compatible chat completions endpoint (SPEC §7 ``llm.*``).

    One call POSTs ``{base_url}/chat/completions`` with a system and a user message and
    returns ``choices[0].message.content``, through :class:`~memoryd.providers.http.Endpoint`:
    the key from ``api_key_env``, ``timeout_secs`` for the whole call (retries included),
    ``max_retries`` retries of 429, 5xx and transport errors. Every failure is a
    :class:`ModelError` naming the model and the endpoint. Each call uses its own
    short-lived HTTP client, so nothing stays open between the rare flush and dream calls.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_secs: float = 60.0,
        max_retries: int = 2,
        *,
        backoff_base: float = BACKOFF_BASE_SECS,
        backoff_cap: float = BACKOFF_CAP_SECS,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.model = model
        self.endpoint = Endpoint(
            base_url.rstrip("/") + "/chat/completions",
            error=ModelError,
            name=f"chat model {model!r}",
            api_key_env=api_key_env,
            timeout_secs=timeout_secs,
            retry=RetryPolicy(max(0, max_retries), backoff_base, backoff_cap),
            env=environ,
            keep_open=False,
        )

    @property
    def model_id(self) -> str:
        return self.model

    async def complete(self, system: str, user: str) -> str:
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        return self._content(await self.endpoint.post(body))

    def _content(self, response: httpx.Response) -> str:
        fail = self.endpoint.fail
        try:
            data = response.json()
        except ValueError:
            raise fail(f"answered invalid JSON: {excerpt(response.text)}") from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise fail(
                f"answered no choices[0].message.content: {excerpt(response.text)}"
            ) from None
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        if content is None:
            return ""
        if not isinstance(content, str):
            raise fail(f"answered a {type(content).__name__} as content")
        return content


def make_chat_model(config: Config) -> ChatModel | None:
    """The configured chat model, or None when ``llm.base_url`` or ``llm.model`` is empty
    (then ``session.flush`` answers ``model_not_configured``)."""
    llm = config.llm
    base_url, model = llm.base_url.strip(), llm.model.strip()
    if not base_url or not model:
        return None
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"llm.base_url must start with http:// or https://, got {base_url!r}",
            key="llm.base_url",
        )
    return OpenAIChatModel(
        base_url,
        model,
        api_key_env=llm.api_key_env,
        timeout_secs=llm.timeout_secs,
        max_retries=llm.max_retries,
    )
