"""The session logs of one workspace (SPEC §7): ``sessions/YYYY-MM-DD-<slug>-<sid8>.md``.

:class:`SessionLogs` answers which log an open session writes on a day — the name it
recorded in its journal, else a new one that no other open session claimed and no file has
(two ids sharing their first 8 characters get two logs) — and appends a section to it under
the file's lock, reindexed at once. The :class:`~memoryd.runtime.workspace.sessions.
SessionManager` owns one and calls it for flush sections and close summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import date
from pathlib import Path

import anyio

from memoryd.core.workspace import session_log_name
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.runtime.workspace.open_session import OpenSession
from memoryd.store.files import LONE_SURROGATE, append_section, make_private_dirs, read_text


class SessionLogs:
    """Names and writes the session logs of the open sessions in ``sessions`` (the
    manager's own mapping, read live). ``scrub`` redacts the first user message before it
    becomes part of a file name; ``on_write`` is called with each log written."""

    def __init__(
        self,
        memory: WorkspaceMemory,
        sessions: Mapping[str, OpenSession],
        scrub: Callable[[str], str],
        on_write: Callable[[Path], None] | None = None,
    ) -> None:
        self.memory = memory
        self.dir = memory.workspace.sessions_dir
        self._sessions = sessions
        self._scrub = scrub
        self.on_write = on_write

    def path(self, s: OpenSession, day: date) -> Path:
        """The session's log for ``day`` (it exists once something is written)."""
        return self.dir / self.name(s, day)

    def name(self, s: OpenSession, day: date, *, on_disk: bool = False) -> str:
        """The session's log name for ``day``: the name it already wrote, else a new one no
        other open session claimed and, with ``on_disk``, that no existing file has (call
        that from a worker thread)."""
        known = s.log_names.get(day.isoformat())
        if known:
            return known
        first = s.held.tally.first_user
        taken = TakenLogNames(s, self._sessions.values(), day, self.dir, on_disk)
        return session_log_name(day, first and self._scrub(first), s.session_id, taken)

    async def append(self, s: OpenSession, section: str, day: date, *, once: bool = False) -> Path:
        """Append ``section`` to the session's log for ``day`` and reindex it at once. With
        ``once``, a log that already holds ``section`` is left as it is (a close that was
        killed after writing its summary and is now done again)."""
        key = day.isoformat()
        name = self.name(s, day)
        if key not in s.log_names:
            name = await anyio.to_thread.run_sync(lambda: self.name(s, day, on_disk=True))
            if key in s.log_names:  # claimed by a concurrent write meanwhile
                name = s.log_names[key]
            s.log_names[key] = name
            await s.journaled(s.journal.record_log, key, name)
        path = self.dir / name

        def write() -> None:
            make_private_dirs(path.parent)
            # compared as it would be written: a lone surrogate is written "?"
            if once and LONE_SURROGATE.sub("?", section).strip() in (read_text(path) or ""):
                return
            append_section(path, section)

        async with file_lock(path):
            await anyio.to_thread.run_sync(write)
        await self.memory.sync_paths([path])
        if self.on_write is not None:
            self.on_write(path)
        return path


class TakenLogNames:
    """The log names a session may not take for ``day``: those other open sessions claimed
    and, with ``on_disk``, those of existing files (a blocking stat: call from a worker
    thread). Two ids sharing their first 8 characters so get two logs (SPEC §7)."""

    def __init__(
        self,
        session: OpenSession,
        sessions: Iterable[OpenSession],
        day: date,
        sessions_dir: Path,
        on_disk: bool,
    ) -> None:
        key = day.isoformat()
        self.claimed = {o.log_names.get(key) for o in sessions if o is not session}
        self.sessions_dir = sessions_dir
        self.on_disk = on_disk

    def __contains__(self, name: object) -> bool:
        if name in self.claimed:
            return True
        return self.on_disk and isinstance(name, str) and (self.sessions_dir / name).exists()
