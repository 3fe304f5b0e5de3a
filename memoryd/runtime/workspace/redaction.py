"""Secrets redacted on the way in (SPEC §18), with a log event naming what, by kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from memoryd.core.flushing import Message
from memoryd.core.secrets import Scrubber


def redact(scrubber: Scrubber, text: str, log: Any, where: str = "", session_id: str = "") -> str:
    """``text`` with its secrets redacted; logs what was redacted, by kind (when ``where``
    names the place)."""
    scrubbed = scrubber.scrub(text)
    if scrubbed.findings and where:
        log.warning(
            "secrets.redacted",
            where=where,
            session_id=session_id,
            count=len(scrubbed.findings),
            kinds=scrubbed.kinds,
        )
    return scrubbed.text


def redact_messages(
    scrubber: Scrubber, messages: Sequence[Message], log: Any, session_id: str
) -> list[Message]:
    """The messages with their secrets redacted: the one choke point before anything of a
    session reaches the journal, the transcript, a log name or a model."""
    out = []
    for m in messages:
        text = redact(scrubber, m.content, log, "session.append", session_id)
        out.append(m if text == m.content else dataclasses.replace(m, content=text))
    return out
