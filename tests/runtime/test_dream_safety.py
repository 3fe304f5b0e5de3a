"""Issue #16: nothing a dream does can lose or misfile memory (real files, a fake model).

Each test is one hostile case from the issue: an answer that ignores the logs or empties the
sections it keeps, a 10 MB answer, a MEMORY.md over the input cap, a NUL byte in an answer,
a log dated in the future, undo after a note was remembered, and ``remember`` after a dream.
"""

from __future__ import annotations

import codecs
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli.render import render_dream_status
from memoryd.core.config import DreamConfig
from memoryd.errors import MemoryChanged
from memoryd.providers.llm import FakeChatModel
from memoryd.runtime.workspace.dream_gather import text_after_blank
from memoryd.runtime.workspace.dreamer import Dreamer, read_journal
from memoryd.store.history import backups
from tests.runtime.conftest import Env, MemoryFactory

pytestmark = pytest.mark.anyio

OLD_MEMORY = """# Memory: project

## Build system
We build with hatch and publish wheels to the internal index; CI runs on every push.

## Database choice
SQLite with WAL mode was chosen over Postgres because the daemon is single user.
"""

LOG_TEXT = """## Flaky watcher
inotify limits were exhausted; raising fs.inotify.max_user_watches fixed it.
"""

GOOD_ANSWER = OLD_MEMORY + "\n" + LOG_TEXT


def dreamer(env: Env, model: Any, **config: Any) -> Dreamer:
    return Dreamer(env.workspace, DreamConfig(**config), model)


def aged_log(env: Env, name: str = "2025-01-01-watcher-aaaaaaaa.md", text: str = LOG_TEXT) -> Path:
    path = env.session(name, text)
    stamp = time.time() - 86400
    os.utime(path, (stamp, stamp))
    return path


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def on_disk_anywhere(env: Env, needle: str) -> bool:
    """Whether ``needle`` is in MEMORY.md, a live log or anything under .history/."""
    ws = env.workspace
    places = [ws.memory_file, *ws.sessions_dir.glob("*.md"), *ws.history_dir.rglob("*.md")]
    return any(needle in read(p) for p in places if p.is_file())


@pytest.fixture
def memory_file(env: Env) -> Path:
    env.workspace.memory_file.write_text(OLD_MEMORY, encoding="utf-8")
    return env.workspace.memory_file


# ---------------------------------------------------------------------------- archive


async def test_consumed_logs_are_archived_and_undo_brings_them_back(
    env: Env, memory_file: Path
) -> None:
    log = aged_log(env)
    d = dreamer(env, FakeChatModel([GOOD_ANSWER]))
    result = await d.run(manual=True)
    assert result.outcome == "written", result
    assert not log.exists()
    archived = env.workspace.history_dir / "sessions" / str(result.dream_id) / log.name
    assert read(archived) == LOG_TEXT  # the log's text is on disk, whole

    out = await d.undo()
    assert read(log) == LOG_TEXT and not archived.exists()
    assert read(memory_file) == OLD_MEMORY
    assert out["logs_restored"] == [log.name]
    assert out["restored"] and out["saved_current"] and not out["forced"]


async def test_archives_follow_keep_history_and_keep_logs_days(env: Env, memory_file: Path) -> None:
    clock = [time.time()]
    model = FakeChatModel()
    d = Dreamer(
        env.workspace,
        DreamConfig(keep_history=1, keep_logs_days=1.0),
        model,
        clock=lambda: clock[0],
    )
    ids = []
    for i in range(3):
        aged_log(env, f"2025-01-0{i + 1}-watcher-{i:08d}.md", f"## Topic {i}\nzeta{i} facts\n")
        model.queue(f"{read(memory_file)}\n## Topic {i}\nzeta{i} facts\n")
        result = await d.run(manual=True)
        assert result.outcome == "written", result
        ids.append(result.dream_id)
        clock[0] += 3600  # an hour apart: every archive is younger than keep_logs_days
    archive = env.workspace.history_dir / "sessions"
    assert sorted(p.name for p in archive.iterdir()) == sorted(ids)  # young: all kept
    clock[0] += 2 * 86400
    aged_log(env, "2025-01-09-watcher-99999999.md", "## Topic 9\nzeta9 facts\n")
    model.queue(f"{read(memory_file)}\n## Topic 9\nzeta9 facts\n")
    last = await d.run(manual=True)
    assert [p.name for p in archive.iterdir()] == [last.dream_id]  # old and beyond keep_history
    assert len(backups(env.workspace.history_dir)) == 1


# ---------------------------------------------------------------------------- refusals


async def test_the_old_memory_sent_back_unchanged_is_refused_and_loses_no_log(
    env: Env, memory_file: Path
) -> None:
    log = aged_log(env)
    d = dreamer(env, FakeChatModel([OLD_MEMORY]))
    result = await d.run(manual=True)
    assert (result.outcome, result.reason) == ("refused", "ignores_logs")
    assert read(log) == LOG_TEXT and read(memory_file) == OLD_MEMORY
    assert result.archived == ()
    [entry] = read_journal(env.workspace.history_dir)
    assert (entry["outcome"], entry["reason"]) == ("refused", "ignores_logs")
    lock = env.workspace.lock_path  # released with the time advanced: the gate closes
    assert read(lock) == "" and abs(lock.stat().st_mtime - time.time()) < 60


async def test_headings_kept_with_emptied_bodies_are_refused(env: Env, memory_file: Path) -> None:
    log = aged_log(env)
    hostile = "# Memory: project\n\n## Build system\n\n## Database choice\n\n" + LOG_TEXT
    result = await dreamer(env, FakeChatModel([hostile])).run(manual=True)
    assert (result.outcome, result.reason) == ("refused", "loss"), result
    assert result.loss is not None and set(result.loss.lost) == {"Build system", "Database choice"}
    assert read(log) == LOG_TEXT and read(memory_file) == OLD_MEMORY


async def test_a_huge_answer_is_refused(env: Env, memory_file: Path) -> None:
    log = aged_log(env)
    huge = GOOD_ANSWER + "\n## Padding\n" + ("x" * 99 + "\n") * 100_000  # 10 MB
    result = await dreamer(env, FakeChatModel([huge])).run(manual=True)
    assert (result.outcome, result.reason) == ("refused", "too_large"), result
    assert read(memory_file) == OLD_MEMORY and log.exists()
    assert result.detail is not None and "32000" in result.detail


async def test_a_memory_file_over_the_input_cap_is_never_sent(env: Env) -> None:
    big = "# Memory\n\n## Big\n" + "fact " * 8000  # 40 000 characters
    env.workspace.memory_file.write_text(big, encoding="utf-8")
    log = aged_log(env)
    model = FakeChatModel([GOOD_ANSWER])
    d = dreamer(env, model)
    result = await d.run(manual=True)
    assert (result.outcome, result.reason) == ("skipped", "memory_too_large"), result
    assert result.detail is not None and "max_input_chars" in result.detail
    assert model.calls == 0 and log.exists()
    status = await d.status()
    assert status["memory_too_large"] is True and status["memory_chars"] > 32000
    assert "MEMORY.md too large" in render_dream_status(status)  # what `dream --status` says


async def test_nul_and_control_characters_never_reach_memory(env: Env, memory_file: Path) -> None:
    aged_log(env)
    answer = GOOD_ANSWER.replace("fixed it.", "fixed\x00 it.\x1b[31m\x07") + "\x7f"
    result = await dreamer(env, FakeChatModel([answer])).run(manual=True)
    assert result.outcome == "written", result
    text = read(memory_file)
    assert "fixed it.[31m" in text
    assert not any(c in text for c in "\x00\x1b\x07\x7f")


async def test_the_input_cap_holds_memory_and_logs_together(env: Env, memory_file: Path) -> None:
    aged_log(env, "2025-01-02-big-bbbbbbbb.md", "## Big log\n" + "word " * 20_000)
    model = FakeChatModel(["# Memory\n\n## Big log\nword word\n" + OLD_MEMORY.split("\n", 1)[1]])
    await dreamer(env, model, max_input_chars=5000).run(manual=True)
    assert len(model.prompts[0].user) <= 5000


# ---------------------------------------------------------------------------- future mtime


async def test_a_log_dated_in_the_future_is_consumed_once(env: Env, memory_file: Path) -> None:
    log = env.session("2099-01-01-future-ffffffff.md", "## Time travel\nquasar notes\n")
    future = time.time() + 30 * 86400
    os.utime(log, (future, future))
    model = FakeChatModel()
    d = dreamer(env, model, min_hours=0, min_sessions=1)
    assert d.gates().count == 1
    model.queue(*[read(memory_file) + "\n## Time travel\nquasar notes\n"] * 3)
    outcomes = [(await d.run(manual=True)).outcome for _ in range(3)]
    assert outcomes == ["written", "skipped", "skipped"]  # nothing new after the first
    assert read(memory_file).count("quasar") == 1
    assert model.calls == 1  # sent to the model once
    model = FakeChatModel()
    assert d.gates().count == 0  # the gate does not count it forever
    assert log.exists()  # just written (its status change is recent): not archived yet
    # Once it is no longer recent, the next dream archives it without sending it again.
    aged_log(env)
    model.queue(read(memory_file) + "\n" + LOG_TEXT)
    later = await Dreamer(env.workspace, DreamConfig(), model, recent_secs=0).run(manual=True)
    assert later.outcome == "written", later
    assert f"--- Session: {log.name} ---" not in model.prompts[-1].user
    assert log.name in [p.name for p in later.archived]
    assert read(memory_file).count("quasar") == 1
    assert on_disk_anywhere(env, "quasar notes")


# ---------------------------------------------------------------------------- undo and remember


async def test_undo_refuses_when_memory_changed_since_the_dream_unless_forced(
    env: Env, open_memory: MemoryFactory
) -> None:
    memory = await open_memory()
    aged_log(env, "2025-01-01-one-11111111.md", "## First\nalpha facts\n")
    model = FakeChatModel(["# Memory\n\n## First\nalpha facts\n"])
    d = dreamer(env, model)
    assert (await d.run(manual=True)).backup is None  # the first dream created MEMORY.md
    await memory.remember("Remembered after the dream: keep the cache warm")
    aged_log(env, "2025-01-02-two-22222222.md", "## Second\nbeta facts\n")
    model.queue(read(env.workspace.memory_file) + "\n## Second\nbeta facts\n")
    assert (await d.run(manual=True)).outcome == "written"

    await d.undo()  # MEMORY.md is again what it was before the second dream: note included
    assert "keep the cache warm" in read(env.workspace.memory_file)
    with pytest.raises(MemoryChanged, match="--force"):
        await d.undo()  # would delete MEMORY.md, the note with it
    assert "keep the cache warm" in read(env.workspace.memory_file)

    out = await d.undo(force=True)
    assert out["forced"] and out["removed"]
    saved = env.workspace.history_dir / out["saved_current"]
    assert "keep the cache warm" in read(saved)  # the replaced file is in .history/
    assert out["logs_restored"] == ["2025-01-01-one-11111111.md"]


async def test_remember_after_a_dream_goes_above_the_footer(
    env: Env, memory_file: Path, open_memory: MemoryFactory
) -> None:
    aged_log(env)
    assert (await dreamer(env, FakeChatModel([GOOD_ANSWER])).run(manual=True)).outcome == "written"
    memory = await open_memory()
    await memory.remember("Deploys go through the blue-green switch")
    text = read(memory_file)
    lines = text.rstrip("\n").split("\n")
    assert lines[-1].startswith("<!-- dream ")
    assert text.index("## Deploys go through") < text.index("<!-- dream ")


# ------------------------------------------------------------------ bounded reading


MIB = 1 << 20


def huge_log(path: Path, size: int) -> Path:
    """A session log of ``size`` bytes of real text, written 1 MiB at a time."""
    line = b"line: the zebrafish build cache grew again on the CI runners\n"
    chunk = line * (MIB // len(line))
    with path.open("wb") as handle:
        handle.write(b"## Huge log\n")
        while handle.tell() < size:
            handle.write(chunk)
    return path


def peak_mib(fn: Any) -> tuple[Any, float]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()


async def test_a_huge_log_is_read_only_as_far_as_a_dream_can_use_it(env: Env) -> None:
    cap = 20_000
    small = env.session("2025-01-01-small-aaaaaaaa.md", LOG_TEXT, age_days=3)
    big = huge_log(env.workspace.sessions_dir / "2025-01-02-huge-bbbbbbbb.md", 64 * MIB)
    stamp = time.time() - 2 * 86400
    os.utime(big, (stamp, stamp))
    newer = env.session("2025-01-03-newer-cccccccc.md", "## Newer\nthe newest fact\n", age_days=1)
    d = dreamer(env, FakeChatModel([GOOD_ANSWER]), max_input_chars=cap)

    got, peak = peak_mib(d._gather)
    assert peak < 4, f"gathering took {peak:.1f} MiB"  # not the 64 MiB log
    assert got.input.consumed == (small.name,)  # as before: the huge log does not fit
    assert got.input.waiting == (big.name, newer.name)
    out = await d.run(manual=True)
    assert out.outcome == "written" and out.consumed == (small.name,)
    assert big.exists() and newer.exists() and not small.exists()

    # next time the huge log is the oldest: sent cut, archived whole, the newer one waits
    answer = GOOD_ANSWER + "\n## Huge log\nline: the zebrafish build cache grew again\n"
    d = dreamer(env, FakeChatModel([answer]), max_input_chars=cap)
    got, peak = peak_mib(d._gather)
    assert peak < 4, f"gathering took {peak:.1f} MiB"
    assert got.input.consumed == got.input.truncated == (big.name,)
    assert got.input.waiting == (newer.name,)
    assert 0 < len(got.input.text) <= cap
    out = await d.run(manual=True)
    assert out.outcome == "written" and out.truncated == (big.name,)
    assert not big.exists() and newer.exists()
    [archived] = (env.workspace.history_dir / "sessions").rglob(big.name)
    assert archived.stat().st_size >= 64 * MIB


async def test_a_memory_file_larger_than_any_input_is_too_large_unread(env: Env) -> None:
    huge_log(env.workspace.memory_file, 8 * MIB)
    aged_log(env)
    d = dreamer(env, FakeChatModel([GOOD_ANSWER]), max_input_chars=20_000)
    got, peak = peak_mib(d._gather)
    assert peak < 4 and got.input.memory_too_large
    out = await d.run(manual=True)
    assert out.reason == "memory_too_large" and "more than" in (out.detail or "")


async def test_dream_status_reads_memory_as_far_as_a_dream_could_use_it(env: Env) -> None:
    # `status` asks every workspace's dream state: a huge MEMORY.md is not read whole.
    huge_log(env.workspace.memory_file, 64 * MIB)
    d = dreamer(env, FakeChatModel([]), max_input_chars=20_000)
    status, peak = peak_mib(d._status)
    assert peak < 4, f"status took {peak:.1f} MiB"
    assert status["memory_too_large"] is True and status["memory_chars"] > 20_000


async def test_dream_status_counts_a_utf16_memory_file_in_characters(env: Env) -> None:
    text = "# Memory\n\n## Ünïcode\n" + "fact " * 200
    env.workspace.memory_file.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    status = await dreamer(env, FakeChatModel([])).status()
    assert status["memory_chars"] == len(text)


async def test_a_log_is_decoded_as_the_index_decodes_it(env: Env) -> None:
    path = env.workspace.sessions_dir / "2025-01-01-utf16-dddddddd.md"
    path.write_bytes(codecs.BOM_UTF16_LE + LOG_TEXT.encode("utf-16-le"))
    model = FakeChatModel([GOOD_ANSWER])
    assert (await dreamer(env, model).run(manual=True)).outcome == "written"
    assert LOG_TEXT.strip() in model.prompts[0].user


def _bytes_read() -> int:
    """Bytes this process has read through read(2) and its kin (Linux ``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_a_blank_headed_log_is_read_on_only_as_far_as_its_first_text(tmp_path: Path) -> None:
    """The text after a log's blank head is read up to ``max_chars`` + 1 characters, not to
    the file's end (the gather hashed the whole file already): a 256 MiB log costs 2 MiB."""
    path = tmp_path / "2025-01-01-padded.md"
    with path.open("wb") as handle:
        handle.write(b"\n" * 300_000 + b"the text after the blank head\n" + b"x" * 4096)
        handle.truncate(256 << 20)  # sparse: cheap to make, 256 MiB to read
    before = _bytes_read()
    text = text_after_blank(path, 100)
    read = _bytes_read() - before
    assert text == ("the text after the blank head\n" + "x" * 4096)[:101]
    assert read <= 2 << 20, f"read {read / (1 << 20):.0f} MiB"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
async def test_a_log_opening_with_more_blank_space_than_an_input_still_sends_its_text(
    env: Env, encoding: str
) -> None:
    """A log whose first ``4 * max_input_chars`` bytes are blank lines: the bounded read
    saw only blank space, so the log was taken with no text, consumed and archived whole
    (pruned later): its content never reached a dream. Its text after the blank space is
    sent, cut, as a whole read sent it."""
    bom = codecs.BOM_UTF16_LE if encoding == "utf-16-le" else b""
    path = aged_log(env, "2025-01-01-padded-eeeeeeee.md", "")
    path.write_bytes(bom + ("\n" * 300_000 + LOG_TEXT).encode(encoding))
    stamp = time.time() - 86400
    os.utime(path, (stamp, stamp))
    model = FakeChatModel([GOOD_ANSWER])
    d = dreamer(env, model, max_input_chars=20_000)
    got, peak = peak_mib(d._gather)
    assert peak < 4, f"gathering took {peak:.1f} MiB"
    assert LOG_TEXT.strip() in got.input.text
    assert (await d.run(manual=True)).outcome == "written"
    assert LOG_TEXT.strip() in model.prompts[0].user
