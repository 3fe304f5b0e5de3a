"""Search counts between two log summaries (pure: the caller passes the time).

Every search is a ``search`` event at debug level; at info level ops see one
``search.summary`` per workspace at most every :data:`SUMMARY_SECS` (when the next search
comes, and when the workspace closes): how many searches, by mode, the median and slowest
time, how many found nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

SUMMARY_SECS = 300.0


@dataclass
class SearchTally:
    every: float = SUMMARY_SECS
    since: float | None = None
    took_ms: list[float] = field(default_factory=list)
    modes: dict[str, int] = field(default_factory=dict)
    empty: int = 0

    def add(self, now: float, took_ms: float, mode: str, results: int) -> dict[str, Any] | None:
        """Count one search; the summary to log when one is due (then the tally restarts)."""
        if self.since is None:
            self.since = now
        self.took_ms.append(took_ms)
        self.modes[mode] = self.modes.get(mode, 0) + 1
        self.empty += results == 0
        return self.flush(now) if now - self.since >= self.every else None

    def flush(self, now: float) -> dict[str, Any] | None:
        """The summary of the searches counted so far (None if none), and a fresh tally."""
        if not self.took_ms or self.since is None:
            return None
        summary = {
            "searches": len(self.took_ms),
            "secs": round(now - self.since, 1),
            "modes": dict(self.modes),
            "empty": self.empty,
            "took_ms_p50": round(median(self.took_ms), 3),
            "took_ms_max": round(max(self.took_ms), 3),
        }
        self.since, self.took_ms, self.modes, self.empty = now, [], {}, 0
        return summary
