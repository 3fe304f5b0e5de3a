"""Measuring a model's similarity scale on the user's notes (issue #19, `memoryd calibrate`)."""

from __future__ import annotations

import pytest

from memoryd.core.calibration import MIN_SAMPLES, measure, titled_notes


def test_titled_notes_pair_a_heading_with_its_own_text() -> None:
    text = (
        "## Package manager\n\nWe use pnpm for the JavaScript packages; never run npm "
        "install.\n\n## Conversation\n\none two three four five six seven eight nine\n"
        "\n## Short note\n\ntoo short <!-- a comment that is not counted at all, not at all -->"
        "\n## 数据库\n\n连接池 大小 是 二十 生产 环境 不要 改\n"
    )
    assert titled_notes(text) == [
        ("Package manager", "We use pnpm for the JavaScript packages; never run npm install."),
        ("数据库", "连接池 大小 是 二十 生产 环境 不要 改"),
    ]


def test_a_scale_is_suggested_when_titles_score_clearly_above_other_notes() -> None:
    pairs = [0.002 * i for i in range(1, 101)]  # 0.002 … 0.2: the 90th percentile ≈ 0.182
    own = [0.40, 0.35, 0.45, 0.38, 0.42]
    result = measure(pairs, own)
    assert result.unrelated == pytest.approx(0.1818, abs=0.001)
    assert result.unrelated_p90 == result.unrelated
    assert result.strong == pytest.approx(0.40)
    assert result.problem is None
    assert result.config_lines() == ["similarity_unrelated = 0.182", "similarity_strong = 0.400"]


def test_no_scale_when_notes_are_all_alike_or_too_few() -> None:
    alike = measure([0.87] * 10, [0.77] * 10)  # notes that all sound the same
    assert alike.problem is not None and "cannot tell" in alike.problem
    assert alike.config_lines() == []
    few = measure([0.1] * 10, [0.4] * (MIN_SAMPLES - 1))
    assert few.problem is not None and "too few" in few.problem
    assert measure([], []).config_lines() == []
