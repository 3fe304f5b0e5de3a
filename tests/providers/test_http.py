"""The one retry policy of the OpenAI-compatible client (chat and embeddings)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memoryd.errors import EmbeddingError
from memoryd.providers.http import Endpoint, RetryPolicy
from memoryd.providers.llm import OpenAIChatModel
from memoryd.providers.openai import OpenAIEmbeddings


@given(
    st.integers(1, 20),
    st.one_of(st.none(), st.floats(0, 100)),
    st.floats(0.01, 1.0),
    st.floats(1.0, 10.0),
)
def test_backoff_doubles_with_jitter_up_to_the_cap_and_honours_retry_after(
    failures: int, retry_after: float | None, base: float, cap: float
) -> None:
    policy = RetryPolicy(3, base, cap)
    full = min(cap, base * 2 ** (failures - 1))
    delay = policy.delay(failures, retry_after)
    floor = retry_after or 0.0
    assert max(full / 2, floor) <= delay <= max(full, floor)


def test_chat_and_embeddings_speak_through_one_endpoint_kind() -> None:
    chat = OpenAIChatModel("http://u:p@127.0.0.1:9/v1/", "m", timeout_secs=3.0, max_retries=4)
    emb = OpenAIEmbeddings(base_url="http://127.0.0.1:9/v1", model="e", env={"K": "sk-1"})
    assert isinstance(chat.endpoint, Endpoint) and isinstance(emb.endpoint, Endpoint)
    assert chat.endpoint.label == "chat model 'm' at http://127.0.0.1:9/v1/chat/completions"
    assert chat.endpoint.retry == RetryPolicy(4, 0.25, 4.0)
    assert emb.endpoint.retry == RetryPolicy(3, 0.25, 4.0)
    error = Endpoint(
        "http://127.0.0.1:9/x?token=sk-1", error=EmbeddingError, api_key_env="K", env={"K": "sk-1"}
    ).fail("answered sk-1 back")
    assert isinstance(error, EmbeddingError)
    assert str(error) == "http://127.0.0.1:9/x answered *** back"
