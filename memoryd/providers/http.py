"""One OpenAI-compatible HTTP client with one retry policy, for chat and embeddings.

:class:`Endpoint` POSTs JSON to one URL of an OpenAI-compatible server (``/chat/completions``
for :mod:`memoryd.providers.llm`, ``/embeddings`` for :mod:`memoryd.providers.openai`):

- the API key is read from the environment variable ``api_key_env`` at each request and sent
  as ``Authorization: Bearer …`` (none set → no header, as local servers expect); no error
  message ever contains it, and the URL is shown without credentials or query;
- a request has a **deadline** of ``timeout_secs``, retries included. A timeout fails at once
  (as ``timeout_error``, when the caller wants to tell it apart): a hung server costs
  ``timeout_secs``, not ``timeout_secs × attempts``;
- a 429, a 5xx or a transport error (connection refused, reset …) is retried up to
  ``max_retries`` times (:class:`RetryPolicy`): exponential backoff from ``backoff_base``
  doubling up to ``backoff_cap``, jittered so concurrent retries spread, raised to a numeric
  ``Retry-After``, and only while the deadline leaves time for it;
- any other answer that is not 2xx fails at once with the server's message.

Failures raise the caller's error class (:class:`~memoryd.errors.ModelError` or
:class:`~memoryd.errors.EmbeddingError`), each message starting with the endpoint's
:attr:`~Endpoint.label` (``chat model 'm' at <url>``, or the URL).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from memoryd.errors import ModelError, describe_error

MAX_MESSAGE = 300
"""Characters of a server's message (or answer) an error quotes at most."""


#: The backoff of every retry (chat and embeddings): from this, doubling up to the cap.
BACKOFF_BASE_SECS = 0.25
BACKOFF_CAP_SECS = 4.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before retrying a 429, a 5xx or a transport error."""

    max_retries: int = 2
    backoff_base: float = BACKOFF_BASE_SECS
    backoff_cap: float = BACKOFF_CAP_SECS

    def delay(self, failures: int, retry_after: float | None) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1-based)."""
        delay = min(self.backoff_cap, self.backoff_base * 2 ** (failures - 1))
        delay = random.uniform(delay / 2, delay)  # jitter spreads concurrent retries
        return delay if retry_after is None else max(delay, retry_after)


class Endpoint:
    """One OpenAI-compatible URL: JSON POSTs with a key, a deadline and retries."""

    def __init__(
        self,
        url: str,
        *,
        error: type[ModelError],
        timeout_error: type[ModelError] | None = None,
        name: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_secs: float = 10.0,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        keep_open: bool = True,
    ) -> None:
        self.url = url
        self.shown_url = str(httpx.URL(url).copy_with(username=None, password=None, query=None))
        self.label = f"{name} at {self.shown_url}" if name else self.shown_url
        self.error = error
        self.timeout_error = timeout_error or error
        self.api_key_env = api_key_env
        self.timeout_secs = timeout_secs
        self.retry = retry or RetryPolicy()
        self._env = os.environ if env is None else env
        self._transport = transport
        self._keep_open = keep_open
        self._client: httpx.AsyncClient | None = None
        self.requests = 0  # HTTP requests sent, retries included
        self.answered_in = 0.0  # seconds the last successful request took (its last attempt)

    # ------------------------------------------------------------------ requests

    async def post(self, payload: Mapping[str, Any]) -> httpx.Response:
        """POST ``payload`` as JSON; the 2xx response, or raises :attr:`error`."""
        if self._keep_open:
            if self._client is None:
                self._client = httpx.AsyncClient(transport=self._transport)
            return await self._post(self._client, payload)
        async with httpx.AsyncClient(transport=self._transport) as client:
            return await self._post(client, payload)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _post(self, client: httpx.AsyncClient, payload: Mapping[str, Any]) -> httpx.Response:
        deadline = anyio.current_time() + self.timeout_secs
        headers = {"Accept": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        failures = 0
        while True:
            remaining = deadline - anyio.current_time()
            retry_after: float | None = None
            sent = anyio.current_time()
            try:
                with anyio.fail_after(max(remaining, 0.0)):
                    self.requests += 1
                    response = await client.post(
                        self.url, json=payload, headers=headers, timeout=max(remaining, 0.001)
                    )
            except (TimeoutError, httpx.TimeoutException) as exc:
                cause = f"did not answer within {self.timeout_secs:g} s"
                raise self.fail(cause, error=self.timeout_error) from exc
            except httpx.TransportError as exc:
                reason = f"cannot be reached: {describe_error(exc)}"
            else:
                status = response.status_code
                if response.is_success:
                    self.answered_in = anyio.current_time() - sent
                    return response
                reason = f"answered HTTP {status}: {self.server_message(response)}"
                if status != 429 and status < 500:
                    raise self.fail(reason, status=status)
                retry_after = _retry_after(response)
            failures += 1
            if failures > self.retry.max_retries:
                raise self.fail(f"{reason} (gave up after {failures} attempts)", attempts=failures)
            delay = self.retry.delay(failures, retry_after)
            if anyio.current_time() + delay >= deadline:
                raise self.fail(
                    f"{reason} (no time left to retry within {self.timeout_secs:g} s)",
                    attempts=failures,
                )
            await anyio.sleep(delay)

    # ------------------------------------------------------------------ messages

    def fail(self, cause: str, *, error: type[ModelError] | None = None, **data: Any) -> ModelError:
        """The caller's error for ``cause``: ``"<label> <cause>"``, the API key masked."""
        kind = error or self.error
        return kind(self._clean(f"{self.label} {cause}"), url=self.shown_url, **data)

    def server_message(self, response: httpx.Response) -> str:
        """What the server said: ``error.message`` of a JSON answer, else its text, cut."""
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        if isinstance(body, dict):
            error = body.get("error", body.get("message", body))
            if isinstance(error, dict):
                error = error.get("message", error)
            body = error
        return excerpt(self._clean(str(body).strip() or response.reason_phrase))

    def _key(self) -> str | None:
        key = self._env.get(self.api_key_env, "") if self.api_key_env else ""
        return key.strip() or None

    def _clean(self, message: str) -> str:
        key = self._key()
        return message.replace(key, "***") if key else message


def excerpt(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: keep our own backoff
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
