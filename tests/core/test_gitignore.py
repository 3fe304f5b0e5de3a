"""The memory root's .gitignore: memoryd's patterns merged into the user's, never dropped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.gitignore import HEADER, PATTERNS, merged


def test_a_new_gitignore_lists_every_derived_pattern_under_a_header() -> None:
    text = merged(None)
    assert text is not None
    assert text.splitlines() == [HEADER, *PATTERNS]


def test_the_users_lines_are_kept_and_only_missing_patterns_added() -> None:
    user = "notes-private.md\n.cache/\n# mine\n"
    text = merged(user)
    assert text is not None
    assert text.startswith(user)
    added = text.removeprefix(user).splitlines()
    assert added == ["", HEADER, *[p for p in PATTERNS if p != ".cache/"]]
    assert merged(text) is None  # nothing more to add: nothing is written again


def test_a_negated_pattern_is_the_users_choice_and_never_added_back() -> None:
    text = merged("!.history/\n")
    assert text is not None
    assert ".history/" not in text.splitlines()


def test_a_file_without_a_final_newline_gets_one_before_the_block() -> None:
    text = merged("secret.md")
    assert text is not None
    assert text.startswith("secret.md\n\n" + HEADER + "\n")


@given(st.text())
def test_merging_keeps_any_text_and_is_idempotent(user: str) -> None:
    text = merged(user)
    if text is None:
        return
    assert text.startswith(user)
    assert merged(text) is None
