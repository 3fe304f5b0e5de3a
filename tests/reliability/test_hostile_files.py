"""Hostile memory files (issue #17 items 1, 2 and 7), against a real daemon.

On main before #17: a FIFO named ``sessions/a.md`` blocked its workspace forever (search,
remember and ``daemon.status`` timed out, SIGTERM no longer stopped the daemon); a huge
session log was read, chunked and indexed whole (200 MB: 2.6 GB RSS, 4 minutes); a UTF-16
file was indexed as garbage.
"""

from __future__ import annotations

import codecs
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.store.files import NotRegularFile, decode_text, read_regular
from memoryd.store.layout import resolve_workspace
from memoryd.store.prepare import prepare_file
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,
    processes_fixture,
    project,
    write_config,
)

home = home_fixture
processes = processes_fixture


def sessions_dir(home: Path, ws: Path) -> Path:
    directory = resolve_workspace(ws, home / "memory").sessions_dir
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def warnings_of(status: dict[str, object], ws: Path) -> dict[str, list[str]]:
    for actor in status["actors"]:  # type: ignore[attr-defined]
        if actor["workspace"] == str(ws):
            found = actor["index"]["file_warnings"]
            return {entry["path"].rsplit("/", 1)[-1]: entry["warnings"] for entry in found}
    raise AssertionError(f"no actor for {ws}")


def timed(daemon: DaemonProcess, method: str, **params: object) -> tuple[object, float]:
    started = time.monotonic()
    result = daemon.call(method, **params)
    return result, time.monotonic() - started


def test_a_fifo_named_like_a_session_log_is_skipped_and_never_blocks(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    ws = project(home, "app")
    logs = sessions_dir(home, ws)
    os.mkfifo(logs / "2025-01-01-a.md")
    (logs / "2025-01-02-b.md").write_text("# Session\n\nthe fifo neighbour note\n")
    daemon = processes().start()
    found, took = timed(daemon, "memory.search", workspace=str(ws), query="neighbour")
    assert took < 5 and [r["path"].rsplit("/", 1)[-1] for r in found["results"]] == [  # type: ignore[index]
        "2025-01-02-b.md"
    ]
    _, took = timed(daemon, "memory.remember", workspace=str(ws), text="still writable")
    assert took < 5
    status, took = timed(daemon, "daemon.status")
    assert took < 5
    assert warnings_of(status, ws) == {  # type: ignore[arg-type]
        "2025-01-01-a.md": ["skipped: not a regular file (fifo)"]
    }
    os.mkfifo(logs / "2025-01-03-c.md")  # one appearing while the daemon runs: the watcher
    time.sleep(0.5)  # reports it and the next search syncs it (it blocked forever before #17)
    found, took = timed(daemon, "memory.search", workspace=str(ws), query="neighbour")
    assert took < 5 and found["results"]  # type: ignore[index]
    daemon.call("index.reindex", workspace=str(ws))
    assert set(warnings_of(daemon.call("daemon.status"), ws)) == {
        "2025-01-01-a.md",
        "2025-01-03-c.md",
    }
    with pytest.raises(Exception, match="not a regular file"):  # memory.get never blocks
        daemon.call(
            "memory.get",
            workspace=str(ws),
            path=f"{logs.parent.name}/sessions/2025-01-01-a.md",
        )
    events = [e for e in daemon.events() if e.get("event") == "index.file_warning"]
    assert len(events) == 2  # one warning each, not one per sync
    daemon.send(signal.SIGTERM)
    assert daemon.wait(15) == 0


def test_a_file_over_max_file_bytes_is_indexed_up_to_the_limit_with_a_warning(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    write_config(home, "[index]\nmax_file_bytes = 65536\n")
    ws = project(home, "big")
    logs = sessions_dir(home, ws)
    line = "filler words that repeat and repeat to pad the session log out\n"
    head = "# Session\n\nthe early needle is here\n\n"
    body = line * (3_000_000 // len(line))  # ~3 MB, far over the 64 KiB limit
    (logs / "2025-02-01-big.md").write_text(head + body + "the late needle is here\n")
    daemon = processes().start()
    _, took = timed(daemon, "memory.search", workspace=str(ws), query="early needle")
    assert took < 5  # it does not wait for the big file: that is synced in the background
    deadline = time.monotonic() + 10
    while not daemon.call("memory.search", workspace=str(ws), query="early needle")["results"]:
        assert time.monotonic() < deadline, "the big file was never indexed"
        time.sleep(0.05)
    late = daemon.call("memory.search", workspace=str(ws), query="late needle", min_score=0)
    assert not [r for r in late["results"] if "late needle" in r["snippet"]]
    (warning,) = warnings_of(daemon.call("daemon.status"), ws)["2025-02-01-big.md"]
    assert warning.startswith("larger than index.max_file_bytes (")
    stats = daemon.call("index.stats", workspace=str(ws))
    assert stats["chunks"] < 100  # 64 KiB of text, not 3 MB
    # memory.get serves what is indexed, never reading the whole file for one page
    rel = f"{logs.parent.name}/sessions/2025-02-01-big.md"
    got = daemon.call("memory.get", workspace=str(ws), path=rel)
    assert got["truncated"] == len((head + body).encode()) + len("the late needle is here\n")
    assert len(got["text"]) <= 65536 and "late needle" not in got["text"]
    assert got["total_lines"] < 1100


def test_utf16_and_bom_files_are_decoded_and_bad_bytes_warned(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    ws = project(home, "enc")
    logs = sessions_dir(home, ws)
    text = "# Session\n\nkangaroo déjà vu 日本語\n"
    (logs / "2025-03-01-le.md").write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    (logs / "2025-03-02-be.md").write_bytes(codecs.BOM_UTF16_BE + text.encode("utf-16-be"))
    (logs / "2025-03-03-bom.md").write_bytes(codecs.BOM_UTF8 + text.encode())
    (logs / "2025-03-04-bad.md").write_bytes(b"# Session\n\nkangaroo \xff\xfe\xfa broken\n")
    daemon = processes().start()
    found = daemon.call("memory.search", workspace=str(ws), query="kangaroo", max_results=10)
    names = sorted(r["path"].rsplit("/", 1)[-1] for r in found["results"])
    assert names == [
        "2025-03-01-le.md",
        "2025-03-02-be.md",
        "2025-03-03-bom.md",
        "2025-03-04-bad.md",
    ]
    snippets = {r["path"].rsplit("/", 1)[-1]: r["snippet"] for r in found["results"]}
    assert "déjà vu 日本語" in snippets["2025-03-01-le.md"]
    assert "déjà vu 日本語" in snippets["2025-03-02-be.md"]
    assert warnings_of(daemon.call("daemon.status"), ws) == {
        "2025-03-04-bad.md": ["not valid UTF-8: 3 undecodable byte sequence(s) replaced"]
    }
    got = daemon.call(
        "memory.get", workspace=str(ws), path=f"{logs.parent.name}/sessions/2025-03-01-le.md"
    )
    assert got["text"].splitlines()[2] == "kangaroo déjà vu 日本語"


# --- units -----------------------------------------------------------------------------------


def test_read_regular_refuses_a_fifo_without_opening_it_for_long(tmp_path: Path) -> None:
    fifo = tmp_path / "a.md"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(NotRegularFile) as raised:
        read_regular(fifo)
    assert raised.value.kind == "fifo" and time.monotonic() - started < 1


def test_read_regular_cuts_at_the_last_whole_line_within_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"one\ntwo\nthree\n")
    assert read_regular(path, 9) == read_regular(path, 9)
    read = read_regular(path, 9)
    assert read.data == b"one\ntwo\n" and read.truncated and read.stat.st_size == 14
    whole = read_regular(path, 14)
    assert whole.data == b"one\ntwo\nthree\n" and not whole.truncated
    path.write_bytes(b"x" * 20)
    assert read_regular(path, 8).data == b"x" * 8


def test_decode_text_takes_boms_and_counts_bad_bytes() -> None:
    assert decode_text(codecs.BOM_UTF8 + b"a\n") == ("a\n", None)
    assert decode_text(codecs.BOM_UTF16_LE + "é\n".encode("utf-16-le")) == ("é\n", None)
    assert decode_text(codecs.BOM_UTF16_BE + "é\n".encode("utf-16-be")) == ("é\n", None)
    text, warning = decode_text(b"a\xffb\xfec \xef\xbf\xbd")  # a real U+FFFD is not counted
    assert text == "a\ufffdb\ufffdc \ufffd"
    assert warning == "not valid UTF-8: 2 undecodable byte sequence(s) replaced"


def test_prepare_file_memory_is_bounded_by_the_limit_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"word " * 2_000_000 + b"\n")  # 10 MB, one line
    item = prepare_file(path, "MEMORY.md", str(tmp_path), None, 1600, 320, max_bytes=100_000)
    assert len(item.data) == 100_000 and item.size == 10_000_001
    assert sum(len(c.text) for c in item.chunks or ()) < 200_000
    assert item.warnings and item.warnings[0].startswith("larger than index.max_file_bytes")


def test_memory_get_reads_a_file_of_one_huge_line_to_its_end(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    ws = project(home, "line")
    memory = resolve_workspace(ws, home / "memory")
    memory.dir.mkdir(parents=True, exist_ok=True)
    text = "ab" * 350_000  # 700,000 characters, no newline: 3 replies
    memory.memory_file.write_text(text)
    daemon = processes().start()
    params: dict[str, object] = {"workspace": str(ws), "path": f"{memory.dir.name}/MEMORY.md"}
    pages = []
    for _ in range(10):
        page = daemon.call("memory.get", **params)
        pages.append(page["text"])
        if "next_from" not in page:
            break
        params.update({"from": page["next_from"], "from_char": page["next_char"]})
    assert "".join(pages) == text and len(pages) == 3


def test_searches_go_on_while_a_big_file_is_indexed(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    """A 30 MB session log appears while a client searches every 20 ms: no search waits
    more than a second (before #17 the search that found it dirty read, chunked and wrote
    all 30 MB in the index's one phase: seconds)."""
    write_config(home, "[index]\nmax_file_bytes = 4194304\n")
    ws = project(home, "busy")
    logs = sessions_dir(home, ws)
    daemon = processes().start()
    daemon.call("memory.remember", workspace=str(ws), text="the ocarina is small")
    latencies: list[float] = []
    with daemon.client() as client:
        line = b"filler words that repeat to pad out a hostile session log 0123456789\n"
        with (logs / "2025-06-01-big.md").open("wb") as out:
            out.write(b"# Session\n\nthe zither head line\n\n" + line * (30_000_000 // len(line)))
        deadline = time.monotonic() + 30
        while True:
            started = time.monotonic()
            client.call("memory.search", workspace=str(ws), query="ocarina")
            latencies.append(time.monotonic() - started)
            if client.call("memory.search", workspace=str(ws), query="zither")["results"]:
                break
            assert time.monotonic() < deadline, "the big file was never indexed"
            time.sleep(0.02)
    assert max(latencies) < 1.0, sorted(latencies)[-5:]
