"""Notes into a curated ``MEMORY.md`` (SPEC §7): the file a scope names, the locked append."""

from __future__ import annotations

from pathlib import Path

import anyio

from memoryd.core.templates import global_template, workspace_template
from memoryd.errors import InvalidParams
from memoryd.runtime.workspace.filelock import file_lock
from memoryd.store.files import append_section, ensure_file
from memoryd.store.layout import Workspace, global_memory_file


def memory_file(root: Path, workspace: Workspace, scope: str) -> Path:
    """The ``MEMORY.md`` of ``scope``: ``workspace`` or ``global``."""
    if scope == "workspace":
        return workspace.memory_file
    if scope == "global":
        return global_memory_file(root)
    raise InvalidParams(f"scope must be 'workspace' or 'global', got {scope!r}")


async def append_note(target: Path, scope: str, workspace: Workspace, note: str) -> None:
    """Append ``note`` to ``target`` (made from the scope's template when missing), under
    the file's lock."""
    async with file_lock(target):

        def write() -> None:
            template = (
                global_template() if scope == "global" else workspace_template(workspace.key.slug)
            )
            ensure_file(target, template)
            append_section(target, note)  # keeps bytes a person wrote, even odd ones

        await anyio.to_thread.run_sync(write)
