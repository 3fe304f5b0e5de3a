"""The memory files as a client reads and writes them (SPEC §7): ``memory.remember`` appends a
note to a curated ``MEMORY.md`` (under its lock, scrubbed, then indexed); ``memory.get``
reads a window of a file."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio

from memoryd.core.notes import format_note, page
from memoryd.core.replies import GetReply, RememberReply
from memoryd.core.secrets import Scrubbed, Scrubber
from memoryd.core.templates import global_template, workspace_template
from memoryd.errors import InvalidParams, NotFound
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.store.files import append_section, ensure_file, read_text_capped
from memoryd.store.index import SyncReport
from memoryd.store.layout import (
    Workspace,
    global_memory_file,
    memory_relpath,
    resolve_client_path,
)
from memoryd.store.prepare import DEFAULT_MAX_FILE_BYTES

MAX_GET_CHARS = 256 * 1024  # memory.get answers at most this much text; the rest by `from`


def memory_file(root: Path, workspace: Workspace, scope: str) -> Path:
    """The ``MEMORY.md`` of ``scope``: ``workspace`` or ``global``."""
    if scope == "workspace":
        return workspace.memory_file
    if scope == "global":
        return global_memory_file(root)
    raise InvalidParams(f"scope must be 'workspace' or 'global', got {scope!r}")


async def append_note(target: Path, scope: str, workspace: Workspace, note: str) -> None:
    """Append ``note`` to ``target`` (made from the scope's template when missing), under
    the file's lock."""
    async with file_lock(target):

        def write() -> None:
            template = (
                global_template() if scope == "global" else workspace_template(workspace.key.slug)
            )
            ensure_file(target, template)
            append_section(target, note)  # keeps bytes a person wrote, even odd ones

        await anyio.to_thread.run_sync(write)


async def write_note(
    root: Path,
    workspace: Workspace,
    scope: str,
    text: str,
    scrubber: Scrubber | None,
    sync: Callable[[list[Path]], Awaitable[SyncReport]],
    log: Any,
) -> RememberReply:
    """``memory.remember``: append ``text`` as a note to the ``scope``'s ``MEMORY.md`` and
    ``sync`` it into the index. With a ``scrubber``, what was redacted is in ``redacted``
    (kind and fingerprint, never the value) with a ``warning``."""
    target = memory_file(root, workspace, scope)
    # Off the event loop: a 200,000-character note can take the scrubber most of a second.
    scrubbed = Scrubbed(text)
    if scrubber is not None:
        scrubbed = await anyio.to_thread.run_sync(scrubber.scrub, text)
    note = format_note(scrubbed.text)
    rel = memory_relpath(root, target)
    if note is None:
        return {"path": rel, "written": False}
    extra = scrubbed.notice()
    if extra:
        log.warning("secrets.redacted", where="remember", kinds=scrubbed.kinds)
    await append_note(target, scope, workspace, note)
    report = await sync([target])
    log.info("remember", scope=scope, path=rel, chars=len(note))
    out: RememberReply = {"path": rel, "written": True}
    if "redacted" in extra:
        out["redacted"] = extra["redacted"]
    if "warning" in extra:
        out["warning"] = extra["warning"]
    if report.failed:  # the note is on disk (acknowledged); the index catches up later
        error = report.failed[0][1].message
        warning = f"the note is written but not indexed yet: {error}"
        out["indexed"] = False
        out["warning"] = f"{out['warning']}; {warning}" if "warning" in out else warning
    return out


async def read_page(
    root: Path,
    workspace: Workspace,
    path: str,
    start: int,
    lines: int | None,
    start_char: int,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> GetReply:
    """``memory.get``: a window of a memory file (relative to the memory root).

    A reply holds at most :data:`MAX_GET_CHARS` characters: it ends at a line end and
    ``next_from`` names the next line, or — when one line alone is longer — it ends inside
    that line and ``next_from``/``next_char`` say where the rest begins (pass them back as
    ``from``/``from_char``). The cursor always moves: any file can be read to its end by
    following it. A file over ``max_bytes`` (``index.max_file_bytes``) is served up to the
    limit, as it is indexed, and ``truncated`` gives its size (a 2 GB log is never read
    whole for one page).
    """
    if start < 1:
        raise InvalidParams("from must be at least 1")
    if lines is not None and lines < 1:
        raise InvalidParams("lines must be at least 1")
    if start_char < 0:
        raise InvalidParams("from_char must not be negative")
    target = resolve_client_path(root, workspace, path)
    read = await anyio.to_thread.run_sync(read_text_capped, target, max_bytes)
    if read is None:
        raise NotFound(f"no memory file at {path!r}")
    text, size = read
    reply = cast(GetReply, {"path": path, **page(text, start, lines, start_char, MAX_GET_CHARS)})
    if size is not None:
        reply["truncated"] = size
    return reply
