"""What one dream attempt did (:class:`DreamResult`), as the dreamer returns it and
``dream.run`` answers it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memoryd.core.dreaming import GateOutcome, LossReport
from memoryd.core.replies import DreamRunReply

Outcome = Literal[
    "written", "skipped", "nothing_to_store", "rejected", "refused", "conflict", "failed"
]


@dataclass(frozen=True, slots=True)
class DreamResult:
    """What one dream attempt did.

    ``outcome`` / ``reason``: ``written``; ``skipped`` (a gate: ``disabled``, ``subagent``,
    ``too_soon``, ``too_few_sessions``; or ``lock_held``, ``lost_race``, ``nothing_to_do``,
    ``model_not_configured``, ``memory_too_large``); ``nothing_to_store`` (empty or
    ``NO_REPLY``); ``rejected`` (no heading); ``refused`` (``too_large``, ``loss`` — see
    :attr:`loss` — or ``ignores_logs``); ``conflict`` (``edited_meanwhile``, ``superseded``);
    ``failed`` (``model_error``, ``write_error``). ``archived`` are the logs moved into
    ``.history/sessions/<dream id>/``; ``kept`` consumed logs still in ``sessions/``.
    """

    outcome: Outcome
    memory_file: Path
    reason: str | None = None
    gates: GateOutcome | None = None
    consumed: tuple[str, ...] = ()
    archived: tuple[Path, ...] = ()
    kept: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    backup: str | None = None
    chars: int = 0
    loss: LossReport | None = None
    holder: int | None = None
    error: str | None = None
    dream_id: str | None = None
    truncated: tuple[str, ...] = ()
    detail: str | None = None

    @property
    def reindex_paths(self) -> tuple[Path, ...]:
        """Paths the index must sync: the archived logs (dropped) and the new ``MEMORY.md``."""
        return (*self.archived, self.memory_file) if self.outcome == "written" else ()

    def to_dict(self) -> DreamRunReply:
        out: DreamRunReply = {"outcome": self.outcome, "reason": self.reason}
        if self.gates is not None:
            out["gates"] = self.gates.to_dict()
        if self.holder is not None:
            out["holder_pid"] = self.holder
        if self.consumed or self.waiting:
            out["consumed"] = list(self.consumed)
            out["archived"] = [p.name for p in self.archived]
            out["kept"] = list(self.kept)
            out["waiting"] = list(self.waiting)
        if self.truncated:
            out["truncated"] = list(self.truncated)
        if self.outcome == "written":
            out["backup"] = self.backup
            out["chars"] = self.chars
            out["dream_id"] = self.dream_id
            out["archive"] = f".history/sessions/{self.dream_id}/"
        if self.detail:
            out["detail"] = self.detail
        if self.loss is not None and self.loss.refused:
            out["loss"] = self.loss.to_dict()
        if self.error:
            out["error"] = self.error
        return out
