"""MCP ``memory_remember`` scrubs the note and says what it redacted (SPEC §18)."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from memoryd.core.secrets import fingerprint
from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)
from tests.test_mcp_bridge import bridge, needs_sdk, ok

pytestmark = [pytest.mark.anyio, needs_sdk]


async def test_memory_remember_redacts_and_names_the_redaction(home: Path) -> None:
    rng = random.Random(7)
    secret = "sk_live_" + "".join(rng.choice(string.ascii_letters) for _ in range(24))
    ws = project(home, "shop")
    async with in_process_daemon() as d, bridge(home, ws) as client:
        text, saved = await ok(
            client, "memory_remember", text=f"Payments call Stripe with {secret} in staging"
        )
        redaction = f"[REDACTED:stripe-key:{fingerprint(secret)}]"
        assert saved["redacted"] == [redaction]
        assert redaction in text and "never store credentials" in text and secret not in text
        memory = resolve_workspace(ws, d.root).memory_file.read_text(encoding="utf-8")
        assert redaction in memory and secret not in memory
