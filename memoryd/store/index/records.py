"""The small records the index takes and returns: chunk settings, sync reports, pending vectors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from memoryd.core.config import IndexConfig
from memoryd.errors import StorageError
from memoryd.store.prepare import DEFAULT_MAX_FILE_BYTES

_DEFAULTS = IndexConfig()


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    """How files are chunked and how much of each is indexed: the ``[index]`` keys
    (:meth:`of`); the defaults are the config's, but for ``min_chars``."""

    max_chars: int = _DEFAULTS.max_chunk_chars
    overlap_chars: int = _DEFAULTS.chunk_overlap_chars
    min_chars: int = 0
    """``index.min_chunk_chars`` (200 in the config): smaller sections are merged with the
    next; 0 here keeps one chunk a section."""
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    """``index.max_file_bytes``: how much of one file is indexed."""

    @classmethod
    def of(cls, index: IndexConfig) -> ChunkSettings:
        return cls(
            index.max_chunk_chars,
            index.chunk_overlap_chars,
            min_chars=index.min_chunk_chars,
            max_file_bytes=index.max_file_bytes,
        )


@dataclass(slots=True)
class SyncReport:
    """What one sync phase did: paths looked at, re-chunked, removed; chunks added/removed."""

    synced: int = 0
    changed: int = 0
    removed: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    errors: list[str] = field(default_factory=list)
    failed: list[tuple[Path, StorageError]] = field(default_factory=list)
    """Paths the index could not take (disk full …); they are still to be synced."""

    def add(self, other: SyncReport) -> None:
        self.synced += other.synced
        self.changed += other.changed
        self.removed += other.removed
        self.chunks_added += other.chunks_added
        self.chunks_removed += other.chunks_removed
        self.errors.extend(other.errors)
        self.failed.extend(other.failed)


@dataclass(frozen=True, slots=True)
class PendingVector:
    seq: int
    hash: str
    text: str
