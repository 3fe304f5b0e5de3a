"""What a search answers (its hits and response) and the KNN scan that runs beside its DB phase."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from memoryd.core.ranking import Ranked
from memoryd.core.replies import SearchHitReply, SearchReply
from memoryd.core.snippet import snippet_of
from memoryd.core.times import rfc3339

SNIPPET_CHARS = 700

Neighbours = list[tuple[int, float]]  # (chunk seq, L2 distance), nearest first


@dataclass(frozen=True, slots=True)
class SearchHit:
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    score: float
    source: str
    snippet: str
    chunk_time: str | None
    heading: str

    def to_dict(self) -> SearchHitReply:
        return {
            "chunk_id": self.chunk_id,
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": self.score,
            "source": self.source,
            "snippet": self.snippet,
            "chunk_time": self.chunk_time,
            "heading": self.heading,
        }

    @classmethod
    def from_ranked(cls, item: Ranked, keywords: Sequence[str] = ()) -> SearchHit:
        """The hit of ``item``; its snippet shows the line matching most ``keywords``."""
        c = item.candidate
        return cls(
            chunk_id=c.chunk_id,
            path=c.path,
            start_line=c.start_line,
            end_line=c.end_line,
            score=round(item.reported_score, 6),
            source=c.source,
            snippet=snippet_of(c.text, keywords, SNIPPET_CHARS),
            chunk_time=rfc3339(c.chunk_time, zulu=False),
            heading=c.heading,
        )


@dataclass(frozen=True, slots=True)
class SearchResponse:
    results: list[SearchHit]
    mode: str  # "hybrid" | "fts_only" | "fts_fallback"
    synced_paths: int
    generation: int
    took_ms: float
    warning: str | None = None

    def to_dict(self) -> SearchReply:
        out: SearchReply = {
            "results": [hit.to_dict() for hit in self.results],
            "mode": self.mode,
            "synced_paths": self.synced_paths,
            "generation": self.generation,
            "took_ms": self.took_ms,
        }
        if self.warning:
            out["warning"] = self.warning
        return out


class SideScan:
    """A KNN scan run beside a search's DB phase, on another connection and thread.

    The DB phase syncs dirty files and runs the FTS query on the index's connection while
    sqlite-vec's scan runs on the :class:`~memoryd.store.vectors.VectorReader`'s connection:
    two phases on two cores instead of one after the other. :meth:`run` is the scan's task,
    started beside the phase in the same task group; the phase takes the result with
    :meth:`hits` (in its own thread) once its FTS query is done.
    """

    def __init__(self, scan: Callable[[], Neighbours | None]) -> None:
        self._scan = scan
        self._done = threading.Event()
        self._hits: Neighbours | None = None

    async def run(self, limiter: anyio.CapacityLimiter) -> None:
        try:
            self._hits = await anyio.to_thread.run_sync(self._scan, limiter=limiter)
        finally:
            self._done.set()

    def hits(self, timeout: float) -> Neighbours | None:
        """Wait (in the phase's thread) for the scan; None when it failed or took longer
        than ``timeout`` seconds."""
        self._done.wait(timeout)
        return self._hits
