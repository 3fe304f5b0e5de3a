"""Transcript parsers (pure): the fixtures in the agents' real formats, chunked reads,
leniency."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.flushing import Message
from memoryd.core.transcripts import (
    Format,
    one_line,
    parse,
    transcript_info,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CLAUDE = (FIXTURES / "claude-code-session.jsonl").read_bytes()
CODEX = (FIXTURES / "codex-rollout.jsonl").read_bytes()


def _roles(messages: tuple[Message, ...]) -> str:
    return "".join(m.role[0] for m in messages)


def test_claude_code_fixture() -> None:
    parsed = parse("claude-code", CLAUDE)
    assert parsed.consumed == len(CLAUDE)
    assert parsed.skipped == 0
    texts = [m.content for m in parsed.messages]
    # user / assistant text, one tool line per call and per result, meta lines skipped
    assert _roles(parsed.messages) == "uattttauttauttta"
    assert texts[0].startswith("The checkout page returns HTTP 500")
    assert texts[2] == "Read: /home/dev/shop/app/checkout.py"
    assert texts[5].startswith("Bash → error: FAILED tests/test_checkout.py")
    assert "stale CSRF token" in texts[6]
    assert texts[-2] == 'task notification → completed: Agent "Audit logout" completed'
    joined = "\n".join(texts)
    assert "PRIVATE-REASONING" not in joined  # thinking blocks are private
    assert "This session is being continued" not in joined  # the compaction summary
    assert "Caveat" not in joined and "Bye!" not in joined  # meta and command output
    assert parsed.compactions == 1
    assert parsed.usage is not None and parsed.usage.tokens == 6 + 1200 + 150000 + 300


def test_claude_reply_split_over_lines_is_one_message() -> None:
    lines = [
        b'{"type":"assistant","message":{"id":"m1","role":"assistant","content":'
        b'[{"type":"thinking","thinking":"secret"}]}}',
        b'{"type":"assistant","message":{"id":"m1","role":"assistant","content":'
        b'[{"type":"text","text":"first part"}]}}',
        b'{"type":"assistant","message":{"id":"m1","role":"assistant","content":'
        b'[{"type":"text","text":"second part"}]}}',
    ]
    parsed = parse("claude-code", b"\n".join(lines) + b"\n")
    assert parsed.messages == (Message("assistant", "first part\n\nsecond part"),)


def test_codex_fixture() -> None:
    parsed = parse("codex", CODEX)
    assert parsed.consumed == len(CODEX) and parsed.skipped == 0
    texts = [m.content for m in parsed.messages]
    assert _roles(parsed.messages) == "uttttauttttautta"
    assert texts[0] == "The /orders endpoint is slow. Why?"  # injected context skipped
    assert texts[4].startswith("shell_command → ok: Seq Scan on orders")
    assert texts[7] == "apply_patch: migrations/0042_orders_user_id.sql"
    assert texts[10] == "shell_command → error: ERROR: relation exists"
    joined = "\n".join(texts)
    assert "PRIVATE-REASONING" not in joined and "AGENTS.md" not in joined
    assert texts.count("The /orders endpoint is slow. Why?") == 1  # event_msg copies skipped
    assert parsed.compactions == 1
    assert parsed.usage is not None
    assert (parsed.usage.tokens, parsed.usage.context_window) == (20200, 258400)


def _merged(messages: tuple[Message, ...]) -> list[Message]:
    """Adjacent assistant texts joined, tool names of results dropped (a result read in a
    later chunk than its call does not know the call's name)."""
    out: list[Message] = []
    for m in messages:
        if m.role == "tool" and " → " in m.content:
            m = Message("tool", "tool → " + m.content.split(" → ", 1)[1])
        if out and m.role == "assistant" and out[-1].role == "assistant":
            out[-1] = Message("assistant", f"{out[-1].content}\n\n{m.content}")
        else:
            out.append(m)
    return out


def test_reading_in_two_chunks_anywhere_gives_the_same_messages() -> None:
    for fmt, data in (("claude-code", CLAUDE), ("codex", CODEX)):
        whole = _merged(parse(fmt, data).messages)
        for cut in range(0, len(data), 97):
            first = parse(fmt, data[:cut])
            assert data[: first.consumed].endswith(b"\n") or first.consumed == 0
            second = parse(fmt, data[first.consumed :])
            assert first.consumed + second.consumed == len(data)
            assert _merged(first.messages + second.messages) == whole, (fmt, cut)


def test_a_torn_last_line_is_left_for_the_next_read_unless_final() -> None:
    data = CODEX + b'{"type":"response_item","payload":{"type":"message","role":"user"'
    assert parse("codex", data).consumed == len(CODEX)
    final = parse("codex", data, final=True)
    assert final.consumed == len(data) and final.skipped == 1


def test_unknown_and_malformed_lines_are_skipped() -> None:
    data = b'{"type":"brand-new-kind"}\nnot json\n[1,2]\n{"type":"user","message":5}\n'
    data += b'{"type":"user","message":{"role":"user","content":"still here"}}\n'
    parsed = parse("claude-code", data)
    assert parsed.messages == (Message("user", "still here"),)
    assert parsed.skipped == 4


@given(st.binary(max_size=400), st.sampled_from(["claude-code", "codex", "plain"]))
def test_any_bytes_parse_without_error(data: bytes, fmt: Format) -> None:
    parsed = parse(fmt, data)
    assert 0 <= parsed.consumed <= len(data)


def test_plain_text_and_json_lines() -> None:
    data = b"user: how do I\nrun the tests?\nassistant: make test\n"
    data += b'{"role": "user", "content": "thanks"}\n'
    assert parse("plain", data, final=True).messages == (
        Message("user", "how do I\nrun the tests?"),
        Message("assistant", "make test"),
        Message("user", "thanks"),
    )
    partial = parse("plain", b"user: one\nassistant: two\nmore\n")
    assert partial.messages == (Message("user", "one"),)
    assert partial.consumed == len(b"user: one\n")


def test_tool_lines_are_cut_to_max_tool_chars() -> None:
    line = (
        b'{"type":"assistant","message":{"id":"m","role":"assistant","content":'
        b'[{"type":"tool_use","id":"t","name":"Bash","input":{"command":"'
        + b"x" * 500
        + b'"}}]}}\n'
    )
    (message,) = parse("claude-code", line, max_tool_chars=50).messages
    assert message.role == "tool" and len(message.content) == 50
    assert one_line("a\n  b\tc", 10) == "a b c"


def test_transcript_info() -> None:
    claude = transcript_info("claude-code", CLAUDE[:4000])
    assert claude.session_id == "7f3c1a52-9d4e-4b1a-8c2f-3e5d6a7b8c90"
    assert claude.cwd == "/home/dev/shop"
    codex = transcript_info("codex", CODEX[:2000])
    assert (codex.session_id, codex.cwd) == (
        "019ad2f1-7c3e-7b20-9a41-5e6f7a8b9c0d",
        "/home/dev/api",
    )
