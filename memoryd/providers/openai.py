"""The ``openai`` embedding provider: any OpenAI-compatible ``/v1/embeddings`` endpoint (SPEC §6).

OpenAI, Ollama, llama.cpp's server, vLLM … :class:`OpenAIEmbeddings` POSTs
``{base_url}/embeddings`` with ``model``, ``input`` (a list) and ``dimensions`` when configured,
``batch_size`` texts per request, and ``Authorization: Bearer …`` when the variable named by
``api_key_env`` is set.

**Batches that fit the timeout.** Each request (one batch) has a deadline of
``timeout_secs``, retries included. A slow server (a small model on a laptop CPU) may need
longer for ``batch_size`` texts than that: a batch that times out is split in half and each
half sent again (down to one text, which then fails), and later batches are no larger than
what fits: from each answered request the provider measures seconds per text and sends at
most as many texts as take half of ``timeout_secs`` at that rate (never more than
``batch_size``; it grows back when the server speeds up). :attr:`OpenAIEmbeddings.timeouts`
counts the timeouts and :attr:`OpenAIEmbeddings.advice` says what to change (``status`` and
``doctor`` show it).

Requests go through :class:`~memoryd.providers.http.Endpoint`, with the retry policy the chat
model shares: a 429, a 5xx or a connection failure is retried with jittered exponential
backoff up to ``max_retries`` times while the deadline allows; any other 4xx fails at once
with the server's message. A timeout is not retried as such, only split: a hung server costs
``timeout_secs`` per halving of the batch (one query text: ``timeout_secs``).

Every answer is checked: one vector per input, items put in the order of their ``index``,
every vector of the expected dimension and finite. Vectors are returned L2-normalised.

**Dimension.** With ``dimensions`` configured, :attr:`OpenAIEmbeddings.dims` is known at once.
With ``dimensions = 0`` the first successful answer fixes it; until then :attr:`dims_known` is
false and :attr:`dims` raises :class:`~memoryd.errors.EmbeddingError`. Call :meth:`probe` at
start (it embeds one short text) so the index can record the model's identity. The
:attr:`model_id` is ``openai/<model>@<dims>`` (``openai/<model>`` while the dimension is
unknown), so a change of model or dimension changes the identity.

Errors are :class:`~memoryd.errors.EmbeddingError`; their messages never contain the API key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import structlog

from memoryd.core.ranking import SimilarityScale
from memoryd.errors import EmbeddingError, describe_error
from memoryd.providers.embeddings import normalize
from memoryd.providers.http import BACKOFF_BASE_SECS, BACKOFF_CAP_SECS, Endpoint, RetryPolicy

log = structlog.get_logger(__name__)

PROBE_TEXT = "memoryd probe"
FIT_SHARE = 0.5  # a batch should take at most this share of timeout_secs at the measured rate
RATE_WEIGHT = 0.3  # the weight of the newest measurement in the seconds-per-text average


class _TimedOut(EmbeddingError):
    """One request did not answer within ``timeout_secs`` (the batch may be split)."""


class OpenAIEmbeddings:
    """Embeddings from an OpenAI-compatible HTTP endpoint, batched, retried and checked."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimensions: int = 0,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 32,
        timeout_secs: float = 10.0,
        max_retries: int = 3,
        backoff_base: float = BACKOFF_BASE_SECS,
        backoff_cap: float = BACKOFF_CAP_SECS,
        env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        similarity: SimilarityScale | None = None,
    ) -> None:
        if not base_url or not model:
            raise ValueError("base_url and model are required")
        if batch_size < 1 or timeout_secs <= 0 or max_retries < 0 or dimensions < 0:
            raise ValueError("batch_size, timeout_secs, max_retries or dimensions out of range")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout_secs = timeout_secs
        self.endpoint = Endpoint(
            self.url,
            error=EmbeddingError,
            timeout_error=_TimedOut,
            api_key_env=api_key_env,
            timeout_secs=timeout_secs,
            retry=RetryPolicy(max_retries, backoff_base, backoff_cap),
            env=env,
            transport=transport,
        )
        self._dims = dimensions
        self._similarity = similarity
        self.timeouts = 0  # requests that did not answer within timeout_secs
        self.fit = batch_size  # texts per request that fit timeout_secs (see the docstring)
        self.secs_per_text: float | None = None  # measured on answered requests
        self.advice: str | None = None  # what to change, once a request has timed out

    @property
    def requests(self) -> int:
        """HTTP requests sent, retries included."""
        return self.endpoint.requests

    # ------------------------------------------------------------------ identity

    @property
    def model_id(self) -> str:
        return f"openai/{self.model}@{self._dims}" if self._dims else f"openai/{self.model}"

    @property
    def similarity(self) -> SimilarityScale | None:
        """The configured scale (``embedding.similarity_*``); None: the reference scale."""
        return self._similarity

    @property
    def dims_known(self) -> bool:
        return self._dims > 0

    @property
    def dims(self) -> int:
        if not self._dims:
            raise EmbeddingError(
                f"the dimension of {self.model!r} is not known yet: the endpoint has not "
                "answered (set embedding.dimensions, or wait for the probe to succeed)"
            )
        return self._dims

    async def probe(self) -> int:
        """Embed one short text to learn (or check) the dimension; returns it."""
        await self.embed([PROBE_TEXT])
        return self._dims

    # ------------------------------------------------------------------ embedding

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order, in batches that fit ``timeout_secs``."""
        batch = [t if t.strip() else " " for t in texts]  # endpoints refuse empty strings
        vectors: list[list[float]] = []
        start = 0
        while start < len(batch):
            part = batch[start : start + self.fit]
            vectors.extend(await self._embed_part(part))
            start += len(part)
        return vectors

    async def _embed_part(self, part: list[str]) -> list[list[float]]:
        """Embed ``part``; on a timeout, split it in half and send each half again."""
        try:
            return await self._request(part)
        except _TimedOut as exc:
            self.timeouts += 1
            if len(part) == 1:
                self.advice = (
                    f"{self.url} needs more than embedding.timeout_secs = "
                    f"{self.timeout_secs:g} s for one text: raise embedding.timeout_secs"
                )
                raise EmbeddingError(f"{exc} for one text ({self.advice})") from exc
            half = (len(part) + 1) // 2
            self.fit = min(self.fit, half)
            self.advice = (
                f"{self.timeouts} request(s) to {self.url} timed out after "
                f"{self.timeout_secs:g} s (a batch of {len(part)} texts); batches are now "
                f"at most {self.fit} texts: raise embedding.timeout_secs or lower "
                f"embedding.batch_size ({self.batch_size}) to fit this server"
            )
            log.warning(
                "embedding.batch_timed_out",
                texts=len(part),
                timeout_secs=self.timeout_secs,
                batch_now=self.fit,
            )
            vectors: list[list[float]] = []
            while len(vectors) < len(part):  # in pieces of what fits now
                piece = part[len(vectors) : len(vectors) + self.fit]
                vectors.extend(await self._embed_part(piece))
            return vectors

    def _measured(self, texts: int, secs: float) -> None:
        """Learn the server's speed from an answered request; resize :attr:`fit` to it."""
        rate = secs / max(texts, 1)
        old = self.secs_per_text
        self.secs_per_text = rate if old is None else old + RATE_WEIGHT * (rate - old)
        if self.secs_per_text > 0:
            fits = int(self.timeout_secs * FIT_SHARE / self.secs_per_text)
            self.fit = max(1, min(self.batch_size, fits))

    async def aclose(self) -> None:
        await self.endpoint.aclose()

    async def _request(self, texts: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions:
            payload["dimensions"] = self.dimensions
        vectors = self._check(await self.endpoint.post(payload), len(texts))
        self._measured(len(texts), self.endpoint.answered_in)
        return vectors

    # ------------------------------------------------------------------ answer checks

    def _check(self, response: httpx.Response, count: int) -> list[list[float]]:
        try:
            data = response.json()["data"]
            items = sorted(
                ((int(item["index"]), item["embedding"]) for item in data), key=lambda p: p[0]
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise self.endpoint.fail(
                f"answered something that is not an embeddings list: {describe_error(exc)}"
            ) from exc
        if len(items) != count:
            raise self.endpoint.fail(f"answered {len(items)} vectors for {count} inputs")
        if [index for index, _ in items] != list(range(count)):
            raise self.endpoint.fail(f"answered indexes that are not 0..{count - 1}")
        expected = self._dims or (len(items[0][1]) if isinstance(items[0][1], list) else 0)
        if not expected:
            raise self.endpoint.fail("answered an empty or malformed first vector")
        vectors: list[list[float]] = []
        for index, raw in items:
            if not isinstance(raw, list) or len(raw) != expected:
                size = len(raw) if isinstance(raw, list) else type(raw).__name__
                raise self.endpoint.fail(
                    f"answered a vector of dimension {size} for input {index}, "
                    f"expected {expected} ({self.model!r})"
                )
            try:
                vector = [float(x) for x in raw]
            except (TypeError, ValueError) as exc:
                raise self.endpoint.fail("answered a non-numeric vector") from exc
            if not all(math.isfinite(x) for x in vector):
                raise self.endpoint.fail("answered a vector with NaN or infinity")
            vectors.append(normalize(vector))
        self._dims = expected
        return vectors
