"""What a workspace knows about its embedding provider's work: progress, rate, failures."""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.core.chunking import indexed_text
from memoryd.core.replies import EmbeddingProgress

SEARCH_RETRY_START = 5.0  # after a provider failure, searches skip vectors this long, doubling
SEARCH_RETRY_MAX = 300.0


@dataclass(slots=True)
class EmbeddingState:
    """What `status` shows about the provider: active model, progress, last error.

    A *run* is a stretch of batches with chunks pending (a rebuild after a model change, a
    burst of new notes); its rate — vectors stored per second since the run's first batch
    began — gives the ETA. Consecutive provider failures (batches or query embeddings) make
    searches skip the query embedding for a while (``search_retry_at``), so a provider that is
    down or hung costs one slow search, not every search.
    """

    provider: str | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    embedded: int = 0  # vectors stored by this process
    run_started_at: float | None = None
    run_embedded: int = 0
    failures: int = 0  # consecutive provider failures
    search_retry_at: float = 0.0

    def begin_batch(self, now: float) -> None:
        if self.run_started_at is None:
            self.run_started_at, self.run_embedded = now, 0

    def end_run(self) -> None:
        self.run_started_at, self.run_embedded = None, 0

    def stored(self, count: int) -> None:
        self.embedded += count
        self.run_embedded += count
        self.succeeded()

    def succeeded(self) -> None:
        self.last_error, self.failures, self.search_retry_at = None, 0, 0.0

    def failed(self, reason: str, now: float) -> None:
        self.last_error, self.last_error_at = reason, now
        self.failures += 1
        pause = min(SEARCH_RETRY_MAX, SEARCH_RETRY_START * 2 ** (self.failures - 1))
        self.search_retry_at = now + pause

    def progress(self, pending: int, total: int, now: float) -> EmbeddingProgress:
        """done/total, rate (vectors/s in the current run) and ETA."""
        rate = None
        started = self.run_started_at
        if started is not None and self.run_embedded and now > started:
            rate = self.run_embedded / (now - started)
        return {
            "done": total - pending,
            "total": total,
            "pending": pending,
            "rate_per_sec": round(rate, 2) if rate else None,
            "eta_secs": round(pending / rate, 1)
            if rate and pending
            else (0.0 if not pending else None),
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "failures": self.failures,
        }


def embedding_input(text: str) -> str:
    """What the model embeds for a chunk: its :func:`indexed_text` (no HTML comments), or the
    text itself when nothing else is left (such a chunk is never returned, but a provider may
    refuse an empty input)."""
    indexed = indexed_text(text)
    return indexed if indexed.strip() else text
