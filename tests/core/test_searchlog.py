"""The search tally behind `search.summary` log lines."""

from __future__ import annotations

from memoryd.core.searchlog import SearchTally


def test_a_summary_is_due_once_per_period_and_counts_what_happened() -> None:
    tally = SearchTally(every=60.0)
    assert tally.add(0.0, 5.0, "hybrid", 3) is None
    assert tally.add(10.0, 7.0, "fts_only", 0) is None
    summary = tally.add(60.0, 9.0, "hybrid", 1)
    assert summary == {
        "searches": 3,
        "secs": 60.0,
        "modes": {"hybrid": 2, "fts_only": 1},
        "empty": 1,
        "took_ms_p50": 7.0,
        "took_ms_max": 9.0,
    }
    assert tally.add(61.0, 1.0, "hybrid", 1) is None  # a new period started at 60 s
    assert tally.flush(70.0) == {
        "searches": 1,
        "secs": 10.0,
        "modes": {"hybrid": 1},
        "empty": 0,
        "took_ms_p50": 1.0,
        "took_ms_max": 1.0,
    }
    assert tally.flush(80.0) is None  # nothing since
