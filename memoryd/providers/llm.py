"""Chat models used by flush, dream and confluence (SPEC §7).

A :class:`ChatModel` answers one prompt (a system text and a user text) with one string.
:class:`OpenAIChatModel` speaks to any OpenAI-compatible chat completions endpoint and
:func:`make_chat_model` builds it from ``[llm]`` (or None: no model configured).
:class:`FakeChatModel` ships in the package for tests: it returns queued answers in order
(or raises queued exceptions) and records every prompt it was given.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import httpx
import structlog

from memoryd.core.config import Config
from memoryd.errors import ConfigError, ModelError, describe_error

log = structlog.get_logger(__name__)


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
    """An OpenAI-compatible chat completions endpoint over httpx (SPEC §7 ``llm.*``).

    One call POSTs ``{base_url}/chat/completions`` with a system and a user message and
    returns ``choices[0].message.content``. 429, 5xx and transport errors (connection
    refused, reset, timeouts) are retried ``max_retries`` times with exponential backoff
    (a numeric ``Retry-After`` is honoured up to ``max_backoff_secs``); any other answer
    fails at once. Every failure is a :class:`ModelError` whose message names the model,
    the endpoint and the cause — never the API key, which is read from the environment
    variable ``api_key_env`` at each call (none set → no ``Authorization`` header, as local
    servers expect). Each call uses its own short-lived HTTP client, so nothing stays open
    between the rare flush and dream calls.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_secs: float = 60.0,
        max_retries: int = 2,
        *,
        backoff_secs: float = 0.5,
        max_backoff_secs: float = 8.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_secs = timeout_secs
        self.max_retries = max(0, max_retries)
        self.backoff_secs = backoff_secs
        self.max_backoff_secs = max_backoff_secs
        self._environ = environ if environ is not None else os.environ
        url = httpx.URL(self.url)
        self._shown_url = str(url.copy_with(username=None, password=None, query=None))

    @property
    def model_id(self) -> str:
        return self.model

    def _key(self) -> str | None:
        key = self._environ.get(self.api_key_env, "") if self.api_key_env else ""
        return key.strip() or None

    def _fail(self, cause: str, key: str | None, **data: Any) -> ModelError:
        if key:
            cause = cause.replace(key, "***")
        return ModelError(
            f"chat model {self.model!r} at {self._shown_url}: {cause}",
            model=self.model,
            url=self._shown_url,
            **data,
        )

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        delay: float = self.backoff_secs * float(2**attempt)
        if retry_after:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:
                pass  # an HTTP date: keep our own backoff
        return min(delay, self.max_backoff_secs)

    async def complete(self, system: str, user: str) -> str:
        key = self._key()
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        attempts = self.max_retries + 1
        cause = ""
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_secs), follow_redirects=False
        ) as client:
            for attempt in range(attempts):
                retry_after: str | None = None
                try:
                    with anyio.fail_after(self.timeout_secs):
                        response = await client.post(self.url, json=body, headers=headers)
                except (TimeoutError, httpx.TimeoutException):
                    cause = f"timed out after {self.timeout_secs:g} s"
                except httpx.TransportError as exc:
                    cause = describe_error(exc)
                else:
                    status = response.status_code
                    if status == 429 or status >= 500:
                        cause = f"HTTP {status}: {_excerpt(response)}"
                        retry_after = response.headers.get("retry-after")
                    elif not response.is_success:
                        raise self._fail(f"HTTP {status}: {_excerpt(response)}", key, status=status)
                    else:
                        return self._content(response, key)
                if attempt + 1 < attempts:
                    log.warning("llm.retry", model=self.model, attempt=attempt + 1, error=cause)
                    await anyio.sleep(self._delay(attempt, retry_after))
        raise self._fail(f"{cause} (after {attempts} attempts)", key, attempts=attempts)

    def _content(self, response: httpx.Response, key: str | None) -> str:
        try:
            data = response.json()
        except ValueError:
            raise self._fail(f"answered invalid JSON: {_excerpt(response)}", key) from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise self._fail(
                f"answered no choices[0].message.content: {_excerpt(response)}", key
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
            raise self._fail(f"answered a {type(content).__name__} as content", key)
        return content


def _excerpt(response: httpx.Response, limit: int = 300) -> str:
    text = " ".join(response.text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
