"""Dream decisions, input, prompt and answer checks (SPEC §8) — pure.

Everything the dream runtime decides without touching a file, the clock or a model:

- :func:`check_gates` — the three gates (config, time, sessions), cheapest first;
- :func:`assemble_input` — the existing ``MEMORY.md`` then session logs, oldest first, each
  under ``--- Session: <name> ---``, up to ``dream.max_input_chars``;
- :func:`dream_prompt` — the system prompt of the one model call;
- :func:`check_answer` — empty, ``NO_REPLY`` or heading-less answers store nothing (control
  characters stripped first, :func:`memoryd.core.flushing.strip_control`);
- :func:`check_loss` — refuse an answer that drops most of the existing ``##`` sections;
- :func:`adds_log_text` — refuse an answer that takes nothing from the session logs;
- :func:`effective_mtime` — a log's mtime for the gates and the cleanup, never in the future;
- :func:`consumed_hashes` — the content hashes of logs consumed by dreams not undone;
- :func:`with_footer` — the new ``MEMORY.md`` with its ``<!-- dream … -->`` footer;
- :func:`last_undoable` — which journalled dream an undo reverts.

**Counterpart rule** (the loss check compares section *content*, not titles only). An
existing ``##`` section's tokens are the content tokens of its body (of its heading when the
body has none). It is kept by the answer when (1) a section of the answer with the same
normalised heading (NFKC, lowercase, punctuation and emphasis dropped, spaces collapsed)
holds at least :data:`HEADING_OVERLAP` (25 %) of them — a heading kept with its body emptied
is *not* kept — or (2) at least :data:`SECTION_OVERLAP` (50 %) of them occur in a single
section of the answer — a merge of several old sections into one new topic keeps them all —
or (3) at least :data:`DOCUMENT_OVERLAP` (80 %) of them occur somewhere in the answer — a
section split over several new ones. Content tokens are distinct lowercase words of three
or more characters that are not common English stop words, plus character bigrams of CJK
runs. A section with no content token loses nothing and always counts as kept.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from memoryd.core.flushing import has_heading, is_no_reply, strip_control
from memoryd.core.markdown import sections, strip_comments, unwrap_fence
from memoryd.core.notes import DREAM_FOOTER
from memoryd.core.replies import LossReply
from memoryd.core.templates import is_scaffold
from memoryd.core.text import WORD, words_and_bigrams
from memoryd.core.times import rfc3339
from memoryd.core.workspace import is_log_of_session

GateName = Literal["disabled", "subagent", "too_soon", "too_few_sessions", "open"]
AnswerOutcome = Literal["ok", "empty", "no_reply", "no_heading"]

#: Fraction of an old section's tokens a new section with the same heading must hold.
HEADING_OVERLAP = 0.25
#: Fraction of an old section's tokens one new section must hold to be its counterpart.
SECTION_OVERLAP = 0.5
#: Fraction of an old section's tokens the whole answer must hold to be its counterpart.
DOCUMENT_OVERLAP = 0.8

MEMORY_SEPARATOR = "--- MEMORY.md ---"
_LOG_SEPARATOR = re.compile(r"^--- Session: .* ---$")
_FOOTER_RE = DREAM_FOOTER
_STOP_WORDS = frozenset(
    (
        "the and for are but not you all any can had has her was one our out use with this that "
        "from they them then than there their what when which who will would should could into "
        "onto over under about after before also only just more most some such very been being "
        "does did done doing have having its were your yours"
    ).split()
)


# ---------------------------------------------------------------------------- gates


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """The gate decision, with every gate's current value against its threshold.

    ``outcome`` is the first gate that stayed shut (cheapest first), or ``open``.
    ``hours`` is the whole hours since the last consolidation (None = never); ``count`` the
    session logs modified since then, the ending session excluded. Both are computed even
    when an earlier gate decided, so ``status`` can show them.
    """

    outcome: GateName
    enabled: bool
    hours: int | None
    min_hours: int
    count: int
    min_sessions: int
    manual: bool = False

    @property
    def open(self) -> bool:
        return self.outcome == "open"

    def to_dict(self) -> dict[str, Any]:
        """The decision as clients see it: ``too_soon {hours, min_hours}`` and so on."""
        match self.outcome:
            case "too_soon":
                return {"outcome": "too_soon", "hours": self.hours, "min_hours": self.min_hours}
            case "too_few_sessions":
                return {
                    "outcome": "too_few_sessions",
                    "count": self.count,
                    "min": self.min_sessions,
                }
            case _:
                return {"outcome": self.outcome}

    def values(self) -> dict[str, Any]:
        """Each gate's current value against its threshold (for ``dream.status``)."""
        return {
            "outcome": self.outcome,
            "enabled": self.enabled,
            "hours_since_last": self.hours,
            "min_hours": self.min_hours,
            "sessions_since_last": self.count,
            "min_sessions": self.min_sessions,
        }


def whole_hours(since: datetime, now: datetime) -> int:
    """Whole hours from ``since`` to ``now`` (23 h 59 m is 23); never negative."""
    return max(0, math.floor((now - since).total_seconds() / 3600))


def is_session_log(name: str) -> bool:
    """True for a session log's file name (``*.md``, not hidden, not a temp file)."""
    return name.endswith(".md") and not name.startswith(".")


def belongs_to_session(name: str, session_id: str) -> bool:
    """True when the log ``name`` may have been written by the session ``session_id`` (its
    sid8, with or without the suffix that tells sessions sharing a sid8 apart)."""
    if not session_id:
        return False
    return is_log_of_session(name, session_id)


def effective_mtime(mtime: float, ctime: float, now: float) -> float:
    """A log's modification time as the gates and the cleanup use it: ``mtime``, but never
    in the future — a future ``mtime`` is replaced by the file's status-change time (when
    the date was set), itself clamped to ``now``. So a log dated in the future counts once."""
    if mtime <= now:
        return mtime
    return min(ctime, now)


def count_sessions(
    session_mtimes: Mapping[str, datetime],
    last_consolidation: datetime | None,
    ending_session: str | None,
) -> int:
    """Session logs modified after the last consolidation, the ending session's excluded."""
    count = 0
    for name, mtime in session_mtimes.items():
        if not is_session_log(name):
            continue
        if ending_session and belongs_to_session(name, ending_session):
            continue
        if last_consolidation is None or mtime > last_consolidation:
            count += 1
    return count


def check_gates(
    *,
    enabled: bool,
    subagent: bool,
    last_consolidation: datetime | None,
    now: datetime,
    min_hours: int,
    session_mtimes: Mapping[str, datetime],
    ending_session: str | None,
    min_sessions: int,
    manual: bool = False,
) -> GateOutcome:
    """Decide whether a dream may run (SPEC §8.1).

    ``session_mtimes`` maps each file name in ``sessions/`` to its mtime (a missing
    directory is an empty mapping); ``ending_session`` is the id of the session that is
    ending now (its logs are not counted). A sub-agent session never triggers a dream; a
    manual dream skips the time and session gates (never the config gate, nor the lock).
    """
    hours = None if last_consolidation is None else whole_hours(last_consolidation, now)
    count = count_sessions(session_mtimes, last_consolidation, ending_session)

    def outcome(name: GateName) -> GateOutcome:
        return GateOutcome(name, enabled, hours, min_hours, count, min_sessions, manual)

    if not enabled:
        return outcome("disabled")
    if subagent:
        return outcome("subagent")
    if manual:
        return outcome("open")
    if hours is not None and hours < min_hours:
        return outcome("too_soon")
    if count < min_sessions:
        return outcome("too_few_sessions")
    return outcome("open")


# ---------------------------------------------------------------------------- input


@dataclass(frozen=True, slots=True)
class SessionLog:
    """One session log as read for a dream: its file name and text."""

    name: str
    text: str
    cut: bool = False
    """``text`` is only the beginning of a larger log (read up to what a dream can use):
    never taken whole, never blank."""


@dataclass(frozen=True, slots=True)
class DreamInput:
    """What one dream sends to the model and which logs it consumes."""

    text: str
    """The user message: ``MEMORY.md`` (if any) then the logs that fit."""
    consumed: tuple[str, ...]
    """Names of the logs that were sent (oldest first)."""
    waiting: tuple[str, ...]
    """Names of the logs that did not fit; they wait for the next run."""
    memory_included: bool
    memory_chars: int = 0
    """Characters of ``MEMORY.md`` in the input (its block, footer dropped)."""
    memory_too_large: bool = False
    """``MEMORY.md`` alone leaves no room for a log within ``max_chars``: nothing is sent."""
    truncated: tuple[str, ...] = ()
    """Logs sent cut at ``max_chars`` (their whole text is archived by the dream)."""

    @property
    def empty(self) -> bool:
        """Nothing to consolidate: no session log with any text was taken."""
        return not self.consumed

    @property
    def log_text(self) -> str:
        """The logs' text as sent (``MEMORY.md`` and the separator lines left out)."""
        lines = self.text[self.memory_chars :].split("\n")
        return "\n".join(line for line in lines if not _LOG_SEPARATOR.match(line))


def strip_footer(text: str) -> str:
    """``text`` without dream footers (they are rewritten by every dream)."""
    return _FOOTER_RE.sub("", text)


def assemble_input(
    memory_text: str | None, logs: Sequence[SessionLog], max_chars: int
) -> DreamInput:
    """The existing ``MEMORY.md`` followed by ``logs`` (given oldest first) (SPEC §8.4).

    ``MEMORY.md`` is skipped when missing, blank or only a scaffold, and its dream footer is
    dropped. Logs are taken in order under ``--- Session: <name> ---`` while the whole text
    stays within ``max_chars``; the first log that does not fit stops the taking (order is
    kept, so a newer log is never consolidated before an older one). Blank logs are
    consumed silently. The whole text never exceeds ``max_chars``: to guarantee progress the
    oldest log with text is always taken, cut at a line boundary when it alone does not fit
    (listed in ``truncated``; the dream archives its whole text); a log read only in part
    (:attr:`SessionLog.cut`) counts as one that does not fit. When ``MEMORY.md`` leaves
    no room for :data:`MIN_LOG_CHARS` of a log, nothing is sent (``memory_too_large``).
    """
    parts: list[str] = []
    memory = strip_footer(memory_text or "").strip()
    included = bool(memory) and not is_scaffold(memory_text or "")
    if included:
        parts.append(f"{MEMORY_SEPARATOR}\n{memory}\n")
    length = sum(len(p) for p in parts)
    names = tuple(log.name for log in logs)
    if included and length + 1 + MIN_LOG_CHARS > max_chars:
        return DreamInput("", (), names, included, length, memory_too_large=True)
    consumed: list[str] = []
    truncated: list[str] = []
    taken_text = False
    stop = len(logs)
    for i, log in enumerate(logs):
        body = log.text.strip()
        if not body and not log.cut:
            consumed.append(log.name)
            continue
        head = f"--- Session: {log.name} ---\n"
        grown = length + (1 if parts else 0) + len(head) + len(body) + 1
        if grown > max_chars or log.cut:
            if taken_text:
                stop = i
                break
            room = max_chars - (length + (1 if parts else 0) + len(head) + 1)
            body = _cut_lines(body, max(room, 1))
            truncated.append(log.name)
            grown = length + (1 if parts else 0) + len(head) + len(body) + 1
        parts.append(f"{head}{body}\n")
        length = grown
        consumed.append(log.name)
        taken_text = True
    waiting = tuple(log.name for log in logs[stop:])
    memory_chars = len(parts[0]) if included else 0
    if not taken_text:
        return DreamInput("", (), names, included, memory_chars)
    return DreamInput(
        "\n".join(parts), tuple(consumed), waiting, included, memory_chars, False, tuple(truncated)
    )


#: The least room for a log's text a dream input must have besides ``MEMORY.md``.
MIN_LOG_CHARS = 200


def _cut_lines(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars``, at a line boundary when there is one."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    newline = cut.rfind("\n")
    return cut[:newline] if newline > max_chars // 2 else cut


# ---------------------------------------------------------------------------- prompt


def dream_prompt(now: datetime) -> str:
    """The system prompt of the dream call (SPEC §8.4 step 2); ``now`` gives today's date."""
    today = now.astimezone(UTC).date().isoformat()
    return f"""\
You maintain the long-term memory of one software project for coding agents.
You are given the project's current MEMORY.md (under "{MEMORY_SEPARATOR}", when there is one)
followed by recent session logs, oldest first, each under a "--- Session: <name> ---" line.
A session log's name starts with the date it was written (YYYY-MM-DD). Today is {today} (UTC).

Write the new, complete MEMORY.md:
- Existing memory must be merged, not dropped: keep every item of the current MEMORY.md
  unless a newer session contradicts or supersedes it. Keep its title line.
- Merge related items into topic sections: one "## " section per self-contained topic.
- Resolve contradictions by keeping the newest truth (later sessions win).
- Turn relative dates ("yesterday", "last week") into absolute dates.
- Drop greetings, tool noise, counts, "current state" and "next steps".
- Keep decisions and their rationale, architecture, paths, APIs and tools, preferences,
  and problem -> solution pairs.
- Answer with the markdown document only: no commentary, no code fence around it.
- If there is no existing memory and nothing is worth keeping, answer exactly NO_REPLY.
"""


# ---------------------------------------------------------------------------- answers


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    """The verdict on a model answer; ``text`` is the cleaned document when ``ok``."""

    outcome: AnswerOutcome
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def check_answer(answer: str) -> AnswerCheck:
    """Validate a dream answer (SPEC §8.4 step 3).

    Empty → ``empty``; ``NO_REPLY`` in any spelling → ``no_reply``; no ``# `` or ``## ``
    heading line outside code fences → ``no_heading`` (the flush rules of
    :mod:`memoryd.core.flushing`, so both steps judge answers alike). Control characters
    other than tab and newline are stripped first. Otherwise ``ok`` with the text trimmed,
    one code fence around the whole answer removed and any dream footer the model echoed
    dropped.
    """
    text = strip_control(answer).strip()
    if not text:
        return AnswerCheck("empty")
    if is_no_reply(text):
        return AnswerCheck("no_reply")
    inside = unwrap_fence(text)
    text = strip_footer(text if inside is None else inside).strip()
    if not text:
        return AnswerCheck("empty")
    if is_no_reply(text):
        return AnswerCheck("no_reply")
    if not has_heading(text):
        return AnswerCheck("no_heading")
    return AnswerCheck("ok", text)


# ---------------------------------------------------------------------------- loss check


@dataclass(frozen=True, slots=True)
class Section:
    """A markdown section: its heading level (0 = text before any heading), heading, body."""

    level: int
    heading: str
    body: str


def split_sections(text: str) -> list[Section]:
    """``text`` cut at every heading line (``#`` … ``######``) outside code fences.

    Text before the first heading is a section of level 0 when it is not blank.
    """
    lines = text.split("\n")
    out: list[Section] = []
    for part in sections(lines):
        h = part.heading
        body = "\n".join(lines[part.first + (h is not None) : part.stop]).strip()
        if h is not None:
            out.append(Section(h.level, h.title, body))
        elif body:
            out.append(Section(0, "", body))
    return out


def normalize_heading(heading: str) -> str:
    """A heading compared loosely: NFKC, lowercase, punctuation and emphasis dropped."""
    text = unicodedata.normalize("NFKC", heading).lower()
    return " ".join(WORD.findall(text))


def content_tokens(text: str) -> frozenset[str]:
    """Distinct content words (3+ chars, not stop words) and CJK character bigrams."""
    words, bigrams = words_and_bigrams(unicodedata.normalize("NFKC", text).lower())
    return frozenset(bigrams).union(w for w in words if len(w) >= 3 and w not in _STOP_WORDS)


@dataclass(frozen=True, slots=True)
class LossReport:
    """How many of the old ``##`` sections the answer keeps, and which it loses."""

    total: int
    lost: tuple[str, ...]
    max_loss_fraction: float

    @property
    def fraction(self) -> float:
        return len(self.lost) / self.total if self.total else 0.0

    @property
    def refused(self) -> bool:
        return self.fraction > self.max_loss_fraction

    def to_dict(self) -> LossReply:
        return {
            "sections": self.total,
            "lost": list(self.lost),
            "lost_fraction": round(self.fraction, 3),
            "max_loss_fraction": self.max_loss_fraction,
        }


def _has_counterpart(old: Section, new: Sequence[Section], new_doc: frozenset[str]) -> bool:
    tokens = content_tokens(old.body) or content_tokens(old.heading)
    if not tokens:
        return True
    wanted = normalize_heading(old.heading)
    for section in new:
        shared = tokens & content_tokens(f"{section.heading}\n{section.body}")
        same = bool(wanted) and section.level > 0 and normalize_heading(section.heading) == wanted
        if len(shared) >= (HEADING_OVERLAP if same else SECTION_OVERLAP) * len(tokens):
            return True
    return len(tokens & new_doc) >= DOCUMENT_OVERLAP * len(tokens)


def check_loss(old_text: str | None, new_text: str, max_loss_fraction: float) -> LossReport:
    """Compare the old ``MEMORY.md`` with an answer by the counterpart rule (module doc).

    Only the old file's ``##`` sections count; a file without any (or none) loses nothing.
    """
    old = [s for s in split_sections(strip_footer(old_text or "")) if s.level == 2]
    new = split_sections(new_text)
    new_doc = content_tokens(new_text)
    lost = tuple(s.heading for s in old if not _has_counterpart(s, new, new_doc))
    return LossReport(len(old), lost, max_loss_fraction)


def adds_log_text(memory_text: str | None, log_texts: Iterable[str], answer: str) -> bool:
    """Whether ``answer`` takes anything from the session logs: True when the logs hold
    fewer than :data:`MIN_NEW_TOKENS` content tokens that ``MEMORY.md`` lacks (HTML comments
    such as flush marks left out: nothing new to take), else when the answer has at least
    one of those new tokens. The old ``MEMORY.md`` sent back unchanged is False."""
    known = content_tokens(strip_comments(memory_text or ""))
    logs = (content_tokens(strip_comments(t)) for t in log_texts)
    new = frozenset[str]().union(*logs) - known
    return len(new) < MIN_NEW_TOKENS or bool(new & content_tokens(answer))


#: Below this many new content tokens the logs add nothing an answer must take.
MIN_NEW_TOKENS = 3


# ---------------------------------------------------------------------------- footer


def footer(consumed: Sequence[str], now: datetime) -> str:
    """``<!-- dream <UTC time> consumed: a.md, b.md -->`` (``--`` in names made safe)."""
    when = rfc3339(now)
    names = ", ".join(name.replace("--", "-\u2010") for name in consumed) or "none"
    return f"<!-- dream {when} consumed: {names} -->"


def with_footer(text: str, consumed: Sequence[str], now: datetime) -> str:
    """The new ``MEMORY.md``: ``text`` (old footers dropped), a blank line, the footer."""
    return f"{strip_footer(text).rstrip()}\n\n{footer(consumed, now)}\n"


# ---------------------------------------------------------------------------- journal


def consumed_hashes(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Content hash → id of the dream that consumed a log with it, over every ``written``
    dream no ``undone`` entry names (an undo gives its logs back to the next dream)."""
    items = [dict(e) for e in entries]
    undone = {e.get("undoes") for e in items if e.get("outcome") == "undone"}
    out: dict[str, str] = {}
    for entry in items:
        if entry.get("outcome") != "written" or entry.get("id") in undone:
            continue
        hashes = entry.get("input_hashes")
        if isinstance(hashes, dict):
            for value in hashes.values():
                if isinstance(value, str):
                    out[value] = str(entry.get("id"))
    return out


def last_undoable(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The newest ``written`` journal entry that no later ``undone`` entry names by ``id``."""
    items: list[dict[str, Any]] = [dict(e) for e in entries]
    undone = {e.get("undoes") for e in items if e.get("outcome") == "undone"}
    for entry in items[::-1]:
        if entry.get("outcome") == "written" and entry.get("id") not in undone:
            return entry
    return None
