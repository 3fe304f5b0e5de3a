"""Reading and atomically writing memory files (SPEC §2 "Writes are atomic", §15).

Every write of a memory file goes to a temp file in the same directory, is written in full,
flushed and fsynced, then renamed over the target, and the directory is fsynced: a reader
sees the old file or the new one, never half of either. If anything fails, the temp file is
removed, the target is untouched and :class:`~memoryd.errors.StorageError` names the path
and the OS error (``ENOSPC`` …).

All OS calls of the write path go through the module-level ``_fs`` object so that tests can
inject faults: ``monkeypatch.setattr(files._fs, "replace", boom)``.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from memoryd.core.notes import append_note
from memoryd.errors import ReadOnly, StorageError

#: Temp files start with this (hidden, and never ending in ``.md``: watchers ignore them).
TEMP_PREFIX = ".memoryd-tmp-"
_NEW_FILE_MODE = 0o600
# errnos meaning "this file system cannot fsync a directory" — not a failed write.
_DIR_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF}


class _OsFileSystem:
    """The OS calls of the write path, one method each, so tests can replace any of them."""

    def open_new(self, path: str, mode: int) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_fs = _OsFileSystem()


def storage_error(action: str, path: Path, exc: OSError) -> StorageError:
    """``cannot <action> <path>: <ERRNO>: <reason>`` (:class:`ReadOnly` for EROFS), the
    error every store module raises for a failed file operation."""
    name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
    reason = exc.strerror or str(exc) or type(exc).__name__
    detail = f"{name}: {reason}" if name else reason
    error = ReadOnly if exc.errno == errno.EROFS else StorageError
    return error(f"cannot {action} {path}: {detail}", path=str(path), errno=name or None)


#: Lone surrogates ``surrogateescape`` cannot write back (it writes U+DC80–U+DCFF only).
_UNENCODABLE = re.compile("[\ud800-\udc7f\udd00-\udfff]")
#: Any lone surrogate: in text that did not come from a file's bytes (a client's, a
#: model's), no encoding writes one validly.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encode(text: str) -> bytes:
    # surrogateescape gives back bytes that read_bytes decoding preserved; any other lone
    # surrogate (e.g. from a JSON client) is replaced by "?" rather than failing the write —
    # it alone: the rest of the text, the preserved bytes included, is written as it is.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return _UNENCODABLE.sub("?", text).encode("utf-8", "surrogateescape")


def _write_temp(path: Path, data: bytes) -> str:
    """Write ``data`` to a new fsynced temp file next to ``path``; return its name."""
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = _NEW_FILE_MODE
    for _ in range(100):
        temp = str(path.parent / f"{TEMP_PREFIX}{path.name}.{secrets.token_hex(4)}")
        try:
            fd = _fs.open_new(temp, mode)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 32 random bits
        raise FileExistsError(errno.EEXIST, "no free temp file name", str(path.parent))
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[_fs.write(fd, view) :]
            _fs.fsync(fd)
        finally:
            _fs.close(fd)
        if mode != _NEW_FILE_MODE:
            os.chmod(temp, mode)  # the umask may have narrowed it
    except BaseException:
        _remove_quietly(temp)
        raise
    return temp


def _remove_quietly(temp: str) -> None:
    try:
        os.unlink(temp)
    except OSError:
        pass


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (a created, renamed or removed file) durable.

    Raises :class:`OSError` — an ``EIO`` means the change may not survive a crash — except
    for the errnos of file systems that cannot fsync a directory at all (``EINVAL`` …).
    The one directory-fsync policy: atomic writes (:func:`atomic_write_bytes`,
    :func:`ensure_file`), session journals (created, removed), the dream history's
    ``dreams.jsonl`` (created) and log archive moves (both directories), and the ingest
    registry (created) call this.
    """
    try:
        _fs.fsync_dir(str(directory))
    except OSError as exc:
        if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (see the module docstring).

    A new file is created ``0600``; an existing file keeps its permission bits.
    """
    try:
        temp = _write_temp(path, data)
        try:
            _fs.replace(temp, str(path))
        except BaseException:
            _remove_quietly(temp)
            raise
        fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error("write", path, exc) from exc


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically and durably."""
    atomic_write_bytes(path, _encode(text))


class NotRegularFile(OSError):
    """``path`` is a FIFO, socket or device: memoryd never reads one (a FIFO would block the
    reader forever). ``kind`` names what it is."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))
        self.kind = kind


@dataclass(frozen=True, slots=True)
class FileRead:
    """What :func:`read_regular` read: at most ``max_bytes`` of a regular file."""

    data: bytes
    stat: os.stat_result
    """The ``fstat`` of the file that was read (its full size, its mtime)."""
    truncated: bool
    """The file is larger than the limit: ``data`` is its beginning only."""
    size: int = 0
    """The file's size as far as it was seen (``fstat``, or more if it grew while read)."""


_READ_STEP = 1 << 20
_KINDS = (
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISDIR, "directory"),
)


def file_kind(mode: int) -> str:
    """``regular`` or what else a file of this ``st_mode`` is (``fifo``, ``socket`` …)."""
    if stat.S_ISREG(mode):
        return "regular"
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """``stat`` first (it never blocks), then ``open`` with ``O_NONBLOCK`` and ``fstat`` the
    descriptor (the path may have been swapped meanwhile): a FIFO, socket or device raises
    :class:`NotRegularFile` unread (a directory :class:`IsADirectoryError`)."""
    kind = file_kind(os.stat(path).st_mode)
    if kind == "directory":
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if kind != "regular":
        raise NotRegularFile(path, kind)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind != "regular":
            raise NotRegularFile(path, kind)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(path: Path) -> BinaryIO:
    """A regular file open for reading as a buffered binary stream (the checks of
    :func:`_open_regular`: a FIFO, socket or device raises :class:`NotRegularFile`, never
    blocks). For a reader that goes a line at a time (a session journal). Raises OSError."""
    fd, _st = _open_regular(path)
    return os.fdopen(fd, "rb")


def read_regular(path: Path, max_bytes: int | None = None) -> FileRead:
    """Read a regular file without ever blocking on something else (issue #17).

    A FIFO, socket or device raises :class:`NotRegularFile` unread (a directory
    :class:`IsADirectoryError`; see :func:`_open_regular`). At most ``max_bytes`` are read
    (None: all); a longer file is cut at its last newline within the limit (or at the limit
    when that part has none) and ``truncated`` is set. Raises OSError.
    """
    fd, st = _open_regular(path)
    try:
        limit = st.st_size + 1 if max_bytes is None else max_bytes + 1
        parts: list[bytes] = []
        got = 0
        while got < limit:
            part = os.read(fd, min(_READ_STEP, limit - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    finally:
        os.close(fd)
    data = b"".join(parts)
    size = max(st.st_size, len(data))
    if max_bytes is None or len(data) <= max_bytes:
        return FileRead(data, st, truncated=False, size=size)
    data = data[:max_bytes]
    cut = data.rfind(b"\n")
    return FileRead(data[: cut + 1] if cut >= 0 else data, st, truncated=True, size=size)


def scan_regular(path: Path, keep_bytes: int, consume: Callable[[bytes], object]) -> FileRead:
    """Read a whole regular file (the checks of :func:`read_regular`) in 1 MiB steps, each
    handed to ``consume`` (a hash), keeping only its first ``keep_bytes`` bytes — cut
    exactly there, not at a line: memory stays bounded however large the file.
    ``truncated``: the file had more. Raises OSError."""
    fd, st = _open_regular(path)
    head: list[bytes] = []
    kept = size = 0
    try:
        while part := os.read(fd, _READ_STEP):
            consume(part)
            size += len(part)
            if kept < keep_bytes:
                head.append(part[: keep_bytes - kept])
                kept += len(head[-1])
    finally:
        os.close(fd)
    return FileRead(b"".join(head), st, truncated=size > kept, size=size)


DECODE_WARNING = "not valid"
"""How :func:`decode_text`'s warning starts."""

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def split_bom(data: bytes) -> tuple[bytes, str, bytes]:
    """``(bom, encoding, body)`` of a memory file's bytes: UTF-8 unless a BOM says otherwise."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return bom, name, data[len(bom) :]
    return b"", "utf-8", data


def decode_text(data: bytes) -> tuple[str, str | None]:
    """The text of a memory file, and a warning when it was not clean.

    UTF-8 with or without a BOM, and UTF-16 LE/BE with a BOM, are decoded (the BOM
    dropped); anything else undecodable gets U+FFFD for each bad byte and the warning
    says how many.
    """
    _bom, encoding, data = split_bom(data)
    try:
        return data.decode(encoding), None
    except UnicodeDecodeError:
        text = data.decode(encoding, "replace")
    bad = text.count("\ufffd") - data.decode(encoding, "ignore").count("\ufffd")
    return text, f"{DECODE_WARNING} {encoding.upper()}: {bad} undecodable byte sequence(s) replaced"


@dataclass(frozen=True, slots=True)
class ExactText:
    """A memory file's text as :func:`decode_text` reads it (same BOMs, same encodings),
    decoded so that :meth:`encode` gives its bytes back exactly: what is not valid stays as
    lone surrogates (``surrogateescape`` for UTF-8, ``surrogatepass`` for UTF-16) and an odd
    last byte of UTF-16 is kept aside. A rewrite keeps the file's encoding and BOM."""

    text: str
    bom: bytes
    encoding: str
    tail: bytes = b""

    def encode(self, text: str) -> bytes:
        """``text`` (this file's text changed) as the file's bytes: same encoding and BOM."""
        if self.encoding == "utf-8":
            return self.bom + _encode(text)
        return self.bom + text.encode(self.encoding, "surrogatepass") + self.tail


def decode_exact(data: bytes) -> ExactText:
    """A memory file's bytes as an :class:`ExactText` (text, encoding and BOM)."""
    bom, encoding, body = split_bom(data)
    if encoding == "utf-8":
        return ExactText(body.decode(encoding, "surrogateescape"), bom, encoding)
    cut = len(body) - len(body) % 2
    return ExactText(body[:cut].decode(encoding, "surrogatepass"), bom, encoding, body[cut:])


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes | None:
    """The bytes of ``path`` (at most ``max_bytes``, see :func:`read_regular`), or None if it
    does not exist. Something that is not a regular file is a StorageError, never read."""
    try:
        return read_regular(path, max_bytes).data
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise storage_error("read", path, exc) from exc


def read_text_capped(path: Path, max_bytes: int) -> tuple[str, int | None] | None:
    """The text of at most ``max_bytes`` of ``path`` (:func:`read_regular`,
    :func:`decode_text`) and, when the file is larger, its size; None if missing."""
    try:
        read = read_regular(path, max_bytes)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    return decode_text(read.data)[0], read.size if read.truncated else None


def read_text(path: Path, max_bytes: int | None = None) -> str | None:
    """The text of ``path`` (:func:`decode_text`: UTF-8 or a BOM's UTF-16, odd bytes
    replaced by U+FFFD), or None if missing."""
    data = read_bytes(path, max_bytes)
    return None if data is None else decode_text(data)[0]


def append_section(path: Path, section: str) -> None:
    """Append ``section`` to ``path`` after one blank line, atomically.

    The file is rewritten whole (current text + separator + section) through
    :func:`atomic_write_bytes`, so it is never truncated or half-appended; the file keeps
    its encoding and BOM (a UTF-16 ``MEMORY.md`` stays UTF-16) and bytes of it that do not
    decode are kept exactly (:func:`decode_exact`). A missing file is created (UTF-8). A
    lone surrogate in ``section`` (a client's ``"\\ud800"``) is written as ``?``: raw it
    would make the file invalid UTF-16, or UTF-8 (``surrogateescape`` writes U+DCxx as a
    byte).
    """
    current = decode_exact(read_bytes(path) or b"")
    section = LONE_SURROGATE.sub("?", section)
    atomic_write_bytes(path, current.encode(append_note(current.text, section)))


def ensure_file(path: Path, template_text: str) -> bool:
    """Create ``path`` with ``template_text`` unless it exists; True if it was created.

    Atomic and never overwrites: the complete temp file is hard-linked into place, so a
    file that appears meanwhile (a person, another process) wins. On file systems without
    hard links it falls back to a rename when the target is still missing.
    """
    if path.exists():
        return False
    try:
        temp = _write_temp(path, _encode(template_text))
        try:
            try:
                _fs.link(temp, str(path))
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}:
                    raise
                if path.exists():
                    return False
                _fs.replace(temp, str(path))
        finally:
            _remove_quietly(temp)
        fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error("create", path, exc) from exc
    return True


def mkdtemp_private() -> str:
    """A new private (0700) temp directory, e.g. for the index of a read-only workspace."""
    return tempfile.mkdtemp(prefix="memoryd-")


def make_private_dirs(directory: Path, mode: int = 0o700) -> None:
    """Create ``directory`` and every missing ancestor, each exactly ``mode`` (0700) whatever
    the umask (``Path.mkdir(parents=True)`` makes the ancestors 0755). Existing directories
    are left as they are. Raises :class:`OSError`.
    """
    missing: list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=mode)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue
        os.chmod(path, mode)


def sweep_temp_files(directories: Iterable[Path], *, older_than: float, now: float) -> int:
    """Remove temp files of atomic writes that a killed process left behind (older than
    ``older_than`` seconds, so a write under way is never touched); returns how many."""
    removed = 0
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(TEMP_PREFIX):
                continue
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime >= older_than:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
    return removed
