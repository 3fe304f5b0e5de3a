"""Socket methods of the secret scrubber (SPEC §18) and its ``daemon.status`` entry.

``daemon.status`` gets ``secrets``: the rule set, the user's rule counts and the redactions
made since the daemon started, by kind (never a value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memoryd.core.config import Config
from memoryd.runtime.rpc.table import MethodTable

StatusHook = Callable[[], dict[str, Any]]


def register_secret_methods(
    table: MethodTable,
    config: Callable[[], Config],
    *,
    status_hooks: list[StatusHook] | None = None,
) -> None:
    """Add the scrubber's ``daemon.status`` entry (``config`` is read at each call)."""
    if status_hooks is not None:
        status_hooks.append(lambda: {"secrets": config().secrets.scrubber().describe()})
