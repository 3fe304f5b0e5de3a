"""UTC times as memoryd writes them — pure.

Every time memoryd writes (replies, journals, flush marks, dream footers, lessons) is UTC to
the second in RFC 3339: ``2026-12-01T17:02:51Z``. :func:`rfc3339` is the one formatter;
``zulu=False`` spells the offset ``+00:00`` instead, for the one reply that always has
(``memory.search``'s ``chunk_time``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["rfc3339", "utc"]


def utc(when: float | datetime) -> datetime:
    """``when`` (Unix seconds, or a datetime with a zone) as an aware UTC datetime."""
    if isinstance(when, datetime):
        return when.astimezone(UTC)
    return datetime.fromtimestamp(when, UTC)


@overload
def rfc3339(when: float | datetime, *, zulu: bool = True) -> str: ...
@overload
def rfc3339(when: float | datetime | None, *, zulu: bool = True) -> str | None: ...
def rfc3339(when: float | datetime | None, *, zulu: bool = True) -> str | None:
    """``when`` as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, to the second; ``+00:00`` unless ``zulu``);
    None (a time not known) stays None."""
    if when is None:
        return None
    text = utc(when).isoformat(timespec="seconds")
    return text.removesuffix("+00:00") + "Z" if zulu else text
