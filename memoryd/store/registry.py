"""The registry of workspaces the daemon has served: ``<root>/workspaces.json`` (SPEC §10).

The experience confluence enumerates workspaces from here and never by listing the memory
root, so leftover test or temp folders (``tmp-…``, ``train/``) are never read. The
supervisor records a workspace the first time it serves it in a daemon's life.

```json
{"version": 1,
 "workspaces": {"widgets-7d43613e": {"path": "/src/widgets", "identity": "acme/widgets",
                                     "kind": "git", "first_seen": "…Z", "last_seen": "…Z"}}}
```

Keyed by the memory directory name (clones of one repository share it; ``path`` is the
latest one served). Writes are atomic (:func:`~memoryd.store.files.atomic_write_text`) and
serialised in this process. A file that cannot be read as a registry is logged, kept aside
as ``workspaces.json.corrupt`` and rebuilt from empty; an entry whose directory name does
not follow from its identity (a hand edit) is skipped and logged, so the registry can never
point the confluence outside the workspaces' own directories.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memoryd.core.times import rfc3339
from memoryd.core.workspace import SLUG_MAX, hash8_of, slugify, workspace_key
from memoryd.errors import StorageError
from memoryd.store.files import atomic_write_text, make_private_dirs, read_bytes
from memoryd.store.layout import Workspace

log = structlog.get_logger(__name__)

REGISTRY_FILE = "workspaces.json"
VERSION = 1
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One served workspace."""

    dirname: str
    """``<slug>-<hash8>``: its directory under the memory root."""
    path: str
    identity: str
    kind: str
    first_seen: str
    last_seen: str

    def to_dict(self) -> dict[str, str]:
        return {
            "path": self.path,
            "identity": self.identity,
            "kind": self.kind,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
        }

    @property
    def markers(self) -> tuple[str, ...]:
        """Strings that name this workspace (for the confluence's leak check)."""
        return (self.dirname, self.identity, self.path)


def registry_path(root: Path) -> Path:
    return root / REGISTRY_FILE


def expected_dirname(identity: str, kind: str) -> str | None:
    """The directory name a workspace of this identity has (SPEC §2), or None if unknown."""
    if kind == "git":
        name = identity.rsplit("/", 1)[-1]
        return f"{slugify(name, SLUG_MAX)}-{hash8_of(identity)}"
    if kind == "path":
        return workspace_key(None, identity).dirname
    return None


def _entry(dirname: str, raw: object) -> RegistryEntry | None:
    if not isinstance(raw, Mapping):
        return None
    fields = [raw.get(name) for name in ("path", "identity", "kind", "first_seen", "last_seen")]
    if not all(isinstance(value, str) for value in fields):
        return None
    path, identity, kind, first, last = (str(value) for value in fields)
    if not identity or expected_dirname(identity, kind) != dirname:
        return None
    return RegistryEntry(dirname, path, identity, kind, first, last)


def _read(root: Path) -> dict[str, RegistryEntry]:
    """The entries on disk; a corrupt file is logged, kept aside and read as empty."""
    path = registry_path(root)
    try:
        data = read_bytes(path)
    except StorageError as exc:
        log.warning("registry.unreadable", path=str(path), error=str(exc))
        return {}
    if data is None:
        return {}
    try:
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict) or not isinstance(document.get("workspaces"), dict):
            raise ValueError("no 'workspaces' object")
    except ValueError as exc:
        log.warning("registry.corrupt", path=str(path), error=str(exc), action="rebuilt empty")
        _keep_aside(path)
        return {}
    entries: dict[str, RegistryEntry] = {}
    for dirname, raw in document["workspaces"].items():
        entry = _entry(dirname, raw)
        if entry is None:
            log.warning("registry.bad_entry", path=str(path), workspace=dirname)
            continue
        entries[dirname] = entry
    return entries


def _keep_aside(path: Path) -> None:
    try:
        os.replace(path, path.with_name(path.name + ".corrupt"))
    except OSError as exc:
        log.warning("registry.keep_aside_failed", path=str(path), error=str(exc))


def load_registry(root: Path) -> list[RegistryEntry]:
    """The registered workspaces, sorted by directory name (empty if none or corrupt)."""
    with _lock:
        entries = _read(root)
    return [entries[name] for name in sorted(entries)]


def record_workspace(root: Path, ws: Workspace, now: datetime | None = None) -> bool:
    """Record that ``ws`` is being served (first seen kept, last seen and path updated).

    Never raises: a failed write is logged and returns False (serving goes on).
    """
    stamp = rfc3339(now or datetime.now(UTC))
    dirname = ws.key.dirname
    with _lock:
        entries = _read(root)
        old = entries.get(dirname)
        entries[dirname] = RegistryEntry(
            dirname,
            str(ws.path),
            ws.key.identity,
            ws.key.kind,
            old.first_seen if old else stamp,
            stamp,
        )
        document: dict[str, Any] = {
            "version": VERSION,
            "workspaces": {name: entries[name].to_dict() for name in sorted(entries)},
        }
        try:
            make_private_dirs(root)
            atomic_write_text(
                registry_path(root), json.dumps(document, indent=2, ensure_ascii=False) + "\n"
            )
        except (StorageError, OSError) as exc:
            log.warning("registry.write_failed", workspace=dirname, error=str(exc))
            return False
    log.info("registry.recorded", workspace=dirname, new=old is None)
    return True
