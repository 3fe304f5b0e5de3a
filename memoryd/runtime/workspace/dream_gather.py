"""What one dream reads (SPEC §8.4 step 2): ``MEMORY.md`` and the session logs, oldest
first, each read only as far as a dream input of ``dream.max_input_chars`` can use it.

Every file is read through the store's regular-file reader (a FIFO is never opened for
reading) and decoded as the index decodes it (UTF-8, or UTF-16 with a BOM). A content hash
is always of the *whole* file, streamed in 1 MiB steps: a hand-made 2 GB log costs a read,
never 2 GB of memory. A log larger than the input is sent cut — the oldest log with text
always is, so dreams make progress — and, as :func:`~memoryd.core.dreaming.assemble_input`
says, archived whole; one whose read part is blank space only is read on to its first text
(:func:`text_after_blank`), never sent empty. Once a log does not fit, the later ones wait:
they are only hashed (a log an earlier dream consumed with this very content is archived
unsent).
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memoryd.core.dreaming import DreamInput, SessionLog, assemble_input, consumed_hashes
from memoryd.store.files import FileRead, decode_text, open_regular, split_bom, storage_error
from memoryd.store.history import read_hashed, read_journal
from memoryd.store.layout import Workspace


@dataclass(frozen=True, slots=True)
class Gathered:
    input: DreamInput
    memory_text: str | None
    memory_hash: str | None
    log_hashes: dict[str, str]
    already: dict[str, str]
    """Logs an earlier dream (not undone) consumed with this very content: name → hash."""
    memory_cut: bool = False
    """``MEMORY.md`` is larger than a dream can read (``memory_chars`` is a lower bound)."""


def read_budget(max_chars: int) -> int:
    """Bytes of a file that hold at least ``max_chars`` + 1 characters in any encoding the
    index decodes (at most 4 bytes a character, a BOM, a cut last character)."""
    return 4 * (max_chars + 2) + 4


def decoded(read: FileRead) -> str:
    """The text of what was read (:func:`decode_text`, as the index); of a file read only in
    part, without its last character (perhaps a cut one, decoded as U+FFFD)."""
    text = decode_text(read.data)[0]
    return text[:-1] if read.truncated else text


#: Bytes read at a time while looking for a log's first text (the first read holds any BOM).
_STEP = 1 << 20


class _TextAfterBlank:
    """The first ``max_chars`` + 1 characters after a file's leading blank space, fed
    chunk by chunk and decoded as :func:`decode_text` decodes the whole (a BOM's encoding,
    bad bytes replaced); :attr:`done` once they are found."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.decoder: codecs.IncrementalDecoder | None = None
        self.parts: list[str] = []
        self.chars = 0

    @property
    def done(self) -> bool:
        return self.chars > self.max_chars

    def __call__(self, data: bytes) -> None:
        if self.decoder is None:  # the first chunk (1 MiB): holds any BOM
            _bom, encoding, data = split_bom(data)
            self.decoder = codecs.getincrementaldecoder(encoding)("replace")
        text = self.decoder.decode(data)
        if not self.parts:
            text = text.lstrip()
        if text:
            self.parts.append(text[: self.max_chars + 1 - self.chars])
            self.chars += len(self.parts[-1])


def text_after_blank(path: Path, max_chars: int) -> str:
    """At most ``max_chars`` + 1 characters of the file at ``path`` from its first one that
    is not blank, read in 1 MiB steps up to there only (the gather hashed the whole file
    already): the text of a log whose bounded read held only blank space (a log opening
    with more blank lines than a read takes is not sent empty, then archived unread).
    StorageError when it cannot be read (a FIFO included: never opened for long)."""
    found = _TextAfterBlank(max_chars)
    try:
        with open_regular(path) as handle:
            while not found.done and (data := handle.read(_STEP)):
                found(data)
    except FileNotFoundError:
        return ""  # gone since: the cleanup finds it gone too
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    return "".join(found.parts)


def gather(ws: Workspace, max_chars: int, session_mtimes: Mapping[str, datetime]) -> Gathered:
    """Read ``MEMORY.md`` and the logs named in ``session_mtimes`` (name → effective mtime)
    for a dream input of at most ``max_chars`` (blocking: call from a worker thread)."""
    budget = read_budget(max_chars)
    memory = read_hashed(ws.memory_file, budget)
    memory_text = None if memory is None else decoded(memory[1])
    memory_cut = memory is not None and memory[1].truncated
    consumed_before = consumed_hashes(read_journal(ws.history_dir))
    found = sorted((m.timestamp(), name) for name, m in session_mtimes.items())
    already: dict[str, str] = {}
    hashes: dict[str, str] = {}
    logs: list[SessionLog] = []
    stopped = memory_cut  # a log did not fit: every later one waits, its text unused
    used = 0
    for _, name in found:
        got = read_hashed(ws.sessions_dir / name, 0 if stopped else budget)
        if got is None:
            continue
        hashed, read = got
        if hashed in consumed_before:
            already[name] = hashed  # in MEMORY.md already: never sent twice
            continue
        hashes[name] = hashed
        body = decoded(read).strip()  # as assemble_input takes it
        if read.truncated and not body and not stopped:
            body = text_after_blank(ws.sessions_dir / name, max_chars).strip()
        logs.append(SessionLog(name, body, cut=read.truncated or stopped))
        used += len(body)
        if not stopped and used > max_chars:
            stopped = bool(assemble_input(memory_text, logs, max_chars).waiting)
    if memory_cut:  # larger than any dream input: too large, whatever its text
        names = tuple(log.name for log in logs)
        inp = DreamInput("", (), names, True, len(memory_text or ""), memory_too_large=True)
    else:
        inp = assemble_input(memory_text, logs, max_chars)
    memory_hash = None if memory is None else memory[0]
    return Gathered(inp, memory_text, memory_hash, hashes, already, memory_cut)
