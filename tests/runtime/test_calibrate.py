"""`index.calibrate` on a real index: the provider's scale measured on the workspace's notes,
and the measured keys taken by the factory (issue #19)."""

from __future__ import annotations

import dataclasses

import pytest

from memoryd.core.config import Config
from memoryd.core.ranking import SimilarityScale
from memoryd.errors import ConfigError, ModelNotConfigured
from memoryd.providers.embeddings import HashProvider, similarity_scale
from memoryd.providers.factory import configured_scale, make_provider
from memoryd.runtime.workspace.calibrate import calibrate
from tests.runtime.conftest import Env, MemoryFactory

TOPICS = [
    "postgres backups run nightly to the bucket and are kept for two weeks",
    "the frontend uses pnpm and never npm because npm rewrites the lockfile",
    "deploys go out on tuesdays after the migrations ran on staging first",
    "alice reviews small pull requests in the morning before standup starts",
    "rate limits allow one hundred requests a minute per token then refuse",
    "feature flags are removed two weeks after they reach every user",
]


@pytest.mark.anyio
async def test_calibrate_measures_titles_against_their_own_and_other_notes(
    env: Env, open_memory: MemoryFactory
) -> None:
    for i, topic in enumerate(TOPICS):
        words = topic.split()
        title = " ".join(words[:4])  # the heading says part of its note again
        env.session(f"2026-05-0{i + 1}-t{i}-abcdef0{i}.md", f"## {title}\n\n{topic}\n")
        assert len(words) > 8
    mem = await open_memory(HashProvider(256))
    await mem.sync()
    result = await calibrate(mem)
    assert result["problem"] is None, result
    assert result["unrelated"] is not None and result["strong"] is not None
    assert result["unrelated"] + 0.05 < result["strong"]
    assert result["halves"] == len(TOPICS)
    assert result["pairs"] == len(TOPICS) * (len(TOPICS) - 1)  # each in its own file
    assert result["config_lines"][0].startswith("similarity_unrelated = ")
    assert result["in_use"] == {"unrelated": 0.5, "strong": 0.8}  # the hash model: reference


@pytest.mark.anyio
async def test_calibrate_refuses_notes_without_informative_headings(
    env: Env, open_memory: MemoryFactory
) -> None:
    for i, topic in enumerate(TOPICS):
        env.session(f"2026-05-0{i + 1}-t{i}-abcdef0{i}.md", f"## Conversation\n\n{topic}\n")
    mem = await open_memory(HashProvider(256))
    await mem.sync()
    result = await calibrate(mem)
    assert result["problem"] is not None and "too few" in result["problem"]
    assert result["config_lines"] == []


@pytest.mark.anyio
async def test_calibrate_needs_a_provider(env: Env, open_memory: MemoryFactory) -> None:
    mem = await open_memory()
    with pytest.raises(ModelNotConfigured):
        await calibrate(mem)


def test_the_factory_takes_both_keys_or_neither() -> None:
    emb = Config().embedding
    assert configured_scale(Config()) is None
    both = dataclasses.replace(
        Config(),
        embedding=dataclasses.replace(
            emb,
            provider="openai",
            base_url="http://127.0.0.1:9/v1",
            model="m",
            similarity_unrelated=0.2,
            similarity_strong=0.55,
        ),
    )
    provider = make_provider(both)
    assert similarity_scale(provider) == SimilarityScale(0.2, 0.55)
    one = dataclasses.replace(
        Config(), embedding=dataclasses.replace(emb, similarity_unrelated=0.2)
    )
    with pytest.raises(ConfigError) as error:
        configured_scale(one)
    assert error.value.key == "embedding.similarity_strong"
