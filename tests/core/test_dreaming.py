"""Dream gates, input assembly, prompt, answer checks, loss check and footer (SPEC §8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.dreaming import (
    MEMORY_SEPARATOR,
    SessionLog,
    adds_log_text,
    assemble_input,
    check_answer,
    check_gates,
    check_loss,
    content_tokens,
    dream_prompt,
    effective_mtime,
    footer,
    last_undoable,
    split_sections,
    strip_footer,
    whole_hours,
    with_footer,
)
from memoryd.core.flushing import is_no_reply
from memoryd.core.templates import workspace_template

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def logs_at(*ages_h: float, prefix: str = "2025-03-0") -> dict[str, datetime]:
    """Session log names → mtimes, ``ages_h`` hours before NOW."""
    return {f"{prefix}{i}-topic-abcd{i:04d}.md": NOW - age * HOUR for i, age in enumerate(ages_h)}


FIVE_RECENT = logs_at(1, 2, 3, 4, 5)
FOUR_RECENT = logs_at(1, 2, 3, 4)

# (name, keyword arguments over the defaults, expected to_dict())
GATE_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("disabled", {"enabled": False}, {"outcome": "disabled"}),
    (
        "23h59m is 23 hours: too soon",
        {"last_consolidation": NOW - timedelta(hours=23, minutes=59)},
        {"outcome": "too_soon", "hours": 23, "min_hours": 24},
    ),
    ("exactly 24 hours is enough", {"last_consolidation": NOW - 24 * HOUR}, {"outcome": "open"}),
    (
        "4 of 5 sessions",
        {"session_mtimes": FOUR_RECENT},
        {"outcome": "too_few_sessions", "count": 4, "min": 5},
    ),
    ("5 of 5 sessions", {"session_mtimes": FIVE_RECENT}, {"outcome": "open"}),
    (
        "the ending session is not counted",
        {"ending_session": "abcd0002-rest-of-id"},
        {"outcome": "too_few_sessions", "count": 4, "min": 5},
    ),
    (
        "a missing sessions directory counts 0",
        {"session_mtimes": {}},
        {"outcome": "too_few_sessions", "count": 0, "min": 5},
    ),
    (
        "logs older than the last consolidation do not count",
        {
            "last_consolidation": NOW - 30 * HOUR,
            "session_mtimes": logs_at(1, 2, 3, 4, 40, 50),
        },
        {"outcome": "too_few_sessions", "count": 4, "min": 5},
    ),
    (
        "hidden and non-markdown files do not count",
        {"session_mtimes": {**FOUR_RECENT, ".live.md": NOW, "notes.txt": NOW}},
        {"outcome": "too_few_sessions", "count": 4, "min": 5},
    ),
    ("sub-agent sessions never trigger a dream", {"subagent": True}, {"outcome": "subagent"}),
    (
        "manual skips the time and session gates",
        {"manual": True, "last_consolidation": NOW - HOUR, "session_mtimes": {}},
        {"outcome": "open"},
    ),
    (
        "manual does not skip the config gate",
        {"manual": True, "enabled": False},
        {"outcome": "disabled"},
    ),
    (
        "a sub-agent never dreams, even manually",
        {"manual": True, "subagent": True},
        {"outcome": "subagent"},
    ),
    (
        "time is checked before sessions (cheapest first)",
        {"last_consolidation": NOW - HOUR, "session_mtimes": {}},
        {"outcome": "too_soon", "hours": 1, "min_hours": 24},
    ),
    (
        "a consolidation time in the future (clock skew) is 0 hours",
        {"last_consolidation": NOW + 5 * HOUR},
        {"outcome": "too_soon", "hours": 0, "min_hours": 24},
    ),
]


def gates(**changes: Any) -> Any:
    args: dict[str, Any] = {
        "enabled": True,
        "subagent": False,
        "last_consolidation": None,
        "now": NOW,
        "min_hours": 24,
        "session_mtimes": FIVE_RECENT,
        "ending_session": None,
        "min_sessions": 5,
        "manual": False,
    }
    args.update(changes)
    return check_gates(**args)


@pytest.mark.parametrize(
    ("name", "changes", "expected"), GATE_CASES, ids=[c[0] for c in GATE_CASES]
)
def test_gates(name: str, changes: dict[str, Any], expected: dict[str, Any]) -> None:
    assert gates(**changes).to_dict() == expected


def test_gate_values_show_every_gate_even_when_an_earlier_one_decided() -> None:
    outcome = gates(enabled=False, last_consolidation=NOW - 30 * HOUR)
    assert outcome.values() == {
        "outcome": "disabled",
        "enabled": False,
        "hours_since_last": 30,
        "min_hours": 24,
        "sessions_since_last": 5,
        "min_sessions": 5,
    }
    assert not outcome.open
    assert gates().open


def test_whole_hours_round_down() -> None:
    assert whole_hours(NOW - timedelta(hours=23, minutes=59, seconds=59), NOW) == 23
    assert whole_hours(NOW - 48 * HOUR, NOW) == 48


@given(
    enabled=st.booleans(),
    subagent=st.booleans(),
    manual=st.booleans(),
    last_h=st.none() | st.floats(min_value=-10, max_value=100),
    ages=st.lists(st.floats(min_value=0, max_value=200), max_size=8),
    min_hours=st.integers(0, 48),
    min_sessions=st.integers(0, 8),
)
def test_gate_decisions_are_deterministic_and_consistent(
    enabled: bool,
    subagent: bool,
    manual: bool,
    last_h: float | None,
    ages: list[float],
    min_hours: int,
    min_sessions: int,
) -> None:
    kw: dict[str, Any] = {
        "enabled": enabled,
        "subagent": subagent,
        "manual": manual,
        "last_consolidation": None if last_h is None else NOW - last_h * HOUR,
        "session_mtimes": logs_at(*ages),
        "min_hours": min_hours,
        "min_sessions": min_sessions,
    }
    first, second = gates(**kw), gates(**kw)
    assert first == second
    assert first.count <= len(ages)
    if first.open:
        assert enabled and not subagent
        if not manual:
            assert first.hours is None or first.hours >= min_hours
            assert first.count >= min_sessions
    elif enabled and not subagent:
        assert not manual


# ---------------------------------------------------------------------------- input


def test_input_is_memory_then_logs_in_the_given_order_under_separators() -> None:
    logs = [
        SessionLog("2025-01-01-a-1.md", "## A\nold"),
        SessionLog("2025-01-02-b-2.md", "## B\nnew"),
    ]
    got = assemble_input("# Memory\n\n## Kept\nfact\n", logs, 10_000)
    assert got.memory_included
    assert got.consumed == ("2025-01-01-a-1.md", "2025-01-02-b-2.md")
    assert got.waiting == ()
    assert got.text.index(MEMORY_SEPARATOR) < got.text.index("## Kept")
    assert got.text.index("## Kept") < got.text.index("--- Session: 2025-01-01-a-1.md ---")
    assert got.text.index("--- Session: 2025-01-01-a-1.md ---\n## A\nold") < got.text.index(
        "--- Session: 2025-01-02-b-2.md ---\n## B\nnew"
    )


def test_a_scaffold_memory_is_skipped_and_footers_are_dropped() -> None:
    logs = [SessionLog("x.md", "## X\nbody")]
    scaffold = assemble_input(workspace_template("demo"), logs, 10_000)
    assert not scaffold.memory_included
    assert MEMORY_SEPARATOR not in scaffold.text
    real = assemble_input(
        "## Y\nfact\n\n<!-- dream 2025-01-01T00:00:00Z consumed: a.md -->\n", logs, 10_000
    )
    assert real.memory_included
    assert "<!-- dream" not in real.text


def test_logs_that_do_not_fit_wait_and_order_is_kept() -> None:
    logs = [SessionLog(f"{i}.md", f"## S{i}\n" + "x" * 300) for i in range(4)]
    got = assemble_input(None, logs, 700)
    assert got.consumed == ("0.md", "1.md")
    assert got.waiting == ("2.md", "3.md")
    assert len(got.text) <= 700
    assert "S2" not in got.text
    # a small later log is not taken past a bigger one that did not fit
    mixed = [logs[0], SessionLog("big.md", "y" * 5000), SessionLog("small.md", "## tiny")]
    got = assemble_input(None, mixed, 1000)
    assert got.consumed == ("0.md",)
    assert got.waiting == ("big.md", "small.md")


def test_the_oldest_log_is_always_taken_cut_to_the_cap_so_one_big_log_cannot_block_dreams() -> None:
    lines = "\n".join(f"line {i} " + "b" * 40 for i in range(200))
    got = assemble_input("## M\n" + "m" * 300, [SessionLog("big.md", lines)], 1000)
    assert got.consumed == ("big.md",)
    assert got.truncated == ("big.md",)
    assert len(got.text) <= 1000
    assert "line 0 " in got.text and "line 199" not in got.text
    assert not got.memory_too_large


def test_a_memory_file_larger_than_the_cap_is_never_sent() -> None:
    got = assemble_input("## M\n" + "m" * 2000, [SessionLog("big.md", "b" * 50)], 1000)
    assert got.memory_too_large and got.empty
    assert got.text == ""
    assert got.waiting == ("big.md",)
    assert got.memory_chars > 1000


def test_blank_logs_are_consumed_and_nothing_readable_is_empty() -> None:
    got = assemble_input("## M\nfact", [SessionLog("blank.md", "  \n")], 1000)
    assert got.empty
    assert got.text == ""
    got = assemble_input(None, [SessionLog("blank.md", "\n"), SessionLog("real.md", "## R")], 1000)
    assert got.consumed == ("blank.md", "real.md")
    assert "blank.md" not in got.text


@given(
    sizes=st.lists(st.integers(0, 400), max_size=10),
    memory=st.none() | st.text(max_size=300),
    limit=st.integers(1, 3000),
)
def test_input_takes_a_prefix_of_the_logs_within_the_budget(
    sizes: list[int], memory: str | None, limit: int
) -> None:
    logs = [SessionLog(f"{i:02d}.md", f"## L{i}\n" + "z" * n) for i, n in enumerate(sizes)]
    got = assemble_input(memory, logs, limit)
    names = [log.name for log in logs]
    if got.empty:
        assert got.consumed == ()
        return
    assert list(got.consumed) + list(got.waiting) == names
    assert len(got.consumed) == 1 or len(got.text) <= limit
    for log in logs[: len(got.consumed)]:
        if log.name in got.truncated:  # only the oldest log, alone over the budget
            assert log.name == got.consumed[0]
            assert f"--- Session: {log.name} ---\n" in got.text
        else:
            assert f"--- Session: {log.name} ---\n{log.text.strip()}" in got.text


# ---------------------------------------------------------------------------- prompt


def test_the_prompt_asks_for_what_the_spec_says() -> None:
    prompt = dream_prompt(NOW)
    for needle in (
        "2025-03-10",
        "merged, not dropped",
        "newest truth",
        "absolute dates",
        "next steps",
        "problem -> solution",
        '"## "',
        "NO_REPLY",
        "--- Session: <name> ---",
    ):
        assert needle in prompt


# ---------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ("", "empty"),
        ("   \n\t", "empty"),
        ("NO_REPLY", "no_reply"),
        ("no reply", "no_reply"),
        ("No-Reply", "no_reply"),
        ("  noreply \n", "no_reply"),
        ("```\nNO_REPLY\n```", "no_reply"),
        ("Just some prose without a heading.", "no_heading"),
        ("### Too deep\nbody", "no_heading"),
        ("#NoSpace\nbody", "no_heading"),
        ("Prose.\n```\n## inside a code fence\n```", "no_heading"),
        ("## Topic\nbody", "ok"),
        ("# Title\n\n## Topic\nbody", "ok"),
    ],
)
def test_answer_checks(answer: str, outcome: str) -> None:
    assert check_answer(answer).outcome == outcome


def test_an_ok_answer_is_unfenced_and_loses_echoed_footers() -> None:
    got = check_answer(
        "```markdown\n# Memory\n\n## A\nfact\n"
        "<!-- dream 2025-01-01T00:00:00Z consumed: x.md -->\n```"
    )
    assert got.ok
    assert got.text == "# Memory\n\n## A\nfact"
    assert is_no_reply("NO REPLY.") and not is_no_reply("no reply needed")


# ---------------------------------------------------------------------------- loss


OLD = """# Memory: demo

## Build system
We build with hatch and publish wheels to the internal index; CI runs on every push.

## Database choice
SQLite with WAL mode was chosen over Postgres because the daemon is single user.

## Logging
structlog renders JSON when stdout is not a terminal, console output otherwise.

## Deployment
The service runs under systemd as a user unit with Restart=on-failure.
"""


def test_the_same_document_loses_nothing() -> None:
    report = check_loss(OLD, OLD, 0.5)
    assert report.total == 4
    assert report.lost == ()
    assert not report.refused


def test_renamed_and_merged_sections_have_counterparts() -> None:
    new = """# Memory: demo

## Tooling
We build with hatch and publish wheels to the internal index; CI runs on every push.
structlog renders JSON when stdout is not a terminal, console output otherwise.

## Storage
SQLite (WAL mode) over Postgres: the daemon is single user.

## deployment!
Runs under systemd.
"""
    assert check_loss(OLD, new, 0.5).lost == ()


def test_an_answer_dropping_most_sections_is_refused() -> None:
    new = "# Memory: demo\n\n## Deployment\nsystemd user unit with Restart=on-failure.\n"
    report = check_loss(OLD, new, 0.5)
    assert report.lost == ("Build system", "Database choice", "Logging")
    assert report.refused
    assert report.to_dict()["lost_fraction"] == 0.75


def test_losing_exactly_the_allowed_fraction_is_not_refused() -> None:
    new = "## Logging\nJSON off a terminal.\n\n## Deployment\nsystemd user unit.\n"
    report = check_loss(OLD, new, 0.5)
    assert len(report.lost) == 2
    assert not report.refused


def test_cjk_sections_are_compared_by_bigrams() -> None:
    old = "## 数据库\n我们选择了 SQLite 作为索引数据库，因为它是单用户的守护进程。\n"
    kept = "## 存储\n我们选择了 SQLite 作为索引数据库，因为它是单用户的守护进程。\n"
    lost = "## 天气\n今天下雨了，明天可能晴天。\n"
    assert check_loss(old, kept, 0.5).lost == ()
    assert check_loss(old, lost, 0.5).lost == ("数据库",)


def test_only_level_two_sections_outside_code_fences_count() -> None:
    old = "# Title\n\nintro\n\n```\n## not a heading\n```\n\n### Deep\ntext\n"
    assert [s.heading for s in split_sections(old)] == ["Title", "Deep"]
    assert check_loss(old, "## Anything\nelse", 0.5).total == 0
    assert check_loss(None, "## A", 0.5).total == 0


def test_content_tokens_skip_short_and_stop_words() -> None:
    assert content_tokens("The DB is on a NAS, and it's fast") == frozenset({"nas", "fast"})


# ---------------------------------------------------------------------------- footer and journal


def test_footer_names_consumed_logs_and_utc_time_and_never_accumulates() -> None:
    text = with_footer("# M\n\n## A\nfact", ["a.md", "b.md"], NOW)
    assert text == "# M\n\n## A\nfact\n\n<!-- dream 2025-03-10T12:00:00Z consumed: a.md, b.md -->\n"
    again = with_footer(text, ["c.md"], NOW + HOUR)
    assert again.count("<!-- dream") == 1
    assert "c.md" in again and "a.md" not in again
    assert strip_footer(again) == "# M\n\n## A\nfact\n\n"
    assert "-->" not in footer(["2025-01-01-x---y.md"], NOW)[:-3]


def test_last_undoable_skips_undone_dreams() -> None:
    entries = [
        {"id": "1", "outcome": "written"},
        {"id": "2", "outcome": "refused"},
        {"id": "3", "outcome": "written"},
        {"id": "4", "outcome": "undone", "undoes": "3"},
    ]
    assert last_undoable(entries) == {"id": "1", "outcome": "written"}
    assert last_undoable([*entries, {"id": "5", "outcome": "undone", "undoes": "1"}]) is None
    assert last_undoable([]) is None


# ---------------------------------------------------------------------------- issue 16


def test_headings_kept_with_emptied_bodies_are_lost() -> None:
    emptied = "\n\n".join(f"## {h}" for h in ("Build system", "Database choice", "Logging"))
    report = check_loss(OLD, emptied + "\n\n## Deployment\n", 0.5)
    assert set(report.lost) == {"Build system", "Database choice", "Logging", "Deployment"}
    assert report.refused


def test_an_answer_must_take_something_new_from_the_logs() -> None:
    log = "## Watcher\ninotify limits were exhausted; raising max_user_watches fixed it.\n"
    assert not adds_log_text(OLD, [log], OLD)  # the old memory sent back unchanged
    assert adds_log_text(OLD, [log], OLD + "\n## Watcher\nraise inotify limits\n")
    assert adds_log_text(OLD, ["## Logging\nstructlog renders JSON\n"], OLD)  # nothing new


def test_a_future_mtime_counts_as_when_it_was_set() -> None:
    assert effective_mtime(100.0, 500.0, 1000.0) == 100.0
    assert effective_mtime(5000.0, 900.0, 1000.0) == 900.0
    assert effective_mtime(5000.0, 2000.0, 1000.0) == 1000.0


def test_control_characters_are_stripped_from_answers() -> None:
    assert check_answer("## A\nx\x00y\x1b[0m\tz\r\n\x7f\x85").text == "## A\nxy[0m\tz"


def test_a_log_read_only_in_part_never_counts_as_fitting_or_blank() -> None:
    short = SessionLog("2025-01-01-a-00000000.md", "## A\nshort\n", cut=True)
    first = assemble_input(None, [short], 1000)
    assert first.consumed == first.truncated == (short.name,)  # taken (progress), cut
    blank_head = SessionLog("2025-01-02-b-00000000.md", "   \n", cut=True)
    taken = SessionLog("2025-01-01-x-00000000.md", "## X\nx\n")
    later = assemble_input(None, [taken, blank_head], 1000)
    assert later.waiting == (blank_head.name,)  # its text may start after the part read
