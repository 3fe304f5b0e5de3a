"""What an open session holds of its transcript gives what the whole transcript gives."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.flushing import (
    ROLES,
    Message,
    first_user_message,
    flush_window,
    session_summary,
    window_start,
)
from memoryd.core.held_transcript import HeldTranscript, message_digest

NOW = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)

messages_st = st.builds(
    Message,
    st.sampled_from(ROLES),
    st.sampled_from(["", "/compact", "hi", "Fix the login bug please", "a" * 120, "x y"]),
)


def multiset_difference(existing: list[Message], candidates: list[Message]) -> list[Message]:
    """The reference rule: candidates not in ``existing``, counted as a multiset."""
    seen: dict[Message, int] = {}
    for m in existing:
        seen[m] = seen.get(m, 0) + 1
    out = []
    for m in candidates:
        if seen.get(m, 0) > 0:
            seen[m] -= 1
        else:
            out.append(m)
    return out


@given(st.lists(st.lists(messages_st, max_size=30), max_size=12), st.lists(messages_st))
def test_held_gives_what_the_whole_transcript_gives(
    batches: list[list[Message]], candidates: list[Message]
) -> None:
    held, whole = HeldTranscript(), []
    for batch in batches:
        held.extend(batch)
        whole.extend(batch)
        # every later flush's window, from what is held
        assert held.count == len(whole)
        assert flush_window(held.window_messages(held.count)) == flush_window(whole)
        assert held.tail == whole[held.base :]
        assert held.base == window_start(whole)  # all that no later window reaches is let go
    assert held.tally.summary(NOW) == session_summary(whole, NOW)
    assert held.tally.first_user == first_user_message(whole)
    new = held.unseen([message_digest(m) for m in candidates])
    kept = [m for m, keep in zip(candidates, new, strict=True) if keep]
    assert kept == multiset_difference(whole, candidates)


def test_unseen_is_a_multiset_difference() -> None:
    a, b, c = Message("user", "a"), Message("assistant", "b"), Message("user", "c")
    held = HeldTranscript()
    held.extend([a, b, a])
    assert held.unseen([message_digest(m) for m in [a, b, a, a, c]]) == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert HeldTranscript().unseen([message_digest(a)] * 2) == [True, True]


def test_a_long_transcript_is_let_go_up_to_its_window() -> None:
    held = HeldTranscript()
    for i in range(100):
        held.extend([Message("user", f"q{i}"), Message("assistant", f"a{i}")])
    assert held.count == 200 and held.base == 180 and held.tail[0] == Message("user", "q90")
    held.extend([Message("tool", f"t{i}") for i in range(30)])  # one long turn: back to q99
    assert held.tail[0] == Message("user", "q99") and len(held.tail) == 32
