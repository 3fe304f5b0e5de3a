"""Session flush and session-end summary rules (SPEC §7) — pure.

Values in, values out; the caller passes ``now`` and does every read and write.

- :class:`Message` is one transcript message; :func:`parse_messages` checks what a client
  sent to ``session.append``.
- :func:`flush_window` picks the messages a flush looks at (from :func:`window_start` on)
  and :func:`flush_prompt` builds the model prompt (a *delta* prompt when an earlier flush
  of the session stored text).
- :func:`check_flush_answer` decides what of the model's answer is stored;
  :func:`strip_control` (used by it and by the dream's answer check) drops NUL and the other
  control characters except tab and newline from every model answer before it is written.
- :func:`pre_compaction_due` and :func:`first_flush_of_compaction` are the
  ``pre_compaction`` trigger.
- :func:`flush_section` and :func:`session_summary` are the text appended to a session log;
  :class:`SessionTally` keeps what the summary and the log's name need as a transcript grows.

**Real user messages.** The session-end summary, its thresholds and the session log's name
count only *real* user messages: role ``user``, not blank, not a slash command (``/compact``,
``/clear foo`` — a first word of ``/`` and a name without another ``/``, so ``/usr/bin is
broken`` is real) and not client markup that agents put into user turns (a text starting
with ``<tool_result``, ``<function_results``, ``<system-reminder``, ``<command-name``,
``<command-message``, ``<command-args``, ``<local-command-stdout``,
``<local-command-stderr``, ``<user-prompt-submit-hook`` or ``[Request interrupted``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal, get_args

from memoryd.core.markdown import Fences, headings, sections, strip_comments, unwrap_fence
from memoryd.core.times import rfc3339
from memoryd.errors import InvalidParams

Role = Literal["user", "assistant", "system", "tool"]
ROLES: tuple[str, ...] = get_args(Role)
Trigger = Literal["manual", "pre_compaction", "idle"]
TRIGGERS: tuple[str, ...] = get_args(Trigger)

#: Messages a flush window holds before it is extended back to a user message.
WINDOW_MESSAGES = 20
#: A message longer than this is cut in the flush prompt (tool output can be huge).
PROMPT_MESSAGE_CHARS = 4000
#: Topics listed in the session summary, and the length each is cut to.
SUMMARY_TOPICS = 5
TOPIC_CHARS = 100
#: The summary is written only with this many real user messages totalling this many bytes.
SUMMARY_MIN_USER_MESSAGES = 3
SUMMARY_MIN_USER_BYTES = 50
#: Longest message content accepted by :func:`parse_messages`, in characters.
MAX_MESSAGE_CHARS = 1_000_000

_MARKUP_PREFIXES = (
    "<tool_result",
    "<function_results",
    "<system-reminder",
    "<command-name",
    "<command-message",
    "<command-args",
    "<local-command-stdout",
    "<local-command-stderr",
    "<user-prompt-submit-hook",
    "[request interrupted",
)
_SLASH_COMMAND = re.compile(r"/[A-Za-z][\w:.-]*(?:\s|$)")
# Anything that looks like a flush mark: a superset of what chunking.flush_marks parses (any
# white space around it, Unicode spaces included), so an answer cannot forge one.
_FLUSH_MARK_LINE = re.compile(r"\s*<!--\s*flush\b.*-->\s*")
_NO_REPLY_NOISE = re.compile(r"[\s_\-*`'\".!,:;()\[\]]+")


@dataclass(frozen=True, slots=True)
class Message:
    """One transcript message as a client reported it."""

    role: Role
    content: str


def parse_messages(raw: object, *, param: str = "messages") -> list[Message]:
    """The messages of a ``session.append`` request, checked.

    ``raw`` must be a list of objects ``{"role": user|assistant|system|tool, "content":
    str}``; anything else is :class:`InvalidParams` naming the item and field.
    """
    if not isinstance(raw, list):
        raise InvalidParams(f"parameter {param!r} must be a list of messages", param=param)
    out: list[Message] = []
    for i, item in enumerate(raw):
        where = f"{param}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidParams(f"{where} must be an object with role and content", param=param)
        role, content = item.get("role"), item.get("content")
        extra = sorted(set(item) - {"role", "content"})
        if extra:
            raise InvalidParams(f"{where} has unknown field {extra[0]!r}", param=param)
        if role not in ROLES:
            raise InvalidParams(
                f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", param=param
            )
        if not isinstance(content, str):
            raise InvalidParams(f"{where}.content must be a string", param=param)
        if len(content) > MAX_MESSAGE_CHARS:
            raise InvalidParams(
                f"{where}.content is longer than {MAX_MESSAGE_CHARS} characters", param=param
            )
        out.append(Message(role, content))
    return out


# ---------------------------------------------------------------------- real user messages


def is_real_user_message(message: Message) -> bool:
    """True for a user message a person typed (see the module docstring)."""
    if message.role != "user":
        return False
    text = message.content.strip()
    if not text:
        return False
    if _SLASH_COMMAND.match(text):
        return False
    return not text.lower().startswith(_MARKUP_PREFIXES)


def real_user_messages(messages: Sequence[Message]) -> list[str]:
    """The stripped texts of the real user messages, in order."""
    return [m.content.strip() for m in messages if is_real_user_message(m)]


def first_user_message(messages: Sequence[Message]) -> str | None:
    """The first real user message (stripped), for the session log's name; None if none."""
    for message in messages:
        if is_real_user_message(message):
            return message.content.strip()
    return None


# ---------------------------------------------------------------------- window and prompt


def window_start(messages: Sequence[Message]) -> int:
    """Where the flush window of ``messages`` starts: the index of its first message (the
    window is the non-system messages from there on), ``len(messages)`` when every message
    is a system message. Scans back from the end: the cost is the window's, not the
    transcript's.

    The window of a longer transcript (more messages appended) never starts earlier, so no
    later flush looks at what lies before this index (an open session lets it go)."""
    start, kept = len(messages), 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role != "system":
            start, kept = i, kept + 1
            if kept == WINDOW_MESSAGES:
                break
    while start < len(messages) and messages[start].role != "user":
        earlier = start - 1
        while earlier >= 0 and messages[earlier].role == "system":
            earlier -= 1
        if earlier < 0:
            break  # no user message earlier: the window starts at the first message
        start = earlier
    return start


def flush_window(messages: Sequence[Message]) -> list[Message]:
    """What a flush looks at: system messages dropped, the last 20, extended back so that
    the window starts at a user message (or at the first message when none is earlier)."""
    return [m for m in messages[window_start(messages) :] if m.role != "system"]


FLUSH_SYSTEM_PROMPT = """\
You maintain the long-term memory of a software project. Read the transcript of a coding \
session and write down what will make future sessions in this project more effective:

- decisions that were made, and their rationale;
- technical context: architecture, APIs, file paths, commands, tools, configuration;
- debugging techniques that worked;
- problems and their solutions (problem → solution).

Rules:
- Answer in markdown: one `##` heading per topic, then short, specific notes.
- Do not record the user's personal preferences (they belong in global memory).
- Do not record progress, status reports or "next steps".
- If nothing in the transcript is worth keeping, reply exactly NO_REPLY."""

FLUSH_DELTA_RULE = """

Part of this session was already saved to memory (shown under "Already saved"). Write \
only what is new since then; do not repeat or rephrase anything already saved. If nothing \
new is worth keeping, reply exactly NO_REPLY."""


def _prompt_text(content: str) -> str:
    text = content.strip()
    if len(text) <= PROMPT_MESSAGE_CHARS:
        return text
    rest = len(text) - PROMPT_MESSAGE_CHARS
    return f"{text[:PROMPT_MESSAGE_CHARS]}\n[… {rest} more characters cut]"


def flush_prompt(window: Sequence[Message], previous_flush_text: str | None) -> tuple[str, str]:
    """``(system, user)`` for one flush call (SPEC §7).

    With ``previous_flush_text`` (what an earlier flush of this session stored) the prompt
    shows it and asks only for what is new. Each message is cut to
    :data:`PROMPT_MESSAGE_CHARS` characters.
    """
    previous = (previous_flush_text or "").strip()
    system = FLUSH_SYSTEM_PROMPT + (FLUSH_DELTA_RULE if previous else "")
    parts: list[str] = []
    if previous:
        parts.append(f"## Already saved\n\n{previous}\n\n## End of already saved\n")
    parts.append("## Transcript\n")
    parts.extend(f"[{m.role}]\n{_prompt_text(m.content)}\n" for m in window)
    parts.append("## End of transcript")
    return system, "\n".join(parts)


# ---------------------------------------------------------------------- answer check


@dataclass(frozen=True, slots=True)
class FlushVerdict:
    """What to do with a model's flush answer.

    ``outcome`` is ``store`` (write ``text``), ``nothing`` (empty or NO_REPLY) or
    ``rejected`` (no markdown heading); ``truncated`` says ``text`` was cut.
    """

    outcome: Literal["store", "nothing", "rejected"]
    text: str = ""
    truncated: bool = False
    reason: str = ""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_control(text: str) -> str:
    """``text`` without control characters other than tab and newline (NUL, escape
    sequences' ESC, DEL, C1 controls); CRLF and lone CR become newlines first."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def is_no_reply(text: str) -> bool:
    """True for ``NO_REPLY`` in any spelling: case, ``_``/``-``/space/none between the words,
    padding, quotes, markup and trailing punctuation (``"no reply."``, ``**NoReply**``)."""
    return _NO_REPLY_NOISE.sub("", text).lower() == "noreply"


def _fence_states(text: str) -> list[tuple[str, bool, bool]]:
    """Each line of ``text`` with whether it is part of a fenced code block (its fences
    included) and whether a fence is still open after it."""
    fences = Fences()
    return [(line, fences.feed(line), fences.fence is not None) for line in text.split("\n")]


def has_heading(text: str) -> bool:
    """True when a line outside code fences is a ``#`` or ``##`` heading with a title."""
    for _, h in headings(text.split("\n")):
        if h.level <= 2 and h.title:
            return True
    return False


def _cut(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` at a line boundary, never inside a code fence
    (one over-long first line is cut hard)."""
    states = _fence_states(text)
    keep, size = 0, -1
    for line, _, _ in states:
        if size + 1 + len(line) > max_chars:
            break
        size += 1 + len(line)
        keep += 1
    while keep > 0 and states[keep - 1][2]:
        keep -= 1  # do not leave a code block open
    if keep == 0:
        return text[:max_chars].rstrip()
    return "\n".join(line for line, _, _ in states[:keep]).rstrip()


def _normalised(text: str) -> str:
    return " ".join(strip_comments(text).casefold().split())


def new_sections(text: str, existing: Sequence[str]) -> str:
    """``text`` without the sections (cut at headings) whose normalised text (comments
    dropped, case folded, whitespace collapsed) is already a section of one of the
    ``existing`` texts — a flush that repeats what the log holds writes nothing twice.
    Returns ``""`` when every section is known."""
    known: set[str] = set()
    for other in existing:
        lines = other.split("\n")
        for sec in sections(lines):
            body = _normalised("\n".join(lines[sec.first : sec.stop]))
            if body:
                known.add(body)
    lines = text.split("\n")
    kept = [
        "\n".join(lines[sec.first : sec.stop])
        for sec in sections(lines)
        if _normalised("\n".join(lines[sec.first : sec.stop])) not in known
    ]
    return "\n".join(kept).strip()


def check_flush_answer(text: str, max_chars: int) -> FlushVerdict:
    """Decide what of a flush answer is stored (SPEC §7).

    Empty → nothing; ``NO_REPLY`` in any spelling (alone, or as the first line of an answer
    without headings) → nothing; no ``#``/``##`` heading line → rejected; longer than
    ``max_chars`` → cut at a line boundary (never leaving a code fence open). A whole answer
    wrapped in a ```` ```markdown ```` fence is unwrapped and lines that look like flush
    marks (``<!-- flush … -->``) are dropped, so an answer cannot forge a mark. Control
    characters are stripped first (:func:`strip_control`).
    """
    body = strip_control(text).strip()
    if not body:
        return FlushVerdict("nothing", reason="empty answer")
    if is_no_reply(body):
        return FlushVerdict("nothing", reason="NO_REPLY")
    inside = unwrap_fence(body, ("", "markdown", "md"))
    if inside is not None:
        body = inside.strip()
    body = "\n".join(
        line for line in body.split("\n") if not _FLUSH_MARK_LINE.fullmatch(line)
    ).strip()
    if not has_heading(body):
        first = body.split("\n", 1)[0]
        if is_no_reply(first) or not body:
            return FlushVerdict("nothing", reason="NO_REPLY")
        return FlushVerdict("rejected", reason="no markdown heading line")
    truncated = len(body) > max_chars
    if truncated:
        body = _cut(body, max_chars)
        if not has_heading(body):
            return FlushVerdict("rejected", reason="no markdown heading within max_write_chars")
    return FlushVerdict("store", body, truncated=truncated)


# ---------------------------------------------------------------------- pre_compaction trigger


def _exact(value: int | float) -> Fraction:
    return Fraction(value) if isinstance(value, int) else Fraction(repr(float(value)))


def compaction_threshold(
    context_window: int, threshold_percent: int | float, soft_threshold_tokens: int
) -> Fraction:
    """``window · threshold% − soft_threshold_tokens``, exactly (a fraction of a token)."""
    return Fraction(context_window) * _exact(threshold_percent) / 100 - Fraction(
        soft_threshold_tokens
    )


def pre_compaction_due(
    tokens: int,
    context_window: int,
    threshold_percent: int | float,
    soft_threshold_tokens: int,
) -> bool:
    """True when ``tokens ≥ window · threshold% − soft_threshold_tokens`` (exact arithmetic:
    100 000 tokens at 85 % with 4 000 soft → 81 000).

    Refuses (``InvalidParams``) a negative token count, a window below 1 and a threshold
    outside (0, 100].
    """
    if isinstance(tokens, bool) or tokens < 0:
        raise InvalidParams("tokens must not be negative", param="tokens")
    if isinstance(context_window, bool) or context_window < 1:
        raise InvalidParams("context_window must be at least 1", param="context_window")
    if not 0 < threshold_percent <= 100:
        raise InvalidParams(
            "threshold_percent must be above 0 and at most 100", param="threshold_percent"
        )
    threshold = compaction_threshold(context_window, threshold_percent, soft_threshold_tokens)
    return Fraction(tokens) >= threshold


def first_flush_of_compaction(last_flushed_count: int | None, compaction_count: int) -> bool:
    """True unless a ``pre_compaction`` flush already ran for this compaction count.

    Any other count than the last flushed one is new (a client that restarted its count
    from 0 gets flushes again).
    """
    return last_flushed_count is None or compaction_count != last_flushed_count


# ---------------------------------------------------------------------- session log text


def flush_section(text: str, now: datetime, trigger: Trigger) -> str:
    """The section a flush appends: the ``<!-- flush <UTC time> trigger=<trigger> -->`` mark
    line directly above the flushed markdown."""
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown flush trigger {trigger!r}")
    return f"<!-- flush {rfc3339(now)} trigger={trigger} -->\n{text.strip()}\n"


def _topic(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TOPIC_CHARS:
        return line
    return line[: TOPIC_CHARS - 1].rstrip() + "…"


@dataclass(slots=True)
class SessionTally:
    """What the session-end summary and the session log's name need of a whole transcript,
    kept as it grows: counts, and the first real user messages (the first one whole, for
    the log name; the first 5 as topics, cut already)."""

    roles: dict[str, int] = field(default_factory=dict)
    real_users: int = 0
    real_user_bytes: int = 0
    """UTF-8 bytes of the real user messages (stripped), all together."""
    first_user: str | None = None
    """The first real user message, stripped (:func:`first_user_message`)."""
    topics: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, messages: Iterable[Message]) -> SessionTally:
        tally = cls()
        tally.add(messages)
        return tally

    @property
    def messages(self) -> int:
        """How many messages were tallied (every one has a role)."""
        return sum(self.roles.values())

    def add(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.roles[m.role] = self.roles.get(m.role, 0) + 1
            if not is_real_user_message(m):
                continue
            text = m.content.strip()
            self.real_users += 1
            self.real_user_bytes += len(text.encode("utf-8", "replace"))
            if self.first_user is None:
                self.first_user = text
            if len(self.topics) < SUMMARY_TOPICS:
                self.topics.append(_topic(text))

    def summary(self, now: datetime) -> str | None:
        """:func:`session_summary` of the messages tallied."""
        if self.real_users < SUMMARY_MIN_USER_MESSAGES:
            return None
        if self.real_user_bytes < SUMMARY_MIN_USER_BYTES:
            return None
        by_role = ", ".join(f"{r} {self.roles[r]}" for r in ROLES if self.roles.get(r))
        lines = [
            "## Session Summary",
            "",
            f"- Date: {now.astimezone(UTC).date().isoformat()} (UTC)",
            f"- Messages: {self.messages} ({by_role})",
            f"- User messages: {self.real_users}",
            "",
            "## Topics Discussed",
            "",
        ]
        lines.extend(f"- {topic}" for topic in self.topics)
        return "\n".join(lines) + "\n"


def session_summary(messages: Sequence[Message], now: datetime) -> str | None:
    """The model-free session-end summary, or None when the session had fewer than 3 real
    user messages or they total fewer than 50 bytes (UTF-8).

    ``## Session Summary`` (UTC date, message counts by role) and ``## Topics Discussed``
    (the first 5 real user messages, each on one line and cut to 100 characters).
    """
    return SessionTally.of(messages).summary(now)


def message_dict(message: Message) -> dict[str, Any]:
    """The JSON shape of a message (as clients send it and journals store it)."""
    return {"role": message.role, "content": message.content}
