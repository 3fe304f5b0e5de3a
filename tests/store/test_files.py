"""Atomic memory-file writes, appends and reads (SPEC §2 "Writes are atomic", §15)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.errors import StorageError
from memoryd.store import files
from memoryd.store.files import (
    TEMP_PREFIX,
    append_section,
    atomic_write_text,
    decode_exact,
    decode_text,
    ensure_file,
    read_text,
)

OLD = "# Memory\n\n## Old note\n\nkept exactly — ünïcödé\n"


@pytest.fixture
def mem(tmp_path: Path) -> Path:
    """An empty directory of our own (tmp_path also holds the test's MEMORYD_HOME)."""
    directory = tmp_path / "mem"
    directory.mkdir()
    return directory


def _enospc(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX))


def test_atomic_write_creates_and_replaces(mem: Path) -> None:
    target = mem / "MEMORY.md"
    atomic_write_text(target, "first\n")
    assert target.read_text() == "first\n"
    atomic_write_text(target, OLD)
    assert target.read_bytes() == OLD.encode()
    assert _leftovers(mem) == []


def test_new_files_are_private_and_existing_modes_are_kept(mem: Path) -> None:
    target = mem / "MEMORY.md"
    atomic_write_text(target, "a")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    target.chmod(0o644)
    atomic_write_text(target, "b")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("step", ["replace", "write", "fsync"])
def test_a_failed_write_leaves_the_old_file_and_no_temp(
    mem: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    target = mem / "MEMORY.md"
    target.write_bytes(OLD.encode())
    monkeypatch.setattr(files._fs, step, _enospc)

    with pytest.raises(StorageError) as caught:
        atomic_write_text(target, "# New content that must not land\n" * 100)

    assert target.read_bytes() == OLD.encode()
    assert _leftovers(mem) == []
    assert str(target) in caught.value.message
    assert "ENOSPC" in caught.value.message
    assert caught.value.to_dict() == {
        "code": "storage_error",
        "path": str(target),
        "errno": "ENOSPC",
    }


def test_a_failed_first_write_creates_nothing(mem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files._fs, "replace", _enospc)
    with pytest.raises(StorageError):
        atomic_write_text(mem / "MEMORY.md", "x")
    assert list(mem.iterdir()) == []


def test_short_writes_are_completed(mem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.write may write less than asked; the loop must finish the job."""
    real_write = files._fs.write

    def dribble(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, data[:7])

    monkeypatch.setattr(files._fs, "write", dribble)
    text = "0123456789" * 50
    atomic_write_text(mem / "f.md", text)
    assert (mem / "f.md").read_text() == text


def test_write_into_a_missing_directory_is_a_storage_error(mem: Path) -> None:
    with pytest.raises(StorageError, match="missing"):
        atomic_write_text(mem / "missing" / "MEMORY.md", "x")


def test_unsupported_directory_fsync_is_not_a_failure(
    mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def einval(_path: str) -> None:
        raise OSError(errno.EINVAL, "not supported here")

    monkeypatch.setattr(files._fs, "fsync_dir", einval)
    atomic_write_text(mem / "f.md", "ok")
    assert (mem / "f.md").read_text() == "ok"


def test_lone_surrogates_from_clients_do_not_break_writes(mem: Path) -> None:
    atomic_write_text(mem / "f.md", "bad \ud800 char")
    assert read_text(mem / "f.md") == "bad ? char"


# --- append_section -----------------------------------------------------------------------


def test_append_section_appends_after_one_blank_line(mem: Path) -> None:
    log = mem / "log.md"
    append_section(log, "<!-- flush 2025-01-02T03:04:05Z trigger=manual -->\n## First\n")
    append_section(log, "## Second\n\nbody")
    assert log.read_text() == (
        "<!-- flush 2025-01-02T03:04:05Z trigger=manual -->\n## First\n\n## Second\n\nbody\n"
    )


@pytest.mark.parametrize(
    ("encoding", "bom"), [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")]
)
def test_append_section_keeps_a_utf16_file_utf16(mem: Path, encoding: str, bom: bytes) -> None:
    """``remember`` into a UTF-16 ``MEMORY.md`` (which the index reads) appended UTF-8 bytes:
    the note read as mojibake and the file no longer decoded."""
    memory = mem / "MEMORY.md"
    memory.write_bytes(bom + "# Memory\n\n## Old\n\nkept — ünïcödé\n".encode(encoding))
    append_section(memory, "## New\n\nthe okapi note")
    data = memory.read_bytes()
    assert data.startswith(bom) and data[2:].decode(encoding) == (
        "# Memory\n\n## Old\n\nkept — ünïcödé\n\n## New\n\nthe okapi note\n"
    )


def test_append_section_keeps_undecodable_bytes(mem: Path) -> None:
    log = mem / "log.md"
    original = b"# Log\n\nlatin-1 caf\xe9 and \xff\xfe junk\n"
    log.write_bytes(original)
    append_section(log, "## More")
    assert log.read_bytes() == original + b"\n## More\n"


def test_a_failed_append_never_truncates(mem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = mem / "log.md"
    log.write_bytes(OLD.encode())
    monkeypatch.setattr(files._fs, "replace", _enospc)
    with pytest.raises(StorageError):
        append_section(log, "## Lost, but loudly")
    assert log.read_bytes() == OLD.encode()
    assert _leftovers(mem) == []


# --- read_text ----------------------------------------------------------------------------


def test_read_text_of_a_missing_file_is_none(mem: Path) -> None:
    assert read_text(mem / "nope.md") is None
    (mem / "file").write_text("x")
    assert read_text(mem / "file" / "below.md") is None


def test_read_text_replaces_odd_bytes(mem: Path) -> None:
    (mem / "f.md").write_bytes(b"ok \xff\xfe\x00 end")
    assert read_text(mem / "f.md") == "ok \ufffd\ufffd\x00 end"


def test_read_text_of_a_directory_is_a_storage_error(mem: Path) -> None:
    with pytest.raises(StorageError):
        read_text(mem)


# --- ensure_file --------------------------------------------------------------------------


def test_ensure_file_creates_a_missing_file_once(mem: Path) -> None:
    target = mem / "MEMORY.md"
    assert ensure_file(target, "# Memory\n") is True
    assert ensure_file(target, "# Other template\n") is False
    assert target.read_text() == "# Memory\n"
    assert _leftovers(mem) == []


def test_ensure_file_never_overwrites_a_file_that_appears_meanwhile(
    mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's file created between the existence check and the link wins."""
    target = mem / "MEMORY.md"
    real_link = files._fs.link

    def person_saves_first(src: str, dst: str) -> None:
        Path(dst).write_text("mine\n")
        real_link(src, dst)

    monkeypatch.setattr(files._fs, "link", person_saves_first)
    assert ensure_file(target, "# Memory\n") is False
    assert target.read_text() == "mine\n"
    assert _leftovers(mem) == []


def test_ensure_file_without_hard_links_falls_back_to_rename(
    mem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(_src: str, _dst: str) -> None:
        raise OSError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(files._fs, "link", no_links)
    target = mem / "MEMORY.md"
    assert ensure_file(target, "# Memory\n") is True
    assert target.read_text() == "# Memory\n"
    assert _leftovers(mem) == []


def test_ensure_file_failure_is_a_storage_error(mem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files._fs, "fsync", _enospc)
    with pytest.raises(StorageError, match="ENOSPC"):
        ensure_file(mem / "MEMORY.md", "# Memory\n")
    assert list(mem.iterdir()) == []


def test_sweep_removes_only_old_temp_files_of_atomic_writes(tmp_path: Path) -> None:
    from memoryd.store.files import TEMP_PREFIX, sweep_temp_files

    old = tmp_path / f"{TEMP_PREFIX}MEMORY.md.dead"
    fresh = tmp_path / f"{TEMP_PREFIX}MEMORY.md.live"
    note = tmp_path / "MEMORY.md"
    for path in (old, fresh, note):
        path.write_text("x")
    now = old.stat().st_mtime + 3600
    os.utime(fresh, (now - 10, now - 10))
    assert sweep_temp_files([tmp_path, tmp_path / "missing"], older_than=600, now=now) == 1
    assert not old.exists() and fresh.exists() and note.exists()


BOMS = st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])


@given(BOMS, st.binary(max_size=64))
def test_decode_exact_gives_back_the_bytes_read_as_decode_text_reads_them(
    bom: bytes, body: bytes
) -> None:
    """What ``secrets purge`` rewrites: any bytes, any BOM, back exactly; a clean file reads
    as the indexer reads it."""
    data = bom + body
    exact = decode_exact(data)
    assert exact.encode(exact.text) == data
    text, warning = decode_text(data)
    if warning is None:
        assert exact.text == text


TEXT = st.text(max_size=40).filter(lambda t: not t.startswith("\ufeff"))


@given(BOMS, TEXT, TEXT)
def test_decode_exact_rewrites_in_the_files_encoding(bom: bytes, text: str, new: str) -> None:
    encoding = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}.get(bom, "utf-8")
    exact = decode_exact(bom + text.encode(encoding))
    data = exact.encode(new)
    assert data.startswith(bom) and decode_text(data) == (new, None)
    assert data[len(bom) :].decode(encoding) == new


def test_scan_regular_streams_the_whole_file_and_keeps_exactly_its_head(mem: Path) -> None:
    path = mem / "log.md"
    data = b"a\n" + b"x" * (3 << 20)
    path.write_bytes(data)
    seen: list[bytes] = []
    read = files.scan_regular(path, 10, seen.append)
    assert read.data == data[:10] and read.truncated and read.size == len(data)  # not at "\n"
    assert b"".join(seen) == data and max(len(p) for p in seen) <= 1 << 20
    whole = files.scan_regular(path, len(data), seen.append)
    assert whole.data == data and not whole.truncated
    os.mkfifo(mem / "fifo")
    with pytest.raises(files.NotRegularFile):
        files.scan_regular(mem / "fifo", 10, seen.append)
