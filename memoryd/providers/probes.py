"""Probing the configured models for ``memoryd doctor``: does each answer a minimal request?

:func:`resolve_embedding` names what ``embedding.provider`` resolves to (``auto`` included)
without touching the network or loading a model. :func:`probe_embedding` and
:func:`probe_chat` send one minimal request (embed one short text; one chat message) to the
configured endpoint within ``limit_secs`` seconds, with no retries, and return a
:class:`Probe`: whether it answered, and a line naming the endpoint and what happened. No
probe raises for a model that fails; a configuration that cannot work is reported the same
way.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import anyio

from memoryd.core.config import Config
from memoryd.errors import MemorydError
from memoryd.providers.factory import make_provider
from memoryd.providers.llm import make_chat_model
from memoryd.providers.local import local_available
from memoryd.providers.openai import FIT_SHARE

PROBE_SYSTEM = "You are a health check. Answer with the single word OK."
PROBE_USER = "ping"


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    detail: str
    endpoint: str | None = None
    took_ms: float | None = None


def resolve_embedding(config: Config) -> str:
    """What ``embedding.provider`` resolves to here: ``none``, ``local``, ``openai`` or ``hash``."""
    provider = config.embedding.provider
    if provider == "auto":
        return "local" if local_available() else "none"
    return provider


def _endpoint(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


async def probe_embedding(config: Config, limit_secs: float) -> Probe:
    """Embed one short text with the configured provider (no cache, no retries)."""
    resolved = resolve_embedding(config)
    emb = config.embedding
    endpoint = _endpoint(emb.base_url, "/embeddings") if resolved == "openai" else None
    quick = dataclasses.replace(
        config,
        embedding=dataclasses.replace(emb, max_retries=0, timeout_secs=limit_secs),
    )
    try:
        provider = make_provider(quick)
    except MemorydError as exc:
        return Probe(False, str(exc), endpoint)
    if provider is None:
        return Probe(True, "no provider: search is keyword-only (FTS)", None)
    started = time.monotonic()
    try:
        with anyio.fail_after(limit_secs):
            vectors = await provider.embed(["memoryd doctor"])
    except TimeoutError:
        where = endpoint or provider.model_id
        return Probe(False, f"{where} did not answer within {limit_secs:g} s", endpoint)
    except MemorydError as exc:
        return Probe(False, str(exc), endpoint)
    finally:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()
    took = (time.monotonic() - started) * 1000
    where = f" at {endpoint}" if endpoint else ""
    detail = f"{provider.model_id}{where} answered in {took:.0f} ms ({len(vectors[0])}-d)"
    batch_secs = took / 1000 * emb.batch_size
    if resolved == "openai" and batch_secs > emb.timeout_secs * FIT_SHARE:
        detail += (
            f"; at this speed a batch of {emb.batch_size} texts takes about {batch_secs:.0f} s "
            f"of embedding.timeout_secs = {emb.timeout_secs:g}: memoryd sends smaller "
            f"batches; raise embedding.timeout_secs to about {2 * batch_secs:.0f}"
        )
    return Probe(True, detail, endpoint, took)


async def probe_chat(config: Config, limit_secs: float) -> Probe:
    """Send one short chat message to the configured ``[llm]`` model (no retries)."""
    llm = config.llm
    quick = dataclasses.replace(
        config, llm=dataclasses.replace(llm, max_retries=0, timeout_secs=limit_secs)
    )
    try:
        model = make_chat_model(quick)
    except MemorydError as exc:
        return Probe(False, str(exc), llm.base_url or None)
    if model is None:
        return Probe(True, "not configured: flush and dream are off")
    endpoint = _endpoint(llm.base_url.strip(), "/chat/completions")
    started = time.monotonic()
    try:
        with anyio.fail_after(limit_secs):
            await model.complete(PROBE_SYSTEM, PROBE_USER)
    except TimeoutError:
        return Probe(False, f"{endpoint} did not answer within {limit_secs:g} s", endpoint)
    except MemorydError as exc:
        return Probe(False, str(exc), endpoint)
    took = (time.monotonic() - started) * 1000
    return Probe(True, f"{model.model_id} at {endpoint} answered in {took:.0f} ms", endpoint, took)
