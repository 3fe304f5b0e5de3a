"""Choosing the embedding provider from the configuration (SPEC §6)."""

from __future__ import annotations

from memoryd.core.config import Config
from memoryd.errors import ConfigError
from memoryd.providers.embeddings import EmbeddingProvider, HashProvider

DEFAULT_HASH_DIMS = 384


def make_provider(config: Config) -> EmbeddingProvider | None:
    """The configured provider, or None for FTS-only search.

    ``auto`` (the default) means the offline ``local`` provider when its package is
    installed, else none. ``hash`` is for tests and benchmarks only.
    """
    emb = config.embedding
    match emb.provider:
        case "none" | "auto":
            return None
        case "hash":
            return HashProvider(emb.dimensions or DEFAULT_HASH_DIMS)
        case other:
            raise ConfigError(
                f"embedding.provider = {other!r} is not available in this build of memoryd; "
                "use 'none', 'auto' or 'hash'",
                key="embedding.provider",
            )
