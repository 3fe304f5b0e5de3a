"""Flush window, prompt, answer checks, the pre_compaction trigger and the summary (SPEC §7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.chunking import flush_marks
from memoryd.core.flushing import (
    FLUSH_DELTA_RULE,
    PROMPT_MESSAGE_CHARS,
    ROLES,
    Message,
    check_flush_answer,
    first_flush_of_compaction,
    first_user_message,
    flush_prompt,
    flush_section,
    flush_window,
    has_heading,
    is_no_reply,
    is_real_user_message,
    new_sections,
    parse_messages,
    pre_compaction_due,
    session_summary,
)
from memoryd.errors import InvalidParams

NOW = datetime(2025, 3, 4, 23, 30, 5, tzinfo=UTC)


def msgs(*spec: str) -> list[Message]:
    """``"u:hello"`` → Message("user", "hello"); prefixes u, a, s, t."""
    roles = {"u": "user", "a": "assistant", "s": "system", "t": "tool"}
    out = []
    for item in spec:
        prefix, _, text = item.partition(":")
        out.append(Message(roles[prefix], text))  # type: ignore[arg-type]
    return out


# ---------------------------------------------------------------------- parse_messages


def test_parse_messages_accepts_the_four_roles() -> None:
    raw = [{"role": r, "content": f"c-{r}"} for r in ROLES]
    assert parse_messages(raw) == [Message(r, f"c-{r}") for r in ROLES]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("hello", "must be a list"),
        ([1], "messages[0] must be an object"),
        ([{"role": "bot", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content must be a string"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": "x", "name": "y"}], "unknown field 'name'"),
    ],
)
def test_parse_messages_names_what_is_wrong(raw: object, fragment: str) -> None:
    with pytest.raises(InvalidParams, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_messages(raw)


# ---------------------------------------------------------------------- window


def test_window_drops_system_messages() -> None:
    window = flush_window(msgs("s:rules", "u:q", "s:reminder", "a:answer"))
    assert window == msgs("u:q", "a:answer")


def test_window_keeps_the_last_20_when_they_start_at_a_user_message() -> None:
    transcript = [Message("user" if i % 2 == 0 else "assistant", str(i)) for i in range(40)]
    window = flush_window(transcript)
    assert [m.content for m in window] == [str(i) for i in range(20, 40)]


def test_window_extends_back_to_a_user_message() -> None:
    # 1 user message, then 30 assistant/tool messages: the last 20 start mid-turn
    transcript = msgs("a:earlier", "u:the question") + [
        Message("tool" if i % 2 else "assistant", f"step {i}") for i in range(30)
    ]
    window = flush_window(transcript)
    assert window[0] == Message("user", "the question")
    assert len(window) == 31


def test_window_extends_back_past_dropped_system_messages() -> None:
    transcript = msgs("u:ask", "s:sys") + [Message("assistant", str(i)) for i in range(20)]
    window = flush_window(transcript)
    assert window[0] == Message("user", "ask")
    assert len(window) == 21


def test_window_without_any_user_message_is_the_whole_transcript() -> None:
    transcript = [Message("assistant", str(i)) for i in range(25)]
    assert flush_window(transcript) == transcript


@given(
    st.lists(
        st.builds(Message, st.sampled_from(ROLES), st.text(max_size=5)),
        max_size=60,
    )
)
def test_window_properties(transcript: list[Message]) -> None:
    window = flush_window(transcript)
    kept = [m for m in transcript if m.role != "system"]
    assert all(m.role != "system" for m in window)
    assert window == kept[len(kept) - len(window) :]  # a suffix of the transcript
    assert len(window) >= min(20, len(kept))
    if len(window) > 20:
        extension = window[: len(window) - 19]  # what was added before the last 20
        assert all(m.role != "user" for m in extension[1:])
        if window[0].role != "user":  # no user message at all before the last 20
            assert window == kept
    elif len(window) < len(kept):
        assert window[0].role == "user"


# ---------------------------------------------------------------------- prompt


def test_prompt_asks_for_what_the_spec_lists() -> None:
    system, user = flush_prompt(msgs("u:why does the build fail", "a:missing dep"), None)
    for phrase in ("decisions", "rationale", "debugging", "problem", "##", "NO_REPLY"):
        assert phrase in system
    assert "preferences" in system and "next steps" in system
    assert "why does the build fail" in user and "missing dep" in user
    assert FLUSH_DELTA_RULE not in system
    assert "Already saved" not in user


def test_delta_prompt_contains_the_previous_flush_and_asks_only_for_new() -> None:
    previous = "## Build\n\nUse `make -j4`; the Makefile pins gcc 13."
    system, user = flush_prompt(msgs("u:next", "a:ok"), previous)
    assert previous in user
    assert "only what is new" in system
    assert user.index(previous) < user.index("next")


def test_prompt_cuts_huge_messages() -> None:
    _, user = flush_prompt([Message("tool", "x" * (PROMPT_MESSAGE_CHARS + 500))], None)
    assert "x" * PROMPT_MESSAGE_CHARS in user
    assert "x" * (PROMPT_MESSAGE_CHARS + 1) not in user
    assert "500 more characters cut" in user


# ---------------------------------------------------------------------- answer check


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n"])
def test_empty_answer_stores_nothing(text: str) -> None:
    assert check_flush_answer(text, 8000).outcome == "nothing"


@pytest.mark.parametrize(
    "text",
    [
        "NO_REPLY",
        "no_reply",
        "no reply",
        "No Reply",
        "No-Reply",
        "NO-REPLY",
        "noreply",
        "NoReply",
        "  NO_REPLY  \n",
        "\n\nNO_REPLY.\n",
        "NO_REPLY!",
        "`NO_REPLY`",
        "**NO_REPLY**",
        '"no reply"',
        "NO_REPLY\n\nNothing in this session is worth keeping.",
    ],
)
def test_every_spelling_of_no_reply_stores_nothing(text: str) -> None:
    verdict = check_flush_answer(text, 8000)
    assert verdict.outcome == "nothing"
    assert verdict.text == ""


@pytest.mark.parametrize("text", ["No reply needed", "reply no", "## NO_REPLY means skip"])
def test_text_that_only_mentions_no_reply_is_not_no_reply(text: str) -> None:
    assert not is_no_reply(text)


@pytest.mark.parametrize(
    "text",
    [
        "The build uses make.",
        "C# rocks\nand F# too",
        "#hashtag not a heading",
        "### Level three only",
        " text with # inside",
        "```bash\n# a shell comment\n```",
        "#\n##\n",
    ],
)
def test_answers_without_a_heading_line_are_rejected(text: str) -> None:
    verdict = check_flush_answer(text, 8000)
    assert verdict.outcome == "rejected"
    assert verdict.text == ""


@pytest.mark.parametrize(
    "text",
    ["# Title\nbody", "## Build\n\nmake", "intro\n## Later heading\ntext", "C# rocks\n## Tips"],
)
def test_answers_with_a_heading_line_are_stored(text: str) -> None:
    verdict = check_flush_answer(text, 8000)
    assert verdict.outcome == "store"
    assert verdict.text == text.strip()
    assert not verdict.truncated


def test_a_markdown_fenced_answer_is_unwrapped() -> None:
    verdict = check_flush_answer("```markdown\n## Build\n\nmake\n```", 8000)
    assert verdict.outcome == "store"
    assert verdict.text == "## Build\n\nmake"


def test_an_answer_cannot_forge_a_flush_mark() -> None:
    text = "## Build\n<!-- flush 1999-01-01T00:00:00Z trigger=manual -->\nmake"
    verdict = check_flush_answer(text, 8000)
    assert verdict.text == "## Build\nmake"


@pytest.mark.parametrize("space", ["\u00a0", "\u2003", "\u3000"])
def test_an_answer_cannot_forge_a_flush_mark_behind_unicode_spaces(space: str) -> None:
    # The log parser (flush_marks) takes any white space around a mark; so must the guard.
    mark = f"{space}<!-- flush 1999-01-01T00:00:00Z trigger=manual -->{space}"
    assert flush_marks(f"## Build\n{mark}\nmake") != []  # the parser would date chunks by it
    verdict = check_flush_answer(f"## Build\n{mark}\nmake", 8000)
    assert verdict.text == "## Build\nmake"
    assert flush_marks(verdict.text) == []


def test_long_answers_are_cut_at_a_line_boundary() -> None:
    lines = ["## Notes"] + [f"- item {i:03d} " + "x" * 40 for i in range(300)]
    text = "\n".join(lines)
    verdict = check_flush_answer(text, 1000)
    assert verdict.outcome == "store"
    assert verdict.truncated
    assert len(verdict.text) <= 1000
    assert verdict.text.split("\n") == lines[: len(verdict.text.split("\n"))]
    # the next line would not have fitted
    assert len(verdict.text) + 1 + len(lines[len(verdict.text.split("\n"))]) > 1000


def test_a_cut_never_leaves_a_code_fence_open() -> None:
    text = (
        "## Script\n\nRun this:\n```bash\n" + "\n".join(f"echo {i}" for i in range(200)) + "\n```"
    )
    verdict = check_flush_answer(text, 300)
    assert verdict.text == "## Script\n\nRun this:"


def test_a_heading_only_past_the_cut_is_rejected() -> None:
    text = "intro line " * 20 + "\n## Heading\nbody"
    assert check_flush_answer(text, 100).outcome == "rejected"


@given(st.text(), st.integers(min_value=1, max_value=500))
def test_stored_text_fits_and_has_a_heading(text: str, max_chars: int) -> None:
    verdict = check_flush_answer(text, max_chars)
    if verdict.outcome == "store":
        assert 0 < len(verdict.text) <= max_chars
        assert has_heading(verdict.text)
        assert verdict.text == verdict.text.strip()
        assert not flush_marks(verdict.text)
    else:
        assert verdict.text == ""


@given(st.lists(st.text(alphabet="ab #`\n", max_size=30), max_size=20))
def test_cut_text_is_a_prefix_of_whole_lines(lines: list[str]) -> None:
    text = "## H\n" + "\n".join(lines)
    verdict = check_flush_answer(text, 40)
    if verdict.outcome == "store" and verdict.truncated:
        body = text.strip()
        assert body.startswith(verdict.text)
        rest = body[len(verdict.text) :]
        assert rest == "" or rest.lstrip(" \t").startswith("\n")


# ---------------------------------------------------------------------- pre_compaction


@pytest.mark.parametrize(
    ("tokens", "window", "percent", "soft", "due"),
    [
        (81_000, 100_000, 85, 4000, True),
        (80_999, 100_000, 85, 4000, False),
        (85_000, 100_000, 85, 0, True),
        (84_999, 100_000, 85, 0, False),
        # 10 001 · 85 % − 4 000 = 4 500.85: 4 501 is the first due count
        (4_501, 10_001, 85, 4000, True),
        (4_500, 10_001, 85, 4000, False),
        # 10 001 · 90 % = 9 000.9 exactly (floats would give 9000.900000000001)
        (9_001, 10_001, 90, 0, True),
        (9_000, 10_001, 90, 0, False),
        (99_999, 100_000, 100, 0, False),
        (100_000, 100_000, 100, 0, True),
        (72_500, 100_000, 72.5, 0, True),
        (72_499, 100_000, 72.5, 0, False),
        # a soft margin larger than the threshold: always due
        (0, 4_000, 50, 4000, True),
    ],
)
def test_pre_compaction_threshold(
    tokens: int, window: int, percent: float, soft: int, due: bool
) -> None:
    assert pre_compaction_due(tokens, window, percent, soft) is due


@pytest.mark.parametrize(
    ("tokens", "window", "percent"),
    [(-1, 100, 50), (1, 0, 50), (1, 100, 0), (1, 100, 101), (1, 100, -5)],
)
def test_pre_compaction_refuses_nonsense(tokens: int, window: int, percent: int) -> None:
    with pytest.raises(InvalidParams):
        pre_compaction_due(tokens, window, percent, 4000)


@given(
    st.integers(min_value=1, max_value=10**7),
    st.integers(min_value=1, max_value=100),
    st.integers(min_value=0, max_value=10**5),
)
def test_pre_compaction_boundary_is_exact(window: int, percent: int, soft: int) -> None:
    # the first due token count is ceil(window·percent/100 − soft), in integers
    first_due = max(0, -((soft * 100 - window * percent) // 100))
    assert pre_compaction_due(first_due, window, percent, soft)
    if first_due > 0:
        assert not pre_compaction_due(first_due - 1, window, percent, soft)


@pytest.mark.parametrize(
    ("last", "current", "allowed"),
    [(None, 0, True), (None, 3, True), (0, 0, False), (0, 1, True), (2, 2, False), (2, 0, True)],
)
def test_once_per_compaction_count(last: int | None, current: int, allowed: bool) -> None:
    assert first_flush_of_compaction(last, current) is allowed


# ---------------------------------------------------------------------- session log text


def test_flush_section_has_the_mark_the_chunker_reads() -> None:
    section = flush_section("## Build\n\nmake\n\n", NOW, "pre_compaction")
    assert section.startswith("<!-- flush 2025-03-04T23:30:05Z trigger=pre_compaction -->\n")
    assert section.endswith("make\n")
    assert flush_marks(section) == [(1, NOW)]


def test_flush_section_time_is_utc() -> None:
    local = NOW.astimezone(timezone(timedelta(hours=9)))  # already 5 March there
    assert "2025-03-04T23:30:05Z" in flush_section("## X", local, "idle")


def test_flush_section_refuses_unknown_triggers() -> None:
    with pytest.raises(ValueError, match="trigger"):
        flush_section("## X", NOW, "cron")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "real"),
    [
        (Message("user", "How do I run the tests?"), True),
        (Message("user", "/usr/bin/python is broken"), True),
        (Message("user", "  "), False),
        (Message("user", "/compact"), False),
        (Message("user", "/review the last commit"), False),
        (Message("user", "<tool_result>ok</tool_result>"), False),
        (Message("user", "<system-reminder>x</system-reminder>"), False),
        (Message("user", "<command-name>/clear</command-name>"), False),
        (Message("user", "[Request interrupted by user]"), False),
        (Message("assistant", "How do I run the tests?"), False),
        (Message("tool", "output"), False),
    ],
)
def test_real_user_messages(message: Message, real: bool) -> None:
    assert is_real_user_message(message) is real


def test_first_user_message_skips_unreal_ones() -> None:
    transcript = msgs("s:sys", "u:/clear", "a:hi", "u:  Fix the login bug  ", "u:later")
    assert first_user_message(transcript) == "Fix the login bug"
    assert first_user_message(msgs("a:only", "u:/compact")) is None


def test_summary_lists_counts_date_and_first_five_topics() -> None:
    transcript = msgs("s:system prompt", "u:/clear")
    for i in range(7):
        transcript += msgs(f"u:topic number {i} about the parser", f"a:answer {i}", "t:output")
    summary = session_summary(transcript, NOW)
    assert summary is not None
    assert summary.startswith("## Session Summary\n")
    assert "2025-03-04 (UTC)" in summary
    assert f"Messages: {len(transcript)}" in summary
    assert "user 8" in summary and "assistant 7" in summary and "tool 7" in summary
    assert "system 1" in summary
    assert "User messages: 7" in summary
    topics = summary.split("## Topics Discussed\n", 1)[1].strip().split("\n")
    assert topics == [f"- topic number {i} about the parser" for i in range(5)]


def test_summary_topics_are_one_line_and_cut_to_100_chars() -> None:
    long = "word " * 60
    transcript = msgs(f"u:{long}", "u:multi\nline\n\nmessage here", "u:third message text")
    summary = session_summary(transcript, NOW)
    assert summary is not None
    topics = summary.split("## Topics Discussed\n", 1)[1].strip().split("\n")
    assert len(topics[0]) - 2 <= 100 and topics[0].endswith("…")
    assert topics[1] == "- multi line message here"


@pytest.mark.parametrize(
    ("users", "written"),
    [
        (["a" * 20, "b" * 20, "c" * 10], True),  # 3 messages, exactly 50 bytes
        (["a" * 20, "b" * 20, "c" * 9], False),  # 49 bytes
        (["a" * 40, "b" * 40], False),  # only 2 messages
        (["é" * 9, "é" * 8, "é" * 8], True),  # 25 chars but 50 UTF-8 bytes
        (["a" * 20, "b" * 20, "/compact now please xxxxxxxxx", "  "], False),
    ],
)
def test_summary_thresholds(users: list[str], written: bool) -> None:
    transcript = [Message("user", u) for u in users] + msgs("a:" + "z" * 200)
    assert (session_summary(transcript, NOW) is not None) is written


def test_new_sections_drops_what_the_log_already_holds() -> None:
    log = "<!-- flush 2025-01-01T00:00:00Z trigger=manual -->\n## Build\n\nUse `make -j4`.\n"
    again = "## build\n\nuse  `MAKE -j4`.\n"
    assert new_sections(again, [log]) == ""
    assert new_sections(again + "\n## Tests\n\nRun pytest.", [log]) == "## Tests\n\nRun pytest."
    assert new_sections(again, []) == again.strip()
