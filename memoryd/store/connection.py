"""Opening an index database: driver choice, sqlite-vec, pragmas, integrity check.

The interpreter's own :mod:`sqlite3` often cannot load extensions. On Linux x86_64 the
``pysqlite3`` module (from ``pysqlite3-binary``) can, so it is preferred when present. When no
module can load sqlite-vec the index still works with FTS only; the reason is reported, not
fatal. Callers catch :data:`DatabaseError` (the chosen driver's own class), never another
module's re-export.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sqlite3 as _std_sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def _pick_driver() -> ModuleType:
    try:
        import pysqlite3.dbapi2 as driver  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return _std_sqlite3
    return driver  # type: ignore[no-any-return,unused-ignore]


driver: ModuleType = _pick_driver()
DatabaseError: type[Exception] = driver.DatabaseError
Error: type[Exception] = driver.Error
Connection = Any  # the chosen driver's Connection class; not statically known


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What this connection can do: sqlite version, FTS5, and sqlite-vec (or why not)."""

    sqlite_version: str
    driver: str
    fts5: bool
    vec_version: str | None
    vec_error: str | None

    @property
    def vec(self) -> bool:
        return self.vec_version is not None


def _load_vec(conn: Connection) -> tuple[str | None, str | None]:
    if not hasattr(conn, "enable_load_extension"):
        return None, f"the {driver.__name__} module cannot load SQLite extensions"
    path = vec_loadable_path()
    if path is None:
        return None, "sqlite-vec is not installed"
    try:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(path)
        finally:
            conn.enable_load_extension(False)
        row = conn.execute("SELECT vec_version()").fetchone()
    except (Error, OSError, AttributeError) as exc:
        return None, f"sqlite-vec failed to load: {exc}"
    return str(row[0]), None


@functools.cache
def vec_loadable_path() -> str | None:
    """Where the sqlite-vec package keeps its loadable extension (``…/sqlite_vec/vec0``).

    Found without importing the package: its ``__init__`` imports numpy when numpy is
    installed (about 17 MB of a daemon's memory for nothing it uses).
    """
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        if any(Path(directory).glob("vec0.*")):
            return os.path.normpath(os.path.join(directory, "vec0"))
    return None


def _has_fts5(conn: Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.fts5_probe")
    except Error:
        return False
    return True


def connect(path: Path | str, *, busy_timeout_ms: int = 5000) -> tuple[Connection, Capabilities]:
    """Open ``path`` in autocommit mode (explicit ``BEGIN`` per phase) with WAL and sqlite-vec.

    A new file is created ``0600`` first (SQLite gives its ``-wal`` and ``-shm`` files the
    database's mode), so the index — which holds the memory's text — is owner-only.
    Raises the driver's :data:`DatabaseError` when the file is not a usable database.
    """
    create_private(path)
    conn = driver.connect(str(path), check_same_thread=False, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        set_wal(conn, busy_timeout_ms / 1000)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        vec_version, vec_error = _load_vec(conn)
        caps = Capabilities(
            sqlite_version=str(driver.sqlite_version),
            driver=driver.__name__,
            fts5=_has_fts5(conn),
            vec_version=vec_version,
            vec_error=vec_error,
        )
    except BaseException:
        conn.close()
        raise
    return conn, caps


def create_private(path: Path | str) -> None:
    """Create the database file ``0600`` unless it exists (or is in memory)."""
    if str(path) == ":memory:" or str(path).startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite reports the real problem with its own error
    os.close(fd)


def set_wal(conn: Connection, timeout: float, error: type[Exception] = Error) -> None:
    """Switch to WAL; SQLite answers "database is locked" at once (no busy handler) while
    another connection opens the same new file, so retry for up to ``timeout`` seconds.
    ``error`` is the driver's error class (the standard ``sqlite3`` one for its connections)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except error as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def quick_check(conn: Connection) -> str | None:
    """Run ``PRAGMA quick_check``; None when healthy, else the first problem it reports."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except Error as exc:
        return str(exc)
    if len(rows) == 1 and rows[0][0] == "ok":
        return None
    return "; ".join(str(r[0]) for r in rows[:3])


def probe() -> Capabilities:
    """The capabilities of a fresh in-memory connection (for `doctor` and `status`)."""
    conn, caps = connect(":memory:")
    conn.close()
    return caps
