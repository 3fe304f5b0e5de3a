"""The memory of one workspace as an async service: index, dirty set, search, remember.

:class:`WorkspaceMemory` is what an actor owns. It keeps the SPEC §1 phase rule: every
SQLite phase runs synchronously in the index's own thread (one at a time), and model calls
(query and chunk embeddings) are awaited between phases with no transaction open.

A search is (a) await the query embedding, (b) one DB phase that syncs dirty files and
reads FTS + KNN candidates, (c) pure ranking — then a small write phase bumps the access
count of what was returned to the caller.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog

from memoryd.core.config import SOURCES, Config
from memoryd.core.keywords import build_match_query, extract_keywords
from memoryd.core.ranking import Candidate, RankParams, cosine_from_l2, rank
from memoryd.core.replies import (
    EmbeddingPart,
    FileEntry,
    GetReply,
    ReindexReply,
    RememberReply,
    StatsReply,
)
from memoryd.core.searchlog import SearchTally
from memoryd.errors import InvalidParams, StorageError, describe_error
from memoryd.providers.embeddings import (
    EmbeddingProvider,
    foreground,
    normalize,
    similarity_scale,
)
from memoryd.runtime.workspace.embedding import EmbeddingState, embedding_input
from memoryd.runtime.workspace.notes import read_page, write_note
from memoryd.runtime.workspace.search import Neighbours, SearchHit, SearchResponse, SideScan
from memoryd.runtime.workspace.syncing import SYNC_ERRORS, Dirty, sync_big_file
from memoryd.store.connection import DatabaseError
from memoryd.store.ftsstats import fts_rows
from memoryd.store.index import ChunkSettings, Index, SyncReport, knn_k
from memoryd.store.layout import Workspace
from memoryd.store.mirror import mirror_wanted
from memoryd.store.vectors import VectorReader

log = structlog.get_logger(__name__)

T = TypeVar("T")

BATCH_SYNC_MIN = 16  # sync this many dirty files or more in batched transactions
MAX_YIELD_SECS = 1.0  # background embedding waits at most this long for searches to end


class WorkspaceMemory:
    """Index + dirty set + provider of one workspace. Create, ``await open()``, use, close."""

    def __init__(
        self,
        workspace: Workspace,
        root: Path,
        config: Config,
        provider: EmbeddingProvider | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.workspace = workspace
        self.root = root
        self.config = config
        self.provider = provider
        self.clock = clock
        self.index = Index(
            workspace.index_path,
            root=root,
            workspace_dir=workspace.dir,
            settings=ChunkSettings.of(config.index),
            clock=clock,
            vectors_in_memory=mirror_wanted(config.index.vectors_in_memory),
        )
        self.embedding = EmbeddingState(provider=provider.model_id if provider else None)
        self._dirty = Dirty((root, workspace.dir, workspace.sessions_dir))
        self._db = anyio.CapacityLimiter(1)
        self._accesses: list[str] = []  # chunk ids returned to callers, not yet counted
        self._searching = 0  # searches in flight: background embedding waits for none
        self._searches_done = anyio.Event()
        self._vectors = VectorReader(workspace.index_path)
        self._vec_db = anyio.CapacityLimiter(1)
        self._scanner: ThreadPoolExecutor | None = None  # scans the in-memory vector copy
        self.log = log.bind(workspace=workspace.key.dirname)
        self.scan: dict[str, int] | None = None  # files done/total of a big sync under way
        self._searches = SearchTally()  # one `search.summary` at info every few minutes

    def use_index_at(self, path: Path) -> None:
        """Keep the index at ``path`` instead of the workspace's ``index.sqlite`` (a
        read-only workspace: rebuilt from the markdown there). Call before :meth:`open`."""
        self.index.db_path = path
        self._vectors = VectorReader(path)

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one synchronous DB phase in the index's thread (one phase at a time); a
        damaged index file is rebuilt from the markdown first (:meth:`Index.guarded`)."""
        return await anyio.to_thread.run_sync(
            self.index.guarded, self._with_accesses, fn, *args, limiter=self._db
        )

    async def db_phase(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` as one DB phase of its own (maintenance, e.g. ``secrets purge``)."""
        return await self._run(fn, *args)

    def _with_accesses(self, fn: Callable[..., T], *args: Any) -> T:
        """Record the accesses of earlier searches first (in this phase's thread), then run
        ``fn``: a search does not pay a write transaction and a thread hop of its own for
        its access counts; they land with the next phase (at the latest at close)."""
        if self._accesses:
            accesses, self._accesses = self._accesses, []
            try:
                self.index.bump_access(accesses)
            except (StorageError, DatabaseError) as exc:  # access counts are best effort
                self.log.warning("search.access_count_failed", error=str(exc))
        return fn(*args)

    async def open(self) -> None:
        """Open the index (rebuilding it if corrupt) and find what changed while closed."""

        def phase() -> list[Path]:
            self.index.open()
            self._record_identity()
            return self.index.reconcile()

        self.mark_dirty(await self._run(phase))

    @property
    def provider_ready(self) -> bool:
        """A provider whose model id and dimension are known (an OpenAI endpoint may not be
        until it was probed; until then search runs FTS-only)."""
        return self.provider is not None and bool(getattr(self.provider, "dims_known", True))

    def _record_identity(self) -> bool:
        provider = self.provider if self.provider_ready else None
        return self.index.set_embedding_identity(
            provider.model_id if provider else None, provider.dims if provider else None
        )

    async def refresh_identity(self) -> bool:
        """Record the provider's identity once it is known; True when vectors must be rebuilt
        (a new model or dimension: old vectors are dropped and rebuilt in the background)."""
        changed = await self._run(self._record_identity)
        if changed:
            self.log.info("embedding.identity_changed", model=self.index.vec_model)
        return changed

    async def load_vectors(self) -> None:
        """Read the stored vectors into memory (``index.vectors_in_memory``) ahead of the
        first hybrid search, which would otherwise wait for it."""
        started = time.perf_counter()
        held = await self._run(self.index.load_mirror)
        if held:
            secs = round(time.perf_counter() - started, 3)
            self.log.info("embedding.vectors_in_memory", vectors=held, secs=secs)

    async def close(self) -> None:
        summary = self._searches.flush(time.monotonic())
        if summary is not None:
            self.log.info("search.summary", **summary)
        await self._run(self.index.close)
        await anyio.to_thread.run_sync(self._vectors.close, limiter=self._vec_db)
        if self._scanner is not None:
            self._scanner.shutdown(wait=True)
            self._scanner = None

    def _scan_copy(self, query: Sequence[float], k: int) -> Future[list[tuple[int, float]]]:
        """Start the scan of the in-memory vector copy on its own thread (numpy and SQLite
        both release the GIL: the scan and the FTS query run at the same time). Called in a
        DB phase, which makes no change to the copy until it has the result."""
        self.index.load_mirror()
        mirror = self.index.mirror
        assert mirror is not None
        if self._scanner is None:
            self._scanner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memoryd-knn")
        return self._scanner.submit(mirror.knn, query, k)

    def set_config(self, config: Config) -> None:
        """Take a reloaded configuration (search settings apply to the next search)."""
        self.config = config

    def mark_dirty(self, paths: Iterable[Path]) -> None:
        self._dirty.mark(paths)

    @property
    def dirty_count(self) -> int:
        return len(self._dirty.paths)

    @property
    def big_pending(self) -> anyio.Event:
        """Set when a search left big dirty files to :meth:`sync_big` (the actor runs it)."""
        return self._dirty.big_pending

    @big_pending.setter
    def big_pending(self, event: anyio.Event) -> None:
        self._dirty.big_pending = event

    # ------------------------------------------------------------------ sync

    async def sync(self) -> SyncReport:
        """Sync every dirty path now (SPEC §4); paths the index cannot take stay dirty."""
        report = await self.sync_paths(self._dirty.split_big(self._dirty.take()))
        report.add(await self.sync_big())
        return report

    async def _catch_up(self) -> None:
        """Before a search: when a memory directory changed (its mtime: a file created,
        renamed or deleted) since the last look, list it and mark the files the index does
        not know (or that are gone) dirty — a burst the watcher has not reported yet is
        then fully visible to this search (issue #17). Three ``stat`` calls otherwise."""
        marks = self._dirty.dirs_changed()
        if marks is None:
            return
        self.mark_dirty(await self._run(self.index.unlisted))
        self._dirty.listed(marks)

    async def sync_big(self) -> SyncReport:
        """Sync the big dirty files one by one: each is read and chunked in a worker thread
        without holding the index (searches go on meanwhile), then written
        :data:`BIG_SYNC_CHUNKS` chunks per DB phase.
        A search does not wait for this (issue #17: a file over the size limit must not make
        its workspace unresponsive); the file is searchable once it is written."""
        report = SyncReport()
        while self._dirty.big:
            path = self._dirty.big.pop()
            if not self.index.belongs(path):
                continue
            try:
                report.add(await sync_big_file(self.index, self._run, path, self.log))
            except SYNC_ERRORS as exc:  # disk full …: the next sync retries
                self.log.warning("index.sync_failed", path=str(path), error=str(exc))
                self.mark_dirty([path])
                report.errors.append(f"{path}: {exc}")
        return report

    async def sync_paths(self, paths: Iterable[Path]) -> SyncReport:
        """Re-chunk (or drop) these paths now, e.g. after flush or dream wrote them. A path
        the index cannot take now (disk full …) stays dirty and is in ``report.failed``."""
        wanted = list(paths)
        if not wanted:
            return SyncReport()
        report = await self._run(self._sync_tolerant, wanted)
        return report

    def _sync_tolerant(self, paths: list[Path]) -> SyncReport:
        paths = list(dict.fromkeys(paths))
        if len(paths) >= BATCH_SYNC_MIN:
            self.scan = {"done": 0, "total": len(paths)}  # `status` shows it meanwhile
            try:  # many files: batched transactions (a reindex, a cold start)
                return self.index.sync_many(paths, progress=self._scanned)
            except DatabaseError as exc:
                if self.index.damage(exc) is not None:
                    raise
                # one file the index cannot take must not stop the others: file by file
            finally:
                self.scan = None
        report = self.index.sync_paths(paths, tolerant=True)
        self.mark_dirty(path for path, _ in report.failed)
        return report

    def _scanned(self, done: int, total: int) -> None:
        self.scan = {"done": done, "total": total}  # one assignment: safe across threads

    async def reconcile(self) -> int:
        """Compare disk with the index; mark and sync what differs. Returns the count."""
        dirty = await self._run(self.index.reconcile)
        self.mark_dirty(dirty)
        await self.sync()
        return len(dirty)

    # ------------------------------------------------------------------ search

    def rank_params(self, max_results: int | None, min_score: float | None) -> RankParams:
        scale = similarity_scale(self.provider)
        return RankParams.of(self.config.search, max_results, min_score, scale)

    async def _query_vector(self, query: str) -> tuple[list[float] | None, str, str | None]:
        """The search's first phase: the query's embedding, the mode and a warning."""
        provider = self.provider
        if provider is None:
            return None, "fts_only", None
        if not query.strip():
            return None, "hybrid", None
        if not self.provider_ready or self.index.vec_dims is None:
            return None, "fts_fallback", "the embedding provider is not ready yet"
        state = self.embedding
        if self.clock() < state.search_retry_at:
            return None, "fts_fallback", f"the embedding provider is failing: {state.last_error}"
        try:
            vectors = await self._embed([query])
        except Exception as exc:  # noqa: BLE001 - any provider failure degrades to FTS (SPEC §5)
            reason = describe_error(exc)
            state.failed(reason, self.clock())
            self.log.warning("search.embedding_failed", error=reason)
            return None, "fts_fallback", reason
        state.succeeded()
        return normalize(vectors[0]), "hybrid", None

    async def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: Sequence[str] | None = None,
        count_access: bool = True,
    ) -> SearchResponse:
        """Hybrid search (SPEC §5): embed the query, one DB phase, rank.
        ``count_access=False`` for internal searches."""
        started = time.perf_counter()
        if sources is not None:
            bad = [s for s in sources if s not in SOURCES]
            if bad:
                raise InvalidParams(f"unknown source {bad[0]!r}; expected one of {SOURCES}")
        params = self.rank_params(max_results, min_score)
        if params.max_results < 1:
            raise InvalidParams("max_results must be at least 1")
        match = build_match_query(query)
        self._searching += 1
        try:
            # Background embedding waits meanwhile, its model units and DB phases (#19).
            with foreground(self.provider):
                vector, mode, warning = await self._query_vector(query)
                report, candidates, generation, rows = await self._read_candidates(
                    match, vector, params.max_results * 3, sources
                )
        finally:
            self._searching -= 1
            if not self._searching:
                self._searches_done.set()
                self._searches_done = anyio.Event()
        if report.failed:  # answer from the index as it is; say what it is missing
            warning = f"the index could not take every change: {report.failed[0][1].message}"
        params = dataclasses.replace(params, corpus_rows=rows)  # what its BM25 IDFs counted
        ranked = rank(candidates, params, self.clock())
        keywords = extract_keywords(query)  # for the snippets
        hits = [SearchHit.from_ranked(item, keywords) for item in ranked]
        if count_access:
            self._accesses.extend(h.chunk_id for h in hits)  # recorded by the next phase
        took_ms = round((time.perf_counter() - started) * 1000, 3)
        self.log.debug(
            "search",
            took_ms=took_ms,
            mode=mode,
            results=len(hits),
            candidates=len(candidates),
            synced_paths=report.synced,
        )
        summary = self._searches.add(time.monotonic(), took_ms, mode, len(hits))
        if summary is not None:
            self.log.info("search.summary", **summary)
        return SearchResponse(hits, mode, report.synced, generation, took_ms, warning)

    async def _read_candidates(
        self,
        match: str | None,
        vector: list[float] | None,
        limit: int,
        sources: Sequence[str] | None,
    ) -> tuple[SyncReport, list[Candidate], int, int]:
        """The search's DB phase (SPEC §5 steps 1–3). Without an in-memory copy of the
        vectors, sqlite-vec's scan runs beside it on the reader's connection (a
        :class:`SideScan`); the phase waits for it to merge."""
        await self._catch_up()
        dirty = self._dirty.split_big(self._dirty.take())
        k = knn_k(limit, sources)
        side = None
        if vector is not None and self.index.vec_dims is not None and self.index.mirror is None:
            scan = functools.partial(self._vectors.knn, vector, k, rebuilds=self.index.rebuilds)
            side = SideScan(scan)
        args = (dirty, match, vector, limit, sources, side)
        if side is None:
            read = await self._run(self._candidates_phase, *args)
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(side.run, self._vec_db)
                read = await self._run(self._candidates_phase, *args)
        self._dirty.wake_big()  # stale big files the phase put aside
        return read

    def _candidates_phase(
        self,
        dirty: list[Path],
        match: str | None,
        vector: list[float] | None,
        limit: int,
        sources: Sequence[str] | None,
        side: SideScan | None,
    ) -> tuple[SyncReport, list[Candidate], int, int]:
        """Sync the dirty files, FTS and KNN, load the candidates (in the index's thread);
        also the index generation and the FTS table's row count."""
        report = self._sync_tolerant(dirty) if dirty else SyncReport()
        k = knn_k(limit, sources)
        # The in-memory copy (exact, a few ms per 100k vectors) is scanned meanwhile.
        use_copy = vector is not None and self.index.vec_dims is not None and side is None
        copy_scan = self._scan_copy(vector or [], k) if use_copy else None
        try:
            hits = self.index.fts_hits(match, limit, sources)
        except BaseException:
            if copy_scan is not None:  # nothing may change the copy while it is read
                wait([copy_scan])
            raise
        knn: Neighbours | None = None
        if side is not None:  # the scan ran meanwhile on the reader's connection and thread
            knn = side.hits(self.config.embedding.timeout_secs + 5)
            if knn is None:  # the reader failed: scan here instead
                knn = self.index.knn(vector or [], k)
        elif copy_scan is not None:
            knn = copy_scan.result()
        found = self.index.merged(hits, knn, sources)
        stale = self._dirty.big_aside(self.index.stale(c.path for c in found))
        if stale:  # changed on disk, not yet reported by the watcher: sync, read again
            report.add(self._sync_tolerant(stale))
            found = self.index.candidates(match, vector, limit, sources)
        return report, found, self.index.generation(), fts_rows(self.index.conn)

    # ------------------------------------------------------------------ embeddings

    async def _after_searches(self) -> None:
        """Wait until no search is in flight (background work yields to searches), for at
        most :data:`MAX_YIELD_SECS` (searches back to back never starve it)."""
        with anyio.move_on_after(MAX_YIELD_SECS):
            while self._searching:
                await self._searches_done.wait()

    async def embed_pending(self, batch_size: int | None = None) -> int:
        """Embed one batch of chunks lacking vectors: DB phase, await, DB phase.

        Returns how many vectors were stored (0 when nothing is pending or no provider).
        Raises whatever the provider raises; the caller decides how to back off.
        """
        provider = self.provider
        if provider is None or not self.provider_ready:
            return 0
        size = batch_size or self.config.embedding.batch_size
        await self._after_searches()
        pending = await self._run(self.index.pending_vectors, size)
        state = self.embedding
        if not pending:
            if state.run_embedded and state.run_started_at is not None:
                secs = round(self.clock() - state.run_started_at, 3)
                self.log.info("embedding.caught_up", vectors=state.run_embedded, secs=secs)
            state.end_run()
            return 0
        state.begin_batch(self.clock())
        try:
            vectors = await self._embed([embedding_input(p.text) for p in pending])
        except Exception as exc:
            state.failed(describe_error(exc), self.clock())
            raise
        items = [(p, normalize(v)) for p, v in zip(pending, vectors, strict=True)]
        await self._after_searches()
        stored = await self._run(self.index.store_vectors, provider.model_id, items)
        state.stored(stored)
        return stored

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        """The provider's vectors for ``texts``; a wrong number or size is a ValueError. The
        provider enforces its own timeout; the one here only guards against a hang."""
        provider = self.provider
        assert provider is not None
        with anyio.fail_after(self.config.embedding.timeout_secs + 1):
            vectors = await provider.embed(texts)
        if len(vectors) != len(texts) or any(len(v) != provider.dims for v in vectors):
            raise ValueError("the provider answered the wrong number or size of vectors")
        return vectors

    async def nearest_similarity(self, text: str, k: int = 5) -> float | None:
        """The highest cosine similarity between ``text`` and the indexed chunk vectors, or
        None without a usable provider (or when embedding fails: dedupe is best effort).

        Chunks still lacking vectors get one batch embedded first (newest first, so a
        session's own recent flushes count). Stored vectors and the query are unit vectors,
        so ``1 − d²/2`` of sqlite-vec's L2 distance is their exact cosine.
        """
        provider = self.provider
        if provider is None or not self.provider_ready or self.index.vec_dims is None:
            return None
        try:
            await self.embed_pending()
            vectors = await self._embed([text])
            hits = await self._run(self.index.knn, normalize(vectors[0]), k)
        except Exception as exc:  # noqa: BLE001 - best effort: the caller writes rather than loses
            self.log.warning("similarity.failed", error=describe_error(exc))
            return None
        return max((cosine_from_l2(distance) for _, distance in hits), default=0.0)

    async def embed_all(self) -> int:
        """Embed until nothing is pending (tests and `reindex --embeddings`)."""
        total = 0
        while True:
            stored = await self.embed_pending()
            if stored == 0:
                pending = await self._run(self.index.count_pending_vectors)
                if pending == 0 or self.provider is None:
                    return total
            total += stored

    # ------------------------------------------------------------------ files

    async def remember(
        self, text: str, scope: str = "workspace", *, allow_secrets: bool = False
    ) -> RememberReply:
        """Append a note to the workspace or global MEMORY.md (SPEC §7) and index it; the
        note is scrubbed first (SPEC §18) unless ``allow_secrets``."""
        scrubber = None if allow_secrets else self.config.secrets.scrubber()
        root, ws = self.root, self.workspace
        return await write_note(root, ws, scope, text, scrubber, self.sync_paths, self.log)

    async def get(
        self, path: str, start: int = 1, lines: int | None = None, start_char: int = 0
    ) -> GetReply:
        """Read a memory file as a 1-based line window (:func:`notes.read_page`)."""
        max_bytes = self.config.index.max_file_bytes
        return await read_page(self.root, self.workspace, path, start, lines, start_char, max_bytes)

    async def files(self) -> list[FileEntry]:
        await self.sync()

        def phase() -> list[FileEntry]:
            # A listing of every file: compare them all with the disk first (cheap stats),
            # so changes the watcher has not reported yet are in it too.
            changed = self.index.reconcile()
            if changed:
                self._sync_tolerant(changed)
            return self.index.files()

        return await self._run(phase)

    async def stats(self) -> StatsReply:
        index = await self._run(self.index.stats)
        progress: EmbeddingPart = {}
        if self.provider is not None:
            chunks = index["chunks"]
            pending = index["vectors_pending"] if self.index.vec_dims is not None else chunks
            progress["embedding"] = self.embedding.progress(pending, chunks, self.clock())
        return {
            **index,
            "dirty": self.dirty_count,
            "embedding_provider": self.embedding.provider,
            "embedding_last_error": self.embedding.last_error,
            **progress,
        }

    async def reindex(self, embeddings: bool = False) -> ReindexReply:
        """Re-sync every memory file from disk; with ``embeddings``, drop and rebuild vectors."""
        started = time.perf_counter()

        def phase() -> SyncReport:
            if embeddings and self.provider_ready:
                assert self.provider is not None
                self.index.set_embedding_identity(
                    self.provider.model_id, self.provider.dims, force=True
                )
            return self._sync_tolerant(self.index.disk_files() + self._dirty.take())

        self.scan = {"done": 0, "total": 0}  # before the phase waits for the index
        try:
            report = await self._run(phase)
        finally:
            self.scan = None
        if report.failed:
            raise report.failed[0][1]
        pending = await self._run(self.index.count_pending_vectors)
        return {
            "files": report.synced,
            "changed": report.changed,
            "chunks_added": report.chunks_added,
            "vectors_pending": pending,
            "took_ms": round((time.perf_counter() - started) * 1000, 3),
        }
