"""Session transcript journals: durable appends, crash recovery, flush state (SPEC §7, §15)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.core.flushing import Message
from memoryd.errors import MemorydError, StorageError
from memoryd.store.journal import (
    FlushState,
    Journal,
    JournalHeader,
    journal_name,
    load,
    load_all,
    open_sessions,
    read_header,
)


@pytest.fixture
def live(tmp_path: Path) -> Path:
    return tmp_path / "ws" / "sessions" / ".live"


def header(sid: str = "s-1", opened_at: float = 100.0, subagent: bool = False) -> JournalHeader:
    return JournalHeader("/work/project", sid, subagent, opened_at)


def test_a_new_journal_holds_its_header_and_is_private(live: Path) -> None:
    j = Journal(live, "s-1")
    assert j.open(header(subagent=True)) is None
    j.close()
    assert j.path == live / "s-1.jsonl"
    assert stat.S_IMODE(j.path.stat().st_mode) == 0o600
    first = json.loads(j.path.read_text().splitlines()[0])
    assert first == {
        "type": "header",
        "version": 1,
        "workspace": "/work/project",
        "session_id": "s-1",
        "subagent": True,
        "opened_at": 100.0,
    }


def test_appended_messages_are_on_disk_when_append_returns(live: Path) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", "first"), Message("assistant", "second")], at=101.0)
    j.append_messages([Message("tool", "third")], at=102.5)
    state = load(j.path)  # a separate read while the journal is still open
    assert state is not None
    assert [(m.message, m.at) for m in state.messages] == [
        (Message("user", "first"), 101.0),
        (Message("assistant", "second"), 101.0),
        (Message("tool", "third"), 102.5),
    ]
    assert not state.torn and state.bad_lines == 0
    j.close()


def test_each_append_batch_is_synced_after_it_is_written(
    live: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    events: list[str] = []
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        events.append("write")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fdatasync", lambda fd: events.append("sync"), raising=False)
    monkeypatch.setattr(os, "fsync", lambda fd: events.append("sync"))
    j.append_messages([Message("user", "a"), Message("user", "b")], at=1.0)
    assert events == ["write", "sync"]
    j.append_messages([Message("user", "c")], at=2.0)
    assert events == ["write", "sync", "write", "sync"]
    j.close()


@pytest.mark.parametrize(
    "content",
    ["ünïcödé — 日本語", "line one\nline two\r\n", '{"type": "header"}', "\ud800 lone", ""],
)
def test_any_content_round_trips(live: Path, content: str) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", content)], at=1.0)
    j.close()
    state = load(j.path)
    assert state is not None
    assert state.messages[0].message.content == content


def test_a_torn_last_line_is_ignored_and_cut_before_the_next_append(live: Path) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", "acknowledged")], at=1.0)
    j.close()
    with j.path.open("ab") as handle:  # a crash in the middle of the next write
        handle.write(b'{"type":"message","role":"user","content":"never ackn')
    state = load(j.path)
    assert state is not None and state.torn
    assert [m.message.content for m in state.messages] == ["acknowledged"]

    again = Journal(live, "s-1")
    recovered = again.open(header())
    assert recovered is not None
    assert [m.message.content for m in recovered.messages] == ["acknowledged"]
    again.append_messages([Message("user", "after restart")], at=2.0)
    again.close()
    final = load(j.path)
    assert final is not None
    assert not final.torn and final.bad_lines == 0
    assert [m.message.content for m in final.messages] == ["acknowledged", "after restart"]


def test_a_failed_append_leaves_no_partial_line(
    live: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", "kept")], at=1.0)
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 10:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(StorageError, match="ENOSPC"):
        j.append_messages([Message("user", "x" * 100)], at=2.0)
    monkeypatch.setattr(os, "write", real_write)
    j.append_messages([Message("user", "next")], at=3.0)
    j.close()
    state = load(j.path)
    assert state is not None and state.bad_lines == 0 and not state.torn
    assert [m.message.content for m in state.messages] == ["kept", "next"]


def test_flush_state_log_names_and_close_are_recovered(live: Path) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", "a")], at=1.0)
    j.record_flush(FlushState(last_text="## Old", last_outcome="written", flushed_through=1))
    second = FlushState(
        last_text="## New",
        last_at=5.0,
        last_outcome="duplicate",
        last_trigger="pre_compaction",
        compaction_count=3,
        flushed_through=7,
    )
    j.record_flush(second)
    j.record_log("2025-01-02", "2025-01-02-fix-s-1.md")
    j.close()
    state = Journal(live, "s-1").open(header())
    assert state is not None
    assert state.flush == second
    assert state.log_names == {"2025-01-02": "2025-01-02-fix-s-1.md"}
    assert not state.closed

    j2 = Journal(live, "s-1")
    j2.open(header())
    j2.record_closed(summary_written=True)
    j2.close()
    closed = load(j.path)
    assert closed is not None and closed.closed


def test_remove_deletes_the_journal_and_reopening_starts_fresh(live: Path) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    j.append_messages([Message("user", "a")], at=1.0)
    j.remove()
    assert not j.path.exists()
    j.remove()  # idempotent
    fresh = Journal(live, "s-1")
    assert fresh.open(header()) is None
    fresh.close()
    state = load(fresh.path)
    assert state is not None and state.messages == ()


@pytest.mark.parametrize("sid", ["../../etc/passwd", "a/b", ".hidden", "x" * 300, "é", "a."])
def test_session_ids_that_are_not_file_names_are_hashed(live: Path, sid: str) -> None:
    name = journal_name(sid)
    assert name.startswith("sid-") and "/" not in name
    j = Journal(live, sid)
    j.open(header(sid))
    j.close()
    assert j.path.parent == live
    state = load(j.path)
    assert state is not None and state.header.session_id == sid


def test_plain_session_ids_name_their_journal() -> None:
    assert journal_name("3f2a9c1e-7b4d-4e0a-9c55-0123456789ab") == (
        "3f2a9c1e-7b4d-4e0a-9c55-0123456789ab.jsonl"
    )


def test_a_journal_of_another_session_is_never_overwritten(live: Path) -> None:
    live.mkdir(parents=True)
    other = Journal(live, "other")
    other.open(header("other"))
    other.close()
    os.rename(other.path, live / "mine.jsonl")
    with pytest.raises(StorageError, match="belongs to session 'other'"):
        Journal(live, "mine").open(header("mine"))
    state = load(live / "mine.jsonl")
    assert state is not None and state.header.session_id == "other"


def test_a_journal_without_a_valid_header_is_replaced_on_open(live: Path) -> None:
    live.mkdir(parents=True)
    (live / "s-1.jsonl").write_bytes(b'{"type":"head')  # crash while creating it
    assert load_all(live) == []
    j = Journal(live, "s-1")
    assert j.open(header()) is None
    j.close()
    state = load(j.path)
    assert state is not None and state.header.session_id == "s-1"


def test_load_all_returns_open_sessions_oldest_first(live: Path, tmp_path: Path) -> None:
    for sid, opened in (("late", 300.0), ("early", 100.0), ("mid", 200.0)):
        j = Journal(live, sid)
        j.open(header(sid, opened))
        j.append_messages([Message("user", f"hi from {sid}")], at=opened + 1)
        j.close()
    (live / "notes.txt").write_text("not a journal")
    states = load_all(live)
    assert [s.header.session_id for s in states] == ["early", "mid", "late"]
    assert states[0].messages[0].message.content == "hi from early"
    assert load_all(tmp_path / "missing") == []
    headers = open_sessions(tmp_path)
    assert sorted(h.session_id for h in headers) == ["early", "late", "mid"]


def test_acknowledged_appends_survive_sigkill(live: Path) -> None:
    """A child appends, acknowledging each batch on stdout, then dies by SIGKILL."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from memoryd.core.flushing import Message
        from memoryd.store.journal import Journal, JournalHeader
        j = Journal(Path({str(live)!r}), "crash")
        j.open(JournalHeader("/w", "crash", False, 1.0))
        for i in range(25):
            j.append_messages([Message("user", f"message {{i}}")], at=float(i))
            sys.stdout.write(f"ack {{i}}\\n"); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acked = [line.split()[1] for line in proc.stdout.splitlines()]
    assert len(acked) == 25
    (state,) = load_all(live)
    contents = [m.message.content for m in state.messages]
    assert contents == [f"message {i}" for i in acked]


def fail_directory_fsync(monkeypatch: pytest.MonkeyPatch, code: int) -> list[int]:
    """``os.fsync`` of a directory fails with ``code`` (file fsyncs still work); returns the
    list of failures so far."""
    real_fsync = os.fsync
    failed: list[int] = []

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            failed.append(fd)
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def test_a_failed_directory_sync_on_create_is_a_storage_error_and_leaves_nothing(
    live: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live.mkdir(parents=True)
    failed = fail_directory_fsync(monkeypatch, errno.EIO)
    j = Journal(live, "s-1")
    with pytest.raises(StorageError, match=r"cannot create journal .*EIO"):
        j.open(header())
    assert failed and not j.path.exists()  # the open was never acknowledged
    monkeypatch.undo()
    assert j.open(header()) is None  # a retry creates it anew
    j.append_messages([Message("user", "a")], at=1.0)
    j.close()
    state = load(j.path)
    assert state is not None and [m.message.content for m in state.messages] == ["a"]


def test_a_failed_directory_sync_on_remove_is_a_storage_error_and_a_retry_syncs_again(
    live: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(live, "s-1")
    j.open(header())
    failed = fail_directory_fsync(monkeypatch, errno.EIO)
    with pytest.raises(StorageError, match=r"cannot remove journal .*EIO"):
        j.remove()
    with pytest.raises(StorageError, match="EIO"):
        j.remove()  # the file is gone, but its removal is still not durable
    assert len(failed) == 2
    monkeypatch.undo()
    j.remove()
    assert not j.path.exists()


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOTSUP])
def test_file_systems_that_cannot_sync_a_directory_are_tolerated(
    live: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    live.mkdir(parents=True)
    failed = fail_directory_fsync(monkeypatch, code)
    j = Journal(live, "s-1")
    assert j.open(header()) is None
    j.append_messages([Message("user", "a")], at=1.0)
    j.remove()
    assert len(failed) == 2 and not j.path.exists()


def _briefly(fifos: list[Path], fn: Callable[..., object], *args: Any, **kw: Any) -> object:
    """``fn(*args, **kw)`` in a daemon thread, failing after 5 s (a blocked FIFO reader is
    then released by opening each FIFO's write end and closing it: the test never hangs)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn(*args, **kw))
        except MemorydError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"{getattr(fn, '__name__', fn)} blocked on a FIFO")
    return out[0]


def test_a_fifo_named_like_a_journal_never_blocks_recovery(live: Path, tmp_path: Path) -> None:
    """Recovery, the daemon's start and an open read a journal through the regular-file
    opener: a FIFO in ``sessions/.live`` is skipped (or refused), never opened for long."""
    j = Journal(live, "real")
    j.open(header("real"))
    j.close()
    fifos = [live / "fifo.jsonl", live / "piped.jsonl"]
    for fifo in fifos:
        os.mkfifo(fifo)
    states = _briefly(fifos, load_all, live, messages=False)
    assert [s.header.session_id for s in states] == ["real"]  # type: ignore[attr-defined]
    headers = _briefly(fifos, open_sessions, tmp_path)
    assert [h.session_id for h in headers] == ["real"]  # type: ignore[attr-defined]
    opened = _briefly(fifos, Journal(live, "piped").open, header("piped"))
    assert isinstance(opened, StorageError) and "not a regular file" in str(opened)


def test_read_header_reads_a_bounded_first_line(live: Path) -> None:
    """A journal-named file without a newline is not read whole to find a header."""
    live.mkdir(parents=True)
    big = live / "big.jsonl"
    big.write_bytes(b" " * (16 << 20))
    tracemalloc.start()
    try:
        assert read_header(big) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
