"""Agent transcripts read into sessions: ``session.ingest`` (SPEC §17).

:class:`Ingestor` belongs to a workspace's actor. :meth:`Ingestor.ingest` reads what an
agent's transcript gained since the session's mark (bounded reads, in a worker thread),
parses it (:mod:`memoryd.core.transcripts`) and appends the messages through
:meth:`SessionManager.append` — the very path of ``session.append`` (journal, idle timer,
flush, close) — with the transcript's new mark on the same journal line. The token usage
the transcript reports goes to :meth:`SessionManager.usage`, so the ``pre_compaction``
trigger works for agents too. Ingests of one session run one at a time; a transcript whose
:func:`~memoryd.store.transcripts.file_stamp` is the one of its last read to the end is not
read again (:func:`~memoryd.store.transcripts.unchanged_since`; within 2 s of its last
change a coarse timestamp may hide a same-size rewrite, so the bytes before the mark are
checked as a read checks them). The actor coalesces a flood of hook reads
(:class:`~memoryd.runtime.workspace.coalesce.Coalescer`).

A transcript that was rewritten (shorter than the mark, or changed before it) is read again
from its start and only the messages the session does not hold yet are appended. The mark
of a session that closes is kept in the workspace's ingest registry
(:mod:`memoryd.store.ingested`): a session resumed under the same id goes on from there.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import anyio
import structlog

from memoryd.core.flushing import Message
from memoryd.core.held_transcript import message_digest
from memoryd.core.replies import IngestReply, UsageReply
from memoryd.core.secrets import Scrubber
from memoryd.core.transcripts import Format, Parsed, parse
from memoryd.runtime.workspace.sessions import SessionManager
from memoryd.store import ingested
from memoryd.store import transcripts as transcript_files
from memoryd.store.journal import IngestMark
from memoryd.store.layout import Workspace
from memoryd.store.transcripts import Chunk, Stamp, read_from, tail_hash, unchanged_since

log = structlog.get_logger(__name__)


class Ingestor:
    """Reads agent transcripts into the sessions of one workspace."""

    def __init__(
        self,
        sessions: SessionManager,
        workspace: Workspace,
        max_tool_chars: Callable[[], int],
    ) -> None:
        self.sessions = sessions
        self.workspace = workspace
        self.max_tool_chars = max_tool_chars
        self._locks: dict[str, anyio.Lock] = {}
        self._read_whole: dict[tuple[str, str], tuple[Stamp, int]] = {}
        """(session, transcript) → the transcript's stamp when it was last read to its end,
        and the wall clock (ns) it was taken at."""
        self._registry: tuple[tuple[int, int, int], dict[str, IngestMark]] | None = None
        self._registry_file = ingested.Registry(workspace.dir)
        self.log = log.bind(workspace=workspace.key.dirname)

    def _lock(self, session_id: str) -> anyio.Lock:
        return self._locks.setdefault(session_id, anyio.Lock())

    async def registered(self, path: str) -> IngestMark | None:
        """The mark a closed session left for ``path`` in the registry (read again only
        when the registry file changed: ``ingest --all`` asks once per transcript)."""

        def load() -> dict[str, IngestMark]:
            try:
                info = ingested.registry_path(self.workspace.dir).stat()
            except FileNotFoundError:
                return {}
            key = (info.st_size, info.st_mtime_ns, info.st_ino)
            if self._registry is None or self._registry[0] != key:
                self._registry = (key, ingested.load(self.workspace.dir))
            return self._registry[1]

        return (await anyio.to_thread.run_sync(load)).get(path)

    async def unchanged_since_registered(self, path: str) -> bool:
        """``path`` was read to its end by a closed session and has not changed since."""
        mark = await self.registered(path)
        if mark is None:
            return False
        chunk = await anyio.to_thread.run_sync(
            lambda: read_from(path, mark.offset, mark.tail, max_bytes=1)
        )
        return not chunk.rewritten and not chunk.data

    async def ingest(self, session_id: str, path: str, fmt: Format) -> IngestReply:
        """Read what ``path`` gained into the open session. Returns ``{ingested, count,
        offset, rewritten}`` (plus ``usage`` when the transcript reported token usage)."""
        async with self._lock(session_id):
            started = time.perf_counter()
            mark = self.sessions.ingest_mark(session_id, path)
            seen = self._read_whole.pop((session_id, path), None)
            if mark is not None and seen is not None:
                checked = await anyio.to_thread.run_sync(
                    unchanged_since, path, *seen, mark.offset, mark.tail
                )
                if checked is not None:  # unchanged: nothing to read
                    self._read_whole[(session_id, path)] = (seen[0], checked)
                    count = self.sessions.count(session_id)
                    offset = mark.offset
                    return {"ingested": 0, "count": count, "offset": offset, "rewritten": False}
            if mark is None:
                mark = await self.registered(path) or IngestMark(path, fmt)
            total, rewritten, chunks = 0, False, 0
            usage_out: UsageReply | None = None
            tool_names: dict[str, str] = {}
            limit = transcript_files.MAX_READ_BYTES
            while True:
                # Read and parse off the event loop: a first read can be megabytes.
                chunk, parsed = await anyio.to_thread.run_sync(
                    functools.partial(
                        _read_and_parse,
                        path,
                        mark,
                        fmt,
                        limit,
                        self.max_tool_chars(),
                        tool_names,
                    )
                )
                chunks += 1
                consumed = parsed.consumed
                if consumed == 0 and chunk.more:
                    if limit < transcript_files.MAX_LINE_BYTES:
                        limit *= 2  # one line longer than a read: read more of it
                        continue
                    consumed = len(chunk.data)  # a line beyond any reason: skipped
                messages = list(parsed.messages)
                compactions = mark.compactions + parsed.compactions
                if chunk.rewritten or rewritten:
                    if chunk.rewritten:
                        compactions = parsed.compactions
                    rewritten = True
                    digests = await anyio.to_thread.run_sync(
                        _digests, self.sessions.scrubber, messages
                    )
                    new = self.sessions.unseen(session_id, digests)
                    messages = [m for m, keep in zip(messages, new, strict=True) if keep]
                end = chunk.start + consumed
                new_mark = IngestMark(
                    path,
                    fmt,
                    end,
                    tail_hash(chunk.before + chunk.data[:consumed]),
                    compactions,
                )
                if messages or end != mark.offset or chunk.rewritten:
                    await self.sessions.append(session_id, messages, mark=new_mark)
                mark = new_mark
                total += len(messages)
                if parsed.usage is not None and parsed.usage.tokens > 0:
                    usage_out = await self.sessions.usage(
                        session_id,
                        parsed.usage.tokens,
                        parsed.usage.context_window,
                        parsed.usage.threshold_percent,
                        compactions,
                    )
                if not chunk.more or consumed == 0:
                    if chunk.stamp is not None:
                        self._read_whole[(session_id, path)] = (chunk.stamp, chunk.stamped_ns)
                    break
            count = self.sessions.count(session_id)
            self.log.info(
                "session.ingest",
                session_id=session_id,
                format=fmt,
                ingested=total,
                offset=mark.offset,
                rewritten=rewritten,
                chunks=chunks,
                took_ms=round((time.perf_counter() - started) * 1000, 3),
            )
        out: IngestReply = {
            "ingested": total,
            "count": count,
            "offset": mark.offset,
            "rewritten": rewritten,
        }
        if usage_out is not None:
            out["usage"] = usage_out
        return out

    async def closed(self, session_id: str, marks: list[IngestMark]) -> None:
        """Keep the marks of a session that closed, by ``session.close`` or for idleness
        (:attr:`SessionManager.on_closed`; see the module docstring)."""
        self._locks.pop(session_id, None)
        for key in [k for k in self._read_whole if k[0] == session_id]:
            del self._read_whole[key]
        if not marks:
            return
        try:
            await anyio.to_thread.run_sync(self._registry_file.record, marks, session_id)
        except OSError as exc:  # the session is closed; a resume reads its transcript again
            self.log.warning("ingest.registry_failed", error=str(exc))


def _read_and_parse(
    path: str,
    mark: IngestMark,
    fmt: Format,
    limit: int,
    max_tool_chars: int,
    tool_names: dict[str, str],
) -> tuple[Chunk, Parsed]:
    chunk = read_from(path, mark.offset, mark.tail, max_bytes=limit)
    parsed = parse(fmt, chunk.data, max_tool_chars=max_tool_chars, tool_names=tool_names)
    return chunk, parsed


def _digests(scrubber: Scrubber, candidates: list[Message]) -> list[bytes]:
    """The digest of each candidate as the session would hold it: with its secrets redacted
    (not counted: the ones kept are counted once, when :meth:`SessionManager.append`
    redacts them). The session compares them with the digests of every message it holds
    (:meth:`SessionManager.unseen`)."""
    return [
        message_digest(dataclasses.replace(m, content=scrubber.scrub(m.content, count=False).text))
        for m in candidates
    ]
