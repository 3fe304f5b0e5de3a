"""Claude Code transcript lines for tests that grow a transcript message by message."""

from __future__ import annotations

import json
from typing import Any


def claude_line(i: int) -> bytes:
    """One Claude Code transcript line: a user message (even ``i``) or an assistant one."""
    text = f"message {i}: the zebrafish cache on runner {i}"
    if i % 2:
        message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    else:
        message = {"role": "user", "content": text}
    return (
        json.dumps({"type": message["role"], "uuid": f"m{i}", "message": message}) + "\n"
    ).encode()
