"""``secrets scan`` and ``secrets purge`` for one workspace (SPEC §18).

**Scan** lists the secrets in the workspace's files on disk (``MEMORY.md``, session logs,
journals, ``.history/`` backups, ``dreams.jsonl``): file, line, kind and fingerprint, never
the value.

**Purge**, run by the workspace's actor under its write lock, in this order:

1. the chunk texts in the index that hold a secret are noted (their embedding-cache entries
   are keyed by the text);
2. each file with a secret is rewritten atomically with the secret redacted, under the
   file's lock — ``.history/`` backups included, since a backup holding the secret would
   defeat the purge (``dream --undo`` then restores the redacted version). The journal of a
   session open right now (``sessions/.live/``) is rewritten by the session manager under
   the session's write lock, and appended to again after the rename;
3. the noted texts' embedding-cache entries are deleted (every model);
4. the index re-syncs what changed (the affected chunks and their vectors go, the redacted
   text is chunked and embedded anew), then is compacted (FTS5 segments merged, free pages
   dropped, WAL truncated) so nothing of a secret stays in the file's free space.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import structlog

from memoryd.core.replies import WorkspacePurge
from memoryd.core.secrets import Scrubber
from memoryd.core.workspace import HISTORY_DIR, LIVE_DIR
from memoryd.providers.cache import CachedProvider, text_key
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store.layout import memory_relpath
from memoryd.store.secretscan import (
    FileScan,
    compact_index,
    memory_text_files,
    redact_file,
    redacted_text,
    scan_file,
    scan_text,
)

log = structlog.get_logger(__name__)


def scan_files(files: list[Path], scrubber: Scrubber) -> list[FileScan]:
    """The files among ``files`` that hold a secret, with their findings (blocking)."""
    return [scanned for p in files if (scanned := scan_file(p, scrubber)).findings]


def scan_tree(
    directory: Path, scrubber: Scrubber, too_large: list[Path] | None = None
) -> list[FileScan]:
    """The memory text files under ``directory`` that hold a secret (blocking); the files
    too large to scan are added to ``too_large``."""
    return scan_files(memory_text_files(directory, too_large), scrubber)


def describe(scans: list[FileScan], root: Path) -> list[dict[str, Any]]:
    """The ``files`` entry of a scan reply: path (relative to the memory root), findings."""
    return [
        {
            "path": memory_relpath(root, s.path),
            "findings": [
                {"line": f.line, "kind": f.kind, "fingerprint": f.fingerprint} for f in s.findings
            ],
        }
        for s in scans
    ]


async def scan_workspace(
    memory: WorkspaceMemory, scrubber: Scrubber, too_large: list[Path] | None = None
) -> list[FileScan]:
    return await anyio.to_thread.run_sync(scan_tree, memory.workspace.dir, scrubber, too_large)


async def redact_files(scans: list[FileScan], scrubber: Scrubber) -> tuple[list[Path], int]:
    """Rewrite each scanned file with its secrets redacted (each scanned again under its
    lock); returns the files rewritten and the secrets redacted."""
    done: list[Path] = []
    count = 0
    for scanned in scans:
        async with file_lock(scanned.path):
            n = await anyio.to_thread.run_sync(redact_file, scanned.path, scrubber)
        if n:
            done.append(scanned.path)
            count += n
    return done, count


def _redacted_journal(scrubber: Scrubber, data: bytes) -> bytes | None:
    """A journal's bytes with its secrets redacted (line by line), or None: none in it."""
    text = data.decode("utf-8", "surrogateescape")
    if not scan_text(text, scrubber, jsonl=True):
        return None
    return redacted_text(text, scrubber, jsonl=True).encode("utf-8", "surrogateescape")


async def purge_workspace(
    memory: WorkspaceMemory, scrubber: Scrubber, sessions: SessionManager | None = None
) -> WorkspacePurge:
    """Purge the workspace's files and index as the module docstring says (global files the
    caller redacted before are re-synced into this index too)."""
    root = memory.root
    too_large: list[Path] = []
    scans = await scan_workspace(memory, scrubber, too_large)

    def affected_texts() -> list[str]:
        rows = memory.index.conn.execute("SELECT text FROM chunks")
        return [text for (text,) in rows if scrubber.scan(text)]

    texts = await memory.db_phase(affected_texts)
    journals: list[Path] = []
    if sessions is not None:  # first: then the files pass finds nothing left in them
        transform = functools.partial(_redacted_journal, scrubber)
        done = await sessions.each_journal(lambda journal: journal.rewrite(transform))
        journals = [path for path, changed in done if changed]
    rewritten, redacted = await redact_files(scans, scrubber)
    rewritten += journals
    redacted += sum(len(s.findings) for s in scans if s.path in journals)
    dropped = 0
    provider = memory.provider
    if texts and isinstance(provider, CachedProvider):
        keys = [text_key(t) for t in texts]
        dropped = await anyio.to_thread.run_sync(provider.store.delete_keys, keys)
    synced = await memory.reconcile()
    await memory.db_phase(lambda: compact_index(memory.index.conn))
    out: WorkspacePurge = {
        "files": [memory_relpath(root, p) for p in rewritten],
        "redacted": redacted,
        "history_files": sum(1 for p in rewritten if HISTORY_DIR in p.parts),
        "chunks_dropped": len(texts),
        "cache_entries_dropped": dropped,
        "reindexed_files": synced,
        "journals": sum(1 for p in rewritten if p.parent.name == LIVE_DIR),
    }
    if too_large:  # not scanned, not redacted: said, never passed over in silence
        out["too_large"] = [memory_relpath(root, p) for p in too_large]
    log.warning(
        "secrets.purge",
        workspace=memory.workspace.key.dirname,
        files=len(rewritten),
        redacted=redacted,
        chunks=len(texts),
    )
    return out
