"""Socket methods of the secret scrubber (SPEC §18): secrets.scan, secrets.purge, and the
``daemon.status`` entry.

- ``secrets.scan {workspace | all: true}`` lists the secrets in memory files already on disk:
  one workspace's directory, or (``all``) the whole memory root — file, line, kind and
  fingerprint, never the value. It reads files only; no actor is needed.
- ``secrets.purge {workspace | all: true}`` redacts them in place through the workspace's
  actor (:mod:`memoryd.runtime.workspace.purge`). With ``all``, the files outside any
  workspace (the global ``MEMORY.md``, ``experience.md``, their history, the confluence
  state) are redacted first, then every registered workspace is purged and re-synced (its
  index holds the global memory too). A registered workspace whose directory is gone has
  its files redacted and its index file removed (rebuilt from the redacted files when it is
  served again). A file over 64 MiB, neither scanned nor redacted, is named in
  ``too_large`` (the global files' and each workspace's), never passed over in silence.
- ``daemon.status`` gets ``secrets``: the rule set, the user's rule counts and the
  redactions made since the daemon started, by kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from memoryd.core import params as p
from memoryd.core.replies import (
    GlobalPurge,
    PurgeReply,
    ScanFindings,
    ScanReply,
    WorkspacePurge,
)
from memoryd.core.secrets import Scrubber
from memoryd.core.workspace import INDEX_FILE
from memoryd.errors import InvalidParams, MemorydError
from memoryd.runtime.rpc.context import DaemonContext
from memoryd.runtime.rpc.prologue import WRITE, ordered_actor, workspace_param
from memoryd.runtime.rpc.table import MethodTable
from memoryd.runtime.supervisor import Supervisor
from memoryd.runtime.workspace.purge import describe, redact_files, scan_files, scan_tree
from memoryd.store.index.guard import discard_files
from memoryd.store.layout import memory_relpath, resolve_workspace
from memoryd.store.registry import load_registry
from memoryd.store.secretscan import FileScan, memory_text_files


def _target(params: dict[str, Any]) -> str | None:
    """The workspace named, or None for ``all``; exactly one of them."""
    p.known_only(params, ("workspace", "all"))
    every = p.boolean(params, "all", False)
    if every:
        if "workspace" in params:
            raise InvalidParams("give either 'workspace' or 'all', not both", param="all")
        return None
    return workspace_param(params)


def _outside_workspaces(root: Path, too_large: list[Path]) -> list[Path]:
    """The text files of the memory root that belong to no workspace directory; those too
    large to scan are added to ``too_large``."""
    dirs = {e.dirname for e in load_registry(root)}

    def outside(f: Path) -> bool:
        top = f.relative_to(root).parts[0]
        return top not in dirs and not (root / top / INDEX_FILE).exists()

    every_large: list[Path] = []
    files = [f for f in memory_text_files(root, every_large) if outside(f)]
    too_large.extend(f for f in every_large if outside(f))
    return files


def register(table: MethodTable, ctx: DaemonContext) -> None:
    """Add ``secrets.scan``, ``secrets.purge`` and the ``daemon.status`` entry (the config
    is read at each call)."""
    supervisor, config = ctx.supervisor, ctx.config

    def scrubber() -> Scrubber:
        return config().secrets.scrubber()

    def reply(scans: list[FileScan]) -> ScanFindings:
        files = describe(scans, supervisor.root)
        info = scrubber().describe()
        return {
            "files": files,
            "findings": sum(len(f["findings"]) for f in files),
            "rule_set": info["rule_set"],
        }

    @table.method("secrets.scan")
    async def scan(params: dict[str, Any]) -> ScanReply:
        workspace = _target(params)
        root = supervisor.root
        if workspace is None:
            directory = root
        else:
            ws = await anyio.to_thread.run_sync(resolve_workspace, Path(workspace), root)
            directory = ws.dir
        too_large: list[Path] = []
        files = await anyio.to_thread.run_sync(memory_text_files, directory, too_large)
        scans = await anyio.to_thread.run_sync(scan_files, files, scrubber())
        found = reply(scans)
        out: ScanReply = {
            "scanned": len(files),
            "files": found["files"],
            "findings": found["findings"],
            "rule_set": found["rule_set"],
        }
        if too_large:
            out["too_large"] = [memory_relpath(root, f) for f in too_large]
        return out

    @table.method("secrets.purge")
    async def purge(params: dict[str, Any]) -> PurgeReply:
        workspace = _target(params)
        if workspace is not None:
            async with ordered_actor(supervisor, workspace, WRITE) as actor:
                return {"workspaces": [{"workspace": workspace, **await actor.secrets_purge()}]}
        return await _purge_all(supervisor, scrubber())

    ctx.extra_status.append(lambda: {"secrets": scrubber().describe()})


async def _purge_all(supervisor: Supervisor, scrubber: Scrubber) -> PurgeReply:
    root = supervisor.root
    too_large: list[Path] = []
    outside = await anyio.to_thread.run_sync(_outside_workspaces, root, too_large)
    scans = await anyio.to_thread.run_sync(scan_files, outside, scrubber)
    rewritten, redacted = await redact_files(scans, scrubber)
    files = [memory_relpath(root, f) for f in rewritten]
    glob: GlobalPurge = {"files": files, "redacted": redacted}
    if too_large:
        glob["too_large"] = [memory_relpath(root, f) for f in too_large]
    out: PurgeReply = {"global": glob, "workspaces": []}
    for entry in await anyio.to_thread.run_sync(load_registry, root):
        result: WorkspacePurge
        try:
            async with ordered_actor(supervisor, entry.path, WRITE) as actor:
                result = await actor.secrets_purge()
        except MemorydError as exc:  # gone or failing: redact its files, drop its index
            directory = root / entry.dirname
            large: list[Path] = []
            found = await anyio.to_thread.run_sync(scan_tree, directory, scrubber, large)
            done, count = await redact_files(found, scrubber)
            await anyio.to_thread.run_sync(discard_files, directory / INDEX_FILE)
            result = {
                "files": [memory_relpath(root, f) for f in done],
                "redacted": count,
                "index_removed": True,
                "error": str(exc),
            }
            if large:
                result["too_large"] = [memory_relpath(root, f) for f in large]
        out["workspaces"].append({"workspace": entry.path, **result})
    return out
