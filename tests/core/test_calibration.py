"""Measuring a model's similarity scale on the user's notes (issue #19, `memoryd calibrate`)."""

from __future__ import annotations

import pytest

from memoryd.core.calibration import MIN_SAMPLES, measure, note_halves, paragraphs


def test_halves_split_the_indexed_words_and_skip_short_notes() -> None:
    assert note_halves("one two three four five six seven eight") == (
        "one two three four",
        "five six seven eight",
    )
    assert note_halves("## Short note <!-- with a comment that is not counted at all -->") is None


def test_a_scale_is_suggested_when_halves_score_clearly_above_different_notes() -> None:
    result = measure([0.10, 0.12, 0.14, 0.11, 0.13], [0.40, 0.35, 0.45, 0.38, 0.42])
    assert (result.unrelated, result.strong) == (pytest.approx(0.12), pytest.approx(0.40))
    assert result.problem is None
    assert result.config_lines() == ["similarity_unrelated = 0.120", "similarity_strong = 0.400"]


def test_no_scale_when_notes_are_all_alike_or_too_few() -> None:
    alike = measure([0.87] * 10, [0.77] * 10)  # transcripts that all sound the same
    assert alike.problem is not None and "cannot tell" in alike.problem
    assert alike.config_lines() == []
    few = measure([0.1] * (MIN_SAMPLES - 1), [0.4] * 10)
    assert few.problem is not None and "too few" in few.problem


def test_paragraphs_leave_headings_and_short_blocks_out() -> None:
    text = "## Title\n\none two three four five six seven eight\n\nshort one\n\n<!-- c -->"
    assert paragraphs(text) == ["one two three four five six seven eight"]
