"""Sessions of one workspace with a fake chat model and a real index (SPEC §7, issue 5)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from memoryd.core.config import Config
from memoryd.core.flushing import FLUSH_DELTA_RULE, Message
from memoryd.core.times import rfc3339
from memoryd.errors import Busy, InvalidParams, ModelError, ModelNotConfigured, NotFound
from memoryd.providers.embeddings import EmbeddingProvider, HashProvider
from memoryd.providers.llm import FakeChatModel
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store.journal import journal_name, load
from tests.runtime.conftest import Env, MemoryFactory, TableProvider

pytestmark = pytest.mark.anyio

BUILD = "## Build system\n\nThe project builds with `make -j4`; gcc 13 is pinned in the Makefile."
TESTS = "## Test runner\n\nRun `pytest -q tests/`; the zanzibar fixture seeds the database."


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def with_flush(config: Config | None = None, **changes: Any) -> Config:
    base = config or Config()
    return dataclasses.replace(base, flush=dataclasses.replace(base.flush, **changes))


def user(text: str) -> Message:
    return Message("user", text)


def assistant(text: str) -> Message:
    return Message("assistant", text)


CONVERSATION = [
    Message("system", "You are a coding agent."),
    user("Why does the build fail on CI?"),
    assistant("The Makefile pins gcc 13 but CI has gcc 12."),
    user("How do we pin the compiler in the CI image?"),
    assistant("Install gcc-13 in the Dockerfile."),
    user("Please also document the make -j4 flag for contributors."),
    assistant("Done."),
]


@pytest.fixture
def make(env: Env, open_memory: MemoryFactory) -> Callable[..., Any]:
    async def factory(
        model: FakeChatModel | None = None,
        *,
        config: Config | None = None,
        provider: EmbeddingProvider | None = None,
        clock: Clock | None = None,
    ) -> SessionManager:
        cfg = config or Config()
        memory = await open_memory(provider, cfg)
        return SessionManager(memory, cfg, model, clock=clock or Clock())

    return factory


@asynccontextmanager
async def running(manager: SessionManager) -> AsyncIterator[SessionManager]:
    async with anyio.create_task_group() as tg:
        await tg.start(manager.run)
        yield manager
        tg.cancel_scope.cancel()


async def wait_until(predicate: Callable[[], bool], limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - polls state of the code under test
            await anyio.sleep(0.01)


def session_logs(env: Env) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(env.workspace.sessions_dir.glob("*.md"))}


def journal_path(env: Env, sid: str) -> Path:
    return env.workspace.live_dir / journal_name(sid)


# ---------------------------------------------------------------------- open / append / journal


async def test_open_append_and_log_path(env: Env, make: Callable[..., Any]) -> None:
    clock = Clock(utc("2025-03-04T10:00:00"))
    mgr = await make(clock=clock)
    opened = await mgr.open("3f2a9c1e-aaaa-bbbb")
    assert opened == {
        "session_id": "3f2a9c1e-aaaa-bbbb",
        "log_path": f"{env.workspace.key.dirname}/sessions/2025-03-04-session-3f2a9c1e.md",
        "messages": 0,
        "resumed": False,
    }
    assert await mgr.append("3f2a9c1e-aaaa-bbbb", CONVERSATION[:3]) == {"count": 3}
    assert await mgr.append("3f2a9c1e-aaaa-bbbb", []) == {"count": 3}
    again = await mgr.open("3f2a9c1e-aaaa-bbbb")
    assert again["resumed"] and again["messages"] == 3
    assert again["log_path"].endswith("2025-03-04-why-does-the-build-fail-on-ci-3f2a9c1e.md")


async def test_every_acknowledged_message_is_in_the_journal(
    env: Env, make: Callable[..., Any]
) -> None:
    mgr = await make()
    await mgr.open("s1")
    for i, message in enumerate(CONVERSATION):
        await mgr.append("s1", [message])
        state = load(journal_path(env, "s1"))
        assert state is not None
        assert [m.message for m in state.messages] == CONVERSATION[: i + 1]


async def test_unknown_sessions_and_bad_ids_are_refused(make: Callable[..., Any]) -> None:
    mgr = await make(FakeChatModel())
    with pytest.raises(NotFound):
        await mgr.append("nope", [user("x")])
    with pytest.raises(NotFound):
        await mgr.flush("nope")
    with pytest.raises(NotFound):
        await mgr.close("nope")
    for bad in ("", "   ", "x" * 300, "a\x00b"):
        with pytest.raises(InvalidParams):
            await mgr.open(bad)


async def test_a_session_id_that_is_a_path_stays_in_the_live_dir(
    env: Env, make: Callable[..., Any]
) -> None:
    mgr = await make()
    out = await mgr.open("../../escape")
    await mgr.append("../../escape", [user("hello")])
    assert [p.parent for p in env.workspace.live_dir.iterdir()] == [env.workspace.live_dir]
    assert "/" not in out["log_path"].rsplit("sessions/", 1)[1]


async def test_a_crash_loses_no_acknowledged_message(env: Env, make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD, TESTS])
    first = await make(model)
    await first.open("crashy")
    await first.append("crashy", CONVERSATION[:5])
    assert (await first.flush("crashy"))["outcome"] == "written"
    await first.append("crashy", CONVERSATION[5:])
    # "crash": the first manager is abandoned as it is; a new one starts on the same files
    # and the journal even has a torn write at its end.
    with journal_path(env, "crashy").open("ab") as handle:
        handle.write(b'{"type":"message","role":"user","content":"never acknowl')
    second = await make(model)
    async with running(second):
        (status,) = second.status()
        assert status["session_id"] == "crashy"
        assert status["messages"] == len(CONVERSATION)
        assert status["last_flush"]["outcome"] == "written"
        # a second flush sees every message and the first flush's text (delta prompt)
        await second.append("crashy", [user("And what about the test runner?")])
        assert (await second.flush("crashy"))["outcome"] == "written"
        prompt = model.prompts[1]
        assert BUILD in prompt.user
        assert FLUSH_DELTA_RULE in prompt.system
        assert "Please also document the make -j4 flag" in prompt.user
        assert "never acknowl" not in prompt.user
        # the summary counts the messages from before the crash
        closed = await second.close("crashy")
        assert closed["summary_written"] is True
        assert closed["messages"] == len(CONVERSATION) + 1
    assert not journal_path(env, "crashy").exists()
    (log_text,) = session_logs(env).values()
    assert "- Why does the build fail on CI?" in log_text
    assert BUILD in log_text and TESTS in log_text


async def test_a_session_closed_just_before_a_crash_is_not_resurrected(
    env: Env, make: Callable[..., Any]
) -> None:
    first = await make()
    await first.open("done")
    await first.append("done", CONVERSATION)
    first._sessions["done"].journal.record_closed(True)  # the removal never happened
    second = await make()
    async with running(second):
        assert second.status() == []
    assert not journal_path(env, "done").exists()


# ---------------------------------------------------------------------- flush rules


async def test_flush_writes_a_marked_section_to_todays_log(
    env: Env, make: Callable[..., Any]
) -> None:
    clock = Clock(utc("2025-03-04T10:00:00"))
    model = FakeChatModel([BUILD])
    mgr = await make(model, clock=clock)
    await mgr.open("3f2a9c1e-rest")
    await mgr.append("3f2a9c1e-rest", CONVERSATION)
    out = await mgr.flush("3f2a9c1e-rest")
    name = "2025-03-04-why-does-the-build-fail-on-ci-3f2a9c1e.md"
    assert out == {"outcome": "written", "path": f"{env.workspace.key.dirname}/sessions/{name}"}
    assert session_logs(env) == {
        name: f"<!-- flush 2025-03-04T10:00:00Z trigger=manual -->\n{BUILD}\n"
    }
    # the window: no system message
    assert "You are a coding agent." not in model.prompts[0].user
    assert "Why does the build fail on CI?" in model.prompts[0].user


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ("", "nothing_to_store"),
        ("NO_REPLY", "nothing_to_store"),
        ("  no reply.  ", "nothing_to_store"),
        ("No-Reply", "nothing_to_store"),
        ("noreply", "nothing_to_store"),
        ("C# rocks and the build uses make.", "rejected"),
        ("Plain prose without any heading.", "rejected"),
    ],
)
async def test_answers_that_store_nothing(
    env: Env, make: Callable[..., Any], answer: str, outcome: str
) -> None:
    mgr = await make(FakeChatModel([answer]))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert await mgr.flush("s1") == {"outcome": outcome}
    assert session_logs(env) == {}
    assert mgr.status()[0]["last_flush"]["outcome"] == outcome


async def test_long_answers_are_cut_at_a_line_boundary(env: Env, make: Callable[..., Any]) -> None:
    answer = "## Notes\n" + "\n".join(f"- note {i:02d} about the parser" for i in range(50))
    mgr = await make(FakeChatModel([answer]), config=with_flush(max_write_chars=200))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    await mgr.flush("s1")
    (text,) = session_logs(env).values()
    body = text.split("-->\n", 1)[1].rstrip("\n")
    assert len(body) <= 200
    assert answer.startswith(body + "\n")


async def test_a_second_flush_gets_a_delta_prompt(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD, "NO_REPLY", TESTS])
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    await mgr.flush("s1")
    await mgr.flush("s1")
    await mgr.flush("s1")
    assert "Already saved" not in model.prompts[0].user
    for prompt in model.prompts[1:]:  # NO_REPLY keeps the last stored text
        assert BUILD in prompt.user
        assert FLUSH_DELTA_RULE in prompt.system


async def test_a_near_duplicate_is_skipped_with_real_cosine(
    env: Env, make: Callable[..., Any]
) -> None:
    # cosine with the stored "alpha" chunk: beta 0.95 (skip), gamma 0.90 (write)
    provider = TableProvider(
        {
            "alpha": [1.0, 0.0, 0.0, 0.0],
            "beta": [0.95, 0.3122, 0.0, 0.0],
            "gamma": [0.9, 0.4359, 0.0, 0.0],
        }
    )
    answers = ["## Alpha\n\nalpha facts", "## Beta\n\nbeta facts", "## Gamma\n\ngamma facts"]
    mgr = await make(FakeChatModel(answers), provider=provider)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert (await mgr.flush("s1"))["outcome"] == "written"
    await mgr.append("s1", [user("and beta?")])
    assert (await mgr.flush("s1"))["outcome"] == "duplicate"
    await mgr.append("s1", [user("and gamma?")])
    assert (await mgr.flush("s1"))["outcome"] == "written"
    (text,) = session_logs(env).values()
    assert "alpha facts" in text and "gamma facts" in text and "beta facts" not in text


async def test_the_same_text_twice_is_a_duplicate_with_hash_embeddings(
    make: Callable[..., Any],
) -> None:
    mgr = await make(FakeChatModel([BUILD, BUILD]), provider=HashProvider(64))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert (await mgr.flush("s1"))["outcome"] == "written"
    await mgr.append("s1", [user("anything else?")])
    assert (await mgr.flush("s1"))["outcome"] == "duplicate"


async def test_without_embeddings_only_the_same_normalised_section_is_a_duplicate(
    env: Env, make: Callable[..., Any]
) -> None:
    again = BUILD.upper().replace(" ", "  ")  # same text, other case and spacing
    mgr = await make(FakeChatModel([BUILD, TESTS, again, f"{again}\n\n## New\n\nnew facts"]))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert (await mgr.flush("s1"))["outcome"] == "written"
    for question, outcome in (("q2", "written"), ("q3", "duplicate"), ("q4", "written")):
        await mgr.append("s1", [user(question)])
        assert (await mgr.flush("s1"))["outcome"] == outcome
    (text,) = session_logs(env).values()
    assert text.count("make -j4") == 1 and text.count("MAKE -J4") == 0  # one copy
    assert "new facts" in text


class CountingModel(FakeChatModel):
    """Counts how many calls are in flight at once."""

    def __init__(self, answers: list[str]) -> None:
        super().__init__(answers)
        self.in_flight = 0
        self.most_in_flight = 0

    async def complete(self, system: str, user: str) -> str:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super().complete(system, user)
        finally:
            self.in_flight -= 1


async def test_at_most_one_flush_per_session_at_a_time(make: Callable[..., Any]) -> None:
    model = CountingModel([BUILD, TESTS, "NO_REPLY"])
    model.gate = anyio.Event()
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    results: dict[str, Any] = {}

    async def run(name: str, fn: Callable[[], Any]) -> None:
        results[name] = await fn()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "manual", lambda: mgr.flush("s1"))
        await wait_until(lambda: model.calls == 1)
        assert mgr.status()[0]["flushing"] is True
        with pytest.raises(Busy):
            await mgr.flush("s1")
        # a pre_compaction flush of the same session waits for the running one
        await mgr.append("s1", [user("a question that arrived during the flush")])
        tg.start_soon(run, "usage", lambda: mgr.usage("s1", 90_000, 100_000, 85, 0))
        await anyio.sleep(0.05)
        assert model.calls == 1
        model.gate.set()
    assert model.most_in_flight == 1
    assert model.calls == 2
    assert results["manual"]["outcome"] == "written"
    assert results["usage"]["flushed"] is True


async def test_without_a_model_flush_says_so_and_nothing_else_breaks(
    env: Env, make: Callable[..., Any]
) -> None:
    mgr = await make(None, config=with_flush(idle_timeout_secs=0.05))
    async with running(mgr):
        await mgr.open("s1")
        await mgr.append("s1", CONVERSATION)
        with pytest.raises(ModelNotConfigured) as caught:
            await mgr.flush("s1")
        assert caught.value.code == "model_not_configured"
        assert await mgr.usage("s1", 99_000, 100_000, 85, 0) == {"flushed": False}
        assert mgr.status()[0]["next_idle_flush"] is None
        assert (await mgr.close("s1"))["summary_written"] is True
    (text,) = session_logs(env).values()
    assert text.startswith("## Session Summary")


async def test_a_model_failure_is_reported_and_recorded(make: Callable[..., Any]) -> None:
    mgr = await make(FakeChatModel([ModelError("endpoint down"), RuntimeError("boom"), BUILD]))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    with pytest.raises(ModelError, match="endpoint down"):
        await mgr.flush("s1")
    assert mgr.status()[0]["last_flush"]["outcome"] == "error"
    assert mgr.status()[0]["last_flush"]["error"] == "endpoint down"
    with pytest.raises(ModelError, match="boom"):
        await mgr.flush("s1")
    assert (await mgr.flush("s1"))["outcome"] == "written"


# ---------------------------------------------------------------------- pre_compaction


@pytest.mark.parametrize(
    ("window", "below", "at"),
    [(100_000, 80_999, 81_000), (10_001, 4_500, 4_501)],
)
async def test_pre_compaction_fires_at_the_threshold_once_per_count(
    make: Callable[..., Any], window: int, below: int, at: int
) -> None:
    model = FakeChatModel([BUILD, TESTS])
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert await mgr.usage("s1", below, window, 85, 0) == {"flushed": False}
    assert model.calls == 0
    out = await mgr.usage("s1", at, window, 85, 0)
    assert out["flushed"] is True and out["outcome"] == "written"
    assert mgr.status()[0]["last_flush"]["trigger"] == "pre_compaction"
    await mgr.append("s1", [user("more work after the flush")])
    assert await mgr.usage("s1", at + 500, window, 85, 0) == {"flushed": False}
    assert model.calls == 1
    out = await mgr.usage("s1", at, window, 85, 1)  # after a compaction: once more
    assert out["flushed"] is True
    assert model.calls == 2
    assert mgr.status()[0]["usage"]["tokens"] == at


async def test_pre_compaction_count_survives_a_restart(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD, TESTS])
    first = await make(model)
    await first.open("s1")
    await first.append("s1", CONVERSATION)
    assert (await first.usage("s1", 90_000, 100_000, 85, 3))["flushed"] is True
    second = await make(model)
    await second.open("s1")
    await second.append("s1", [user("new")])
    assert (await second.usage("s1", 90_000, 100_000, 85, 3))["flushed"] is False
    assert model.calls == 1


async def test_pre_compaction_is_off_when_flush_is_disabled(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD])
    mgr = await make(model, config=with_flush(enabled=False))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    assert await mgr.usage("s1", 99_000, 100_000, 85, 0) == {"flushed": False}
    assert (await mgr.flush("s1"))["outcome"] == "written"  # manual still works


async def test_usage_rejects_nonsense(make: Callable[..., Any]) -> None:
    mgr = await make(FakeChatModel())
    await mgr.open("s1")
    with pytest.raises(InvalidParams):
        await mgr.usage("s1", 10, 0, 85, 0)
    with pytest.raises(InvalidParams):
        await mgr.usage("s1", 10, 100, 85, -1)


# ---------------------------------------------------------------------- idle


async def test_idle_flush_fires_after_the_last_message_and_is_reset_by_new_ones(
    env: Env, make: Callable[..., Any]
) -> None:
    timeout = 0.4
    model = FakeChatModel([BUILD, "NO_REPLY", TESTS])
    mgr = await make(model, config=with_flush(idle_timeout_secs=timeout))
    async with running(mgr):
        await mgr.open("s1")
        # messages every 50 ms for 0.8 s: twice the timeout, yet no idle flush
        for message in CONVERSATION * 2 + CONVERSATION[:2]:
            await anyio.sleep(0.05)
            await mgr.append("s1", [message])
        last_append = anyio.current_time()
        assert model.calls == 0
        assert mgr.status()[0]["next_idle_flush"] is not None
        await wait_until(lambda: model.calls == 1)
        assert anyio.current_time() - last_append >= timeout - 0.01
        await wait_until(lambda: mgr.status()[0]["last_flush"] is not None)
        assert mgr.status()[0]["last_flush"]["trigger"] == "idle"
        assert mgr.status()[0]["next_idle_flush"] is None
        # nothing new since the flush: no second idle flush
        await anyio.sleep(timeout * 2)
        assert model.calls == 1
        # a new message arms it again
        await mgr.append("s1", [user("one more thing about the Makefile")])
        await wait_until(lambda: model.calls == 2)
        await wait_until(lambda: mgr.status()[0]["last_flush"]["outcome"] == "nothing_to_store")
        await anyio.sleep(timeout * 2)
        assert model.calls == 2  # NO_REPLY also counts as flushed
    (text,) = session_logs(env).values()
    assert "trigger=idle" in text and BUILD in text


async def test_idle_flush_zero_disables_it(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD])
    mgr = await make(model, config=with_flush(idle_timeout_secs=0))
    async with running(mgr):
        await mgr.open("s1")
        await mgr.append("s1", CONVERSATION)
        assert mgr.status()[0]["next_idle_flush"] is None
        await anyio.sleep(0.5)
        assert model.calls == 0


async def test_idle_timer_covers_recovered_sessions(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD])
    config = with_flush(idle_timeout_secs=0.2)
    first = await make(model, config=config)
    await first.open("s1")
    await first.append("s1", CONVERSATION)  # no run(): no timers in the crashed daemon
    second = await make(model, config=config)
    async with running(second):
        await wait_until(lambda: model.calls == 1)


async def test_an_idle_flush_failure_does_not_stop_the_manager(make: Callable[..., Any]) -> None:
    model = FakeChatModel([ModelError("down"), BUILD])
    mgr = await make(model, config=with_flush(idle_timeout_secs=0.1))
    async with running(mgr):
        await mgr.open("s1")
        await mgr.append("s1", CONVERSATION)
        await wait_until(lambda: (mgr.status()[0]["last_flush"] or {}).get("outcome") == "error")
        await mgr.append("s1", [user("retry please")])
        await wait_until(lambda: mgr.status()[0]["last_flush"]["outcome"] == "written")


# ---------------------------------------------------------------------- close and logs


async def test_close_writes_the_summary_and_removes_the_journal(
    env: Env, make: Callable[..., Any]
) -> None:
    clock = Clock(utc("2025-03-04T10:00:00"))
    mgr = await make(clock=clock)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    out = await mgr.close("s1")
    assert out["summary_written"] is True
    name = "2025-03-04-why-does-the-build-fail-on-ci-s1.md"
    assert out["path"].endswith(f"sessions/{name}")
    text = session_logs(env)[name]
    assert "## Session Summary" in text and "2025-03-04 (UTC)" in text
    assert "Messages: 7" in text
    assert "- How do we pin the compiler in the CI image?" in text
    assert not journal_path(env, "s1").exists()
    assert mgr.status() == []
    with pytest.raises(NotFound):
        await mgr.append("s1", [user("late")])


async def test_a_retried_close_writes_a_summary_holding_a_lone_surrogate_once(
    env: Env, make: Callable[..., Any]
) -> None:
    # A client's "\ud83d" (half an emoji) in a topic line is written "?"; the retry of a close
    # killed after its summary compares what was written, so it adds no second copy.
    mgr = await make()
    await mgr.open("s1")
    session = mgr._get("s1")
    summary = "## Session Summary\n\n- fix the \ud83d build\n"
    day = date(2025, 3, 4)
    path = await mgr.logs.append(session, summary, day, once=True)
    again = await mgr.logs.append(session, summary, day, once=True)
    assert again == path
    text = path.read_text(encoding="utf-8")
    assert text.count("## Session Summary") == 1
    assert "- fix the ? build" in text


async def test_close_below_the_thresholds_writes_no_summary(
    env: Env, make: Callable[..., Any]
) -> None:
    mgr = await make()
    await mgr.open("s1")
    await mgr.append("s1", [user("hi"), user("/compact"), user("ok"), assistant("x" * 500)])
    assert (await mgr.close("s1"))["summary_written"] is False
    assert session_logs(env) == {}
    assert not journal_path(env, "s1").exists()


async def test_subagent_sessions_never_write_a_summary(env: Env, make: Callable[..., Any]) -> None:
    mgr = await make()
    await mgr.open("sub", subagent=True)
    await mgr.append("sub", CONVERSATION * 3)
    assert (await mgr.close("sub"))["summary_written"] is False
    assert session_logs(env) == {}
    assert not journal_path(env, "sub").exists()


async def test_one_log_per_session_per_day_appended_never_overwritten(
    env: Env, make: Callable[..., Any]
) -> None:
    clock = Clock(utc("2025-03-04T08:00:00"))
    model = FakeChatModel([BUILD, TESTS, "## Late\n\nlate night notes"])
    mgr = await make(model, clock=clock)
    await mgr.open("abcdef123456")
    # the first flush happens before any real user message: the slug is "session" ...
    await mgr.append("abcdef123456", [user("/init"), assistant("initialised")])
    await mgr.flush("abcdef123456")
    # ... and stays so all day, even once a real user message arrived
    await mgr.append("abcdef123456", CONVERSATION)
    clock.now += 3600
    await mgr.flush("abcdef123456")
    day1 = "2025-03-04-session-abcdef12.md"
    assert list(session_logs(env)) == [day1]
    first_text = session_logs(env)[day1]
    assert first_text.index(BUILD) < first_text.index(TESTS)
    assert "2025-03-04T08:00:00Z" in first_text and "2025-03-04T09:00:00Z" in first_text
    # after midnight UTC: a new file named from the first real user message
    clock.now = utc("2025-03-05T00:01:00")
    await mgr.append("abcdef123456", [user("one more late question")])
    await mgr.flush("abcdef123456")
    await mgr.close("abcdef123456")
    day2 = "2025-03-05-why-does-the-build-fail-on-ci-abcdef12.md"
    logs = session_logs(env)
    assert list(logs) == [day1, day2]
    assert logs[day1] == first_text
    assert "late night notes" in logs[day2] and "## Session Summary" in logs[day2]


async def test_a_person_edit_of_the_log_is_kept(env: Env, make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD, TESTS])
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    path = env.root / (await mgr.flush("s1"))["path"]
    path.write_text(path.read_text() + "\nA note a person added.\n")
    await mgr.append("s1", [user("and the tests?")])
    await mgr.flush("s1")
    text = path.read_text()
    assert text.index(BUILD) < text.index("A note a person added.") < text.index(TESTS)


async def test_close_waits_for_a_running_flush(env: Env, make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD])
    model.gate = anyio.Event()
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    async with anyio.create_task_group() as tg:
        tg.start_soon(mgr.flush, "s1")
        await wait_until(lambda: model.calls == 1)
        closed: dict[str, Any] = {}

        async def close() -> None:
            closed.update(await mgr.close("s1"))

        tg.start_soon(close)
        await anyio.sleep(0.05)
        assert closed == {}
        model.gate.set()
    (text,) = session_logs(env).values()
    assert text.index(BUILD) < text.index("## Session Summary")


# ---------------------------------------------------------------------- search and status


async def test_a_flushed_section_is_found_by_the_next_search(
    env: Env, make: Callable[..., Any]
) -> None:
    mgr = await make(FakeChatModel([TESTS]))
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    out = await mgr.flush("s1")
    response = await mgr.memory.search("zanzibar fixture")
    assert [hit.path for hit in response.results] == [out["path"]]
    assert response.results[0].source == "session"
    assert response.synced_paths == 0  # indexed when written, not by the search


async def test_status_lists_each_open_session(make: Callable[..., Any]) -> None:
    clock = Clock(utc("2025-03-04T10:00:00"))
    mgr = await make(FakeChatModel([BUILD]), config=with_flush(idle_timeout_secs=300), clock=clock)
    async with running(mgr):
        await mgr.open("a")
        await mgr.open("b", subagent=True)
        clock.now += 10
        await mgr.append("a", CONVERSATION)
        await mgr.flush("a")
        await mgr.append("a", [user("next")])
        rows = {row["session_id"]: row for row in mgr.status()}
    assert rows["a"]["messages"] == len(CONVERSATION) + 1
    assert rows["a"]["unflushed"] == 1
    assert rows["a"]["last_activity"] == rfc3339(clock.now)  # reply times: RFC 3339 UTC
    assert rows["a"]["next_idle_flush"] == rfc3339(clock.now + 300)
    assert rows["a"]["last_flush"]["outcome"] == "written"
    assert rows["a"]["last_flush"]["trigger"] == "manual"
    assert rows["b"]["subagent"] is True
    assert rows["b"]["messages"] == 0 and rows["b"]["last_flush"] is None
    assert rows["b"]["next_idle_flush"] is None


async def test_a_manual_flush_of_everything_stops_the_idle_timer(make: Callable[..., Any]) -> None:
    model = FakeChatModel([BUILD])
    mgr = await make(model, config=with_flush(idle_timeout_secs=0.3))
    async with running(mgr):
        await mgr.open("s1")
        await mgr.append("s1", CONVERSATION)
        assert mgr.status()[0]["next_idle_flush"] is not None
        await mgr.flush("s1")
        assert mgr.status()[0]["next_idle_flush"] is None
        await anyio.sleep(0.6)
        assert model.calls == 1


async def test_pre_compaction_with_nothing_new_does_not_call_the_model(
    make: Callable[..., Any],
) -> None:
    model = FakeChatModel([BUILD, TESTS])
    mgr = await make(model)
    await mgr.open("s1")
    await mgr.append("s1", CONVERSATION)
    await mgr.flush("s1")
    out = await mgr.usage("s1", 90_000, 100_000, 85, 0)
    assert out == {"flushed": True, "outcome": "nothing_to_store"}
    assert model.calls == 1
