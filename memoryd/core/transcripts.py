"""Agent transcripts as session messages (SPEC §17) — pure.

Bytes in, :class:`Parsed` out: the messages a chunk of a transcript holds, how many bytes
of it were consumed (a line without its ``\\n`` is left for the next read unless the read
is ``final``), the last token usage it reported and how many compactions it recorded.
Parsing is lenient: a malformed line or a line type it does not know is skipped (counted
in ``skipped``), never fatal.

Formats (``FORMATS``):

- ``claude-code`` — Claude Code's session JSONL (``~/.claude/projects/<dir>/<id>.jsonl``).
  ``user`` and ``assistant`` lines carry ``message`` (an Anthropic message). One assistant
  reply is split over several lines sharing ``message.id`` (a ``thinking``, a ``text`` and
  a ``tool_use`` block each on its own line, ``usage`` repeated): the text of one reply
  becomes one message. ``thinking`` blocks are the model's private reasoning and are
  dropped. ``progress``, ``file-history-snapshot``, ``queue-operation``, ``summary`` and
  ``system`` lines are meta (a ``system`` line of subtype ``compact_boundary`` counts a
  compaction); ``isMeta`` user lines and the compaction summary (a user message beginning
  "This session is being continued from a previous conversation") are skipped; a
  ``<task-notification>`` user message becomes one ``tool`` line.
- ``codex`` — a Codex rollout (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): lines
  ``{timestamp, type, payload}`` of type ``session_meta``, ``turn_context``,
  ``response_item`` (``message``, ``reasoning``, ``function_call``,
  ``function_call_output``, ``custom_tool_call``, ``custom_tool_call_output``,
  ``local_shell_call``, ``web_search_call``), ``event_msg`` (``token_count`` gives usage;
  ``user_message`` / ``agent_message`` repeat the response items and are skipped) and
  ``compacted`` (one per compaction). Developer messages and the injected
  ``<environment_context>`` / ``<user_instructions>`` / AGENTS.md turns are skipped.
- ``plain`` — any other agent: one JSON object ``{"role", "content"}`` per line, or text
  whose lines starting with ``user:``, ``assistant:``, ``system:`` or ``tool:`` open a
  message (the following lines continue it).

Tool calls and results enter a session as one ``tool`` line each — name, target and
outcome, cut to ``max_tool_chars``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from memoryd.core.flushing import MAX_MESSAGE_CHARS, Message

Format = Literal["claude-code", "codex", "plain"]
FORMATS: tuple[str, ...] = get_args(Format)

#: Context windows and compaction thresholds assumed when a transcript does not say them.
CLAUDE_CONTEXT_WINDOW = 200_000
CLAUDE_COMPACT_PERCENT = 90.0
CODEX_CONTEXT_WINDOW = 272_000
CODEX_COMPACT_PERCENT = 90.0

COMPACTION_SUMMARY_PREFIX = "This session is being continued from a previous conversation"
_CLAUDE_META_TYPES = frozenset(
    {"progress", "file-history-snapshot", "queue-operation", "summary", "system"}
)
_CLAUDE_SKIPPED_PREFIXES = (
    "<local-command-stdout",
    "<local-command-stderr",
    "<local-command-caveat",
    "<command-name",
    "<command-message",
    "<command-args",
    "<system-reminder",
    "<user-prompt-submit-hook",
    "caveat: the messages below were generated",
)
_CODEX_INJECTED_PREFIXES = (
    "<environment_context",
    "<user_instructions",
    "<permissions instructions",
    "<user_shell_command",
    "# agents.md instructions",
    "<turn_aborted",
)
_TARGET_KEYS = (
    "file_path",
    "path",
    "notebook_path",
    "command",
    "cmd",
    "pattern",
    "url",
    "query",
    "description",
    "prompt",
    "skill",
)
_PLAIN_ROLE = re.compile(r"(user|assistant|system|tool)\s*:\s?", re.I)
_TAG = re.compile(r"<(summary|status)>(.*?)</\1>", re.S)
_EXIT_CODE = re.compile(r"^(?:Exit code|Process exited with code):? (\d+)", re.M)
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)


@dataclass(frozen=True, slots=True)
class Usage:
    """A transcript's last token-usage report, as ``session.usage`` takes it."""

    tokens: int
    context_window: int
    threshold_percent: float


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one chunk of a transcript holds."""

    messages: tuple[Message, ...]
    consumed: int
    """Bytes of the chunk consumed: the next read starts there."""
    usage: Usage | None = None
    compactions: int = 0
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class TranscriptInfo:
    """What the head of a transcript says about its session (for ``memoryd ingest``)."""

    session_id: str | None = None
    cwd: str | None = None


@dataclass(slots=True)
class _State:
    max_tool_chars: int
    messages: list[Message] = field(default_factory=list)
    usage: Usage | None = None
    compactions: int = 0
    skipped: int = 0
    reply_id: str | None = None
    """The Claude message id whose text the last assistant message holds."""
    tool_names: dict[str, str] = field(default_factory=dict)

    def emit(self, role: Literal["user", "assistant", "system", "tool"], text: str) -> None:
        text = text.strip()
        if text:
            self.messages.append(Message(role, capped(text)))
            self.reply_id = None

    def tool(self, text: str) -> None:
        self.emit("tool", one_line(text, self.max_tool_chars))


def capped(text: str) -> str:
    """``text`` cut to the :data:`MAX_MESSAGE_CHARS` ``session.append`` takes (with ``…``): a
    pasted log in a transcript is one message, never megabytes of journal and memory."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[: MAX_MESSAGE_CHARS - 1] + "…"


def one_line(text: str, max_chars: int) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``max_chars`` with ``…``."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    return flat[: max(0, max_chars - 1)].rstrip() + "…"


def _lines(data: bytes, final: bool) -> Iterator[tuple[bytes, int]]:
    """Complete lines of ``data`` with the offset just past each (a last line without
    ``\\n`` only when ``final``)."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            if final and start < len(data):
                yield data[start:], len(data)
            return
        yield data[start:end], end + 1
        start = end + 1


def _json(line: bytes) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def parse(
    fmt: Format,
    data: bytes,
    *,
    max_tool_chars: int = 200,
    final: bool = False,
    tool_names: dict[str, str] | None = None,
) -> Parsed:
    """The messages in ``data`` (a chunk of a transcript starting at a line boundary).

    ``tool_names`` (tool call id → name) is read and extended: pass the same dict for the
    chunks of one read, so a result in a later chunk than its call still names the tool."""
    state = _State(max_tool_chars)
    if tool_names is not None:
        state.tool_names = tool_names
    if fmt == "plain":
        consumed = _parse_plain(state, data, final)
    else:
        consumed = 0
        handle = _claude_line if fmt == "claude-code" else _codex_line
        for raw, end in _lines(data, final):
            consumed = end
            record = _json(raw)
            if record is None:
                if raw.strip():
                    state.skipped += 1
                continue
            try:
                handle(state, record)
            except (TypeError, ValueError, AttributeError, KeyError):
                state.skipped += 1  # a line of a shape not seen before: skipped, never fatal
    return Parsed(tuple(state.messages), consumed, state.usage, state.compactions, state.skipped)


# ---------------------------------------------------------------------- Claude Code


def _blocks(content: object) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def _text_of(content: object) -> str:
    """The text of a content value (a string or a list of text blocks)."""
    return "\n".join(
        str(b.get("text", "")) for b in _blocks(content) if b.get("type") in ("text", None)
    )


def _target(tool_input: object) -> str:
    if isinstance(tool_input, str):
        return tool_input
    if not isinstance(tool_input, Mapping):
        return ""
    for key in _TARGET_KEYS:
        value = tool_input.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _outcome(is_error: bool, text: str) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    verdict = "error" if is_error else "ok"
    return f"{verdict}: {first}" if first else verdict


def _claude_line(state: _State, record: Mapping[str, Any]) -> None:
    kind = record.get("type")
    if kind in _CLAUDE_META_TYPES:
        if kind == "system" and record.get("subtype") == "compact_boundary":
            state.compactions += 1
        return
    if kind not in ("user", "assistant") or record.get("isMeta"):
        if kind not in ("user", "assistant"):
            state.skipped += 1
        return
    message = record.get("message")
    if not isinstance(message, Mapping):
        state.skipped += 1
        return
    if kind == "assistant":
        _claude_assistant(state, message, record)
    else:
        _claude_user(state, message, record)


def _claude_assistant(state: _State, message: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    if message.get("model") == "<synthetic>" or record.get("isApiErrorMessage"):
        return
    reply_id = message.get("id")
    reply_id = reply_id if isinstance(reply_id, str) else None
    usage = message.get("usage")
    if isinstance(usage, Mapping):
        tokens = sum(
            int(usage.get(k) or 0)
            for k in (
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "output_tokens",
            )
        )
        state.usage = Usage(tokens, CLAUDE_CONTEXT_WINDOW, CLAUDE_COMPACT_PERCENT)
    for block in _blocks(message.get("content")):
        match block.get("type"):
            case "text":
                text = str(block.get("text", "")).strip()
                if not text:
                    continue
                last = state.messages[-1] if state.messages else None
                if reply_id and state.reply_id == reply_id and last and last.role == "assistant":
                    joined = capped(f"{last.content}\n\n{text}")
                    state.messages[-1] = Message("assistant", joined)
                else:
                    state.emit("assistant", text)
                state.reply_id = reply_id
            case "tool_use":
                name = str(block.get("name") or "tool")
                if isinstance(block.get("id"), str):
                    state.tool_names[block["id"]] = name
                target = _target(block.get("input"))
                state.tool(f"{name}: {target}" if target else name)
            case _:
                pass  # thinking, redacted_thinking: private reasoning, not conversation


def _claude_user(state: _State, message: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    texts: list[str] = []
    for block in _blocks(message.get("content")):
        match block.get("type"):
            case "text":
                texts.append(str(block.get("text", "")))
            case "tool_result":
                name = state.tool_names.get(str(block.get("tool_use_id")), "tool")
                result = _text_of(block.get("content"))
                state.tool(f"{name} → {_outcome(bool(block.get('is_error')), result)}")
            case _:
                pass  # images, documents
    text = "\n".join(texts).strip()
    if not text:
        return
    if record.get("isCompactSummary") or text.startswith(COMPACTION_SUMMARY_PREFIX):
        return  # a summary of messages already taken in before the compaction
    if text.startswith("<task-notification"):
        tags = {m.group(1): m.group(2).strip() for m in _TAG.finditer(text)}
        what = tags.get("summary") or text
        state.tool(f"task notification → {tags.get('status', 'done')}: {what}")
        return
    if text.lower().startswith(_CLAUDE_SKIPPED_PREFIXES):
        return
    state.emit("user", text)


# ---------------------------------------------------------------------- Codex


def _codex_line(state: _State, record: Mapping[str, Any]) -> None:
    kind, payload = record.get("type"), record.get("payload")
    if payload is None and kind in _CODEX_ITEMS:  # the rollout format before envelopes
        kind, payload = "response_item", record
    if not isinstance(payload, Mapping):
        if not (kind is None and "id" in record):  # the old format's first (meta) line
            state.skipped += 1
        return
    match kind:
        case "response_item":
            _codex_item(state, payload)
        case "event_msg":
            if payload.get("type") == "token_count":
                _codex_usage(state, payload.get("info"))
        case "compacted":
            state.compactions += 1
        case "session_meta" | "turn_context":
            pass
        case _:
            state.skipped += 1


_CODEX_ITEMS = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
    }
)


def _codex_usage(state: _State, info: object) -> None:
    if not isinstance(info, Mapping):
        return
    last = info.get("last_token_usage")
    if not isinstance(last, Mapping):
        return
    tokens = int(last.get("total_tokens") or 0) or int(last.get("input_tokens") or 0) + int(
        last.get("output_tokens") or 0
    )
    window = info.get("model_context_window")
    window = window if isinstance(window, int) and window > 0 else CODEX_CONTEXT_WINDOW
    state.usage = Usage(tokens, window, CODEX_COMPACT_PERCENT)


def _codex_text(content: object) -> str:
    return "\n".join(
        str(b.get("text", ""))
        for b in _blocks(content)
        if b.get("type") in ("input_text", "output_text", "text")
    )


def _codex_output(output: object) -> tuple[bool, str]:
    """(failed, text) of a function call's output (a string, JSON in a string, or an object)."""
    if isinstance(output, str):
        decoded = None
        if output.lstrip().startswith("{"):
            try:
                decoded = json.loads(output)
            except ValueError:
                decoded = None
        if not isinstance(decoded, Mapping):
            exit_code = _EXIT_CODE.search(output)
            body = output.split("Output:\n", 1)[1] if "Output:\n" in output else output
            return bool(exit_code and exit_code.group(1) != "0"), body
        output = decoded
    if isinstance(output, Mapping):
        metadata = output.get("metadata")
        code = metadata.get("exit_code") if isinstance(metadata, Mapping) else None
        failed = output.get("success") is False or (isinstance(code, int) and code != 0)
        text = output.get("output", output.get("content", ""))
        return failed, text if isinstance(text, str) else _codex_text(text)
    return False, ""


def _codex_item(state: _State, item: Mapping[str, Any]) -> None:
    match item.get("type"):
        case "message":
            role, text = item.get("role"), _codex_text(item.get("content")).strip()
            if role == "assistant":
                state.emit("assistant", text)
            elif role == "user" and not text.lower().startswith(_CODEX_INJECTED_PREFIXES):
                state.emit("user", text)
        case "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call":
            name = str(item.get("name") or item.get("type"))
            raw = item.get("arguments", item.get("input", item.get("action")))
            args: object = raw
            if isinstance(raw, str) and raw.lstrip().startswith("{"):
                try:
                    args = json.loads(raw)
                except ValueError:
                    args = raw
            if isinstance(args, str) and (patched := _PATCH_FILE.findall(args)):
                target = " ".join(patched)
            else:
                target = _target(args)
            if isinstance(item.get("call_id"), str):
                state.tool_names[item["call_id"]] = name
            state.tool(f"{name}: {target}" if target else name)
        case "function_call_output" | "custom_tool_call_output":
            name = state.tool_names.get(str(item.get("call_id")), "tool")
            failed, text = _codex_output(item.get("output"))
            state.tool(f"{name} → {_outcome(failed, text)}")
        case _:
            pass  # reasoning: private


# ---------------------------------------------------------------------- plain


def _parse_plain(state: _State, data: bytes, final: bool) -> int:
    """JSON ``{role, content}`` lines, or ``role:`` text blocks. Without ``final`` the last
    text message is left unconsumed (more of it may follow)."""
    consumed = 0
    role: str | None = None
    body: list[str] = []
    start_of_open = 0

    def close() -> None:
        if role is not None:
            state.emit(role.lower(), "\n".join(body))  # type: ignore[arg-type]

    for raw, end in _lines(data, final):
        record = _json(raw)
        if record is not None and isinstance(record.get("content"), str):
            close()
            role, body = None, []
            if record.get("role") in ("user", "assistant", "system", "tool"):
                state.emit(record["role"], record["content"])
            else:
                state.skipped += 1
            consumed = end
            continue
        text = raw.decode("utf-8", "replace").rstrip("\r")
        opened = _PLAIN_ROLE.match(text)
        if opened:
            close()
            role, body = opened.group(1), [text[opened.end() :]]
            start_of_open = consumed
            consumed = end
        elif role is not None:
            body.append(text)
            consumed = end
        else:
            if text.strip():
                state.skipped += 1
            consumed = end
    if role is not None:
        if final:
            close()
        else:
            consumed = start_of_open  # the open message may go on: read it again next time
    return consumed


# ---------------------------------------------------------------------- helpers


def transcript_info(fmt: Format, head: bytes) -> TranscriptInfo:
    """The session id and working directory the first lines of a transcript name."""
    for raw, _ in _lines(head, final=False):
        record = _json(raw)
        if record is None:
            continue
        if fmt == "codex" and record.get("type") == "session_meta":
            payload = record.get("payload")
            if isinstance(payload, Mapping):
                sid, cwd = payload.get("id"), payload.get("cwd")
                return TranscriptInfo(
                    sid if isinstance(sid, str) else None, cwd if isinstance(cwd, str) else None
                )
        if fmt == "claude-code" and isinstance(record.get("sessionId"), str):
            cwd = record.get("cwd")
            return TranscriptInfo(record["sessionId"], cwd if isinstance(cwd, str) else None)
    return TranscriptInfo()
