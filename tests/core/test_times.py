"""The one RFC 3339 UTC formatter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.times import rfc3339, utc

STAMP = 1_796_145_771.75  # 2026-12-01T17:22:51.75Z


def test_rfc3339_is_utc_to_the_second_with_z() -> None:
    assert rfc3339(STAMP) == "2026-12-01T17:22:51Z"
    assert rfc3339(STAMP, zulu=False) == "2026-12-01T17:22:51+00:00"
    paris = datetime(2026, 12, 1, 18, 22, 51, 999_000, tzinfo=timezone(timedelta(hours=1)))
    assert rfc3339(paris) == "2026-12-01T17:22:51Z"


@given(st.floats(min_value=0, max_value=4_000_000_000))
def test_rfc3339_parses_back_to_the_whole_second(stamp: float) -> None:
    text = rfc3339(stamp)
    assert text.endswith("Z") and len(text) == 20
    back = datetime.fromisoformat(text)
    assert back.tzinfo is not None
    assert back == utc(stamp).replace(microsecond=0)
    assert utc(stamp).tzinfo is UTC
