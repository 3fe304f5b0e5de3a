"""Host facts ``memoryd doctor`` reports: can the memory root be written, the inotify limits.

Each function looks, never changes anything it does not clean up, and answers a value (an
error text or None, a mapping of limits); nothing raises for what it finds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

INOTIFY_DIR = Path("/proc/sys/fs/inotify")
INOTIFY_LIMITS = ("max_user_watches", "max_user_instances")


def root_writable(root: Path) -> str | None:
    """None when a file can be created (and removed) in ``root``, or in the nearest existing
    parent that the daemon would create it under; else why not."""
    probe_dir = root
    while not probe_dir.exists():
        if probe_dir.parent == probe_dir:
            return f"no existing parent directory of {root}"
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        return f"{probe_dir} is not a directory"
    try:
        fd, name = tempfile.mkstemp(prefix=".memoryd-doctor-", dir=probe_dir)
    except OSError as exc:
        return f"cannot create a file in {probe_dir}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(name)
    return None


def inotify_limits(directory: Path = INOTIFY_DIR) -> dict[str, int]:
    """The per-user inotify limits (empty where the platform has none)."""
    limits: dict[str, int] = {}
    for name in INOTIFY_LIMITS:
        try:
            limits[name] = int((directory / name).read_text().strip())
        except (OSError, ValueError):
            continue
    return limits


def count_directories(root: Path, limit: int = 1_000_000) -> int:
    """Directories under ``root``, itself included (what a recursive inotify watch of it
    takes, one watch each); counting stops at ``limit``. 0 when it does not exist."""
    if not root.is_dir():
        return 0
    count = 0
    for _dir, subdirs, _files in os.walk(root):
        count += 1
        if count >= limit:
            break
        subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(_dir, d))]
    return count
