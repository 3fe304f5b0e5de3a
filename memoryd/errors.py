"""The one error tree of memoryd.

Every error memoryd raises on purpose is a :class:`MemorydError` with a stable ``code``.
The socket server turns any of them into one JSON-RPC error shape (``error.data.code``),
the CLI maps codes to exit statuses in one function, and nothing below the CLI prints or
exits.

    MemorydError                      code
    ├── ConfigError                   config_invalid
    ├── InvalidParams                 invalid_params
    ├── MethodNotFound                method_not_found
    ├── WorkspaceNotFound             workspace_not_found
    ├── PathOutsideMemory             path_outside_memory
    ├── NotFound                      not_found
    ├── ModelNotConfigured            model_not_configured
    ├── ModelError                    model_error
    │   └── EmbeddingError            embedding_error
    ├── LockHeld                      lock_held
    ├── Busy                          busy
    ├── SessionConflict               session_conflict
    ├── MemoryChanged                 memory_changed
    ├── StorageError                  storage_error
    │   ├── IndexCorrupt              index_corrupt
    │   └── ReadOnly                  read_only
    ├── AgentConfigError              agent_config_invalid
    ├── ActorUnavailable              actor_unavailable
    ├── WatcherUnavailable            watcher_unavailable  (runtime only: actor polls)
    ├── AlreadyRunning                already_running
    ├── TooManyConnections            too_many_connections
    ├── DaemonNotRunning              daemon_not_running   (client side only)
    └── DaemonTimeout                 daemon_timeout       (client side only; a TimeoutError)

Two helpers read errors in one way everywhere: :func:`only_error` finds the one error inside
(nested) task-group exception groups (:func:`leaf_errors` lists them all), and
:func:`describe_error` spells any error as ``Type: message`` for logs and replies.
"""

from __future__ import annotations

from typing import Any, ClassVar


class MemorydError(Exception):
    """Base of every error memoryd raises on purpose."""

    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The ``error.data`` payload of a JSON-RPC error reply."""
        return {"code": self.code, **self.data}


class ConfigError(MemorydError):
    """A configuration key is unknown or has a bad value; the message names the dotted key."""

    code = "config_invalid"

    def __init__(self, message: str, *, key: str | None = None, **data: Any) -> None:
        super().__init__(message, **({"key": key} if key else {}), **data)
        self.key = key


class InvalidParams(MemorydError):
    """A request's parameters are missing or of the wrong type."""

    code = "invalid_params"


class MethodNotFound(MemorydError):
    """The request names a method the daemon does not have."""

    code = "method_not_found"


class WorkspaceNotFound(MemorydError):
    """The named workspace directory does not exist or is not a directory."""

    code = "workspace_not_found"


class PathOutsideMemory(MemorydError):
    """A client path would leave the memory root or the workspace's own files."""

    code = "path_outside_memory"


class NotFound(MemorydError):
    """A named thing (file, session, persona …) does not exist."""

    code = "not_found"


class ModelNotConfigured(MemorydError):
    """The operation needs a chat model and none is configured."""

    code = "model_not_configured"


class ModelError(MemorydError):
    """A model endpoint failed, timed out or answered something unusable."""

    code = "model_error"


class EmbeddingError(ModelError):
    """An embedding provider failed, timed out or answered something unusable."""

    code = "embedding_error"


class LockHeld(MemorydError):
    """A DreamLock is held by a live process."""

    code = "lock_held"


class Busy(MemorydError):
    """The operation is already running (e.g. a flush of the same session)."""

    code = "busy"


class SessionConflict(MemorydError):
    """A session id is already open in another workspace (session ids are global)."""

    code = "session_conflict"


class MemoryChanged(MemorydError):
    """``MEMORY.md`` changed since the dream being undone wrote it (undo without force)."""

    code = "memory_changed"


class StorageError(MemorydError):
    """A file or database operation failed (disk full, I/O error …)."""

    code = "storage_error"


class IndexCorrupt(StorageError):
    """The SQLite index failed its integrity check."""

    code = "index_corrupt"


class ReadOnly(StorageError):
    """The memory root or workspace directory is read-only: search works, writes do not.

    ``data.reason`` says why (the path and the OS error of the failed write probe).
    """

    code = "read_only"


class AgentConfigError(MemorydError):
    """An agent definition, role or persona is invalid; the message names file and field."""

    code = "agent_config_invalid"


class ActorUnavailable(MemorydError):
    """A workspace's actor is failing and being restarted with backoff."""

    code = "actor_unavailable"


class WatcherUnavailable(MemorydError):
    """The file watcher cannot start or died (inotify limits, missing directory …).

    The actor catches it, polls every ``index.reconcile_secs`` instead and reports
    ``watcher: polling`` in ``status``.
    """

    code = "watcher_unavailable"


class AlreadyRunning(MemorydError):
    """A daemon is already listening on the socket; a second one refuses to start."""

    code = "already_running"


class TooManyConnections(MemorydError):
    """The daemon holds ``daemon.max_connections`` connections and refused one more."""

    code = "too_many_connections"


class DaemonNotRunning(MemorydError):
    """No daemon answers on the socket (client side)."""

    code = "daemon_not_running"


class DaemonTimeout(MemorydError, TimeoutError):
    """The daemon did not answer within the client's timeout (client side).

    Also a :class:`TimeoutError`, so code that waits on anything with a deadline can catch
    both alike.
    """

    code = "daemon_timeout"


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """``exc`` itself, or the errors inside it when it is a (nested) exception group, in order."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]


def only_error(exc: BaseException) -> MemorydError | None:
    """The one :class:`MemorydError` that ``exc`` is, or that (nested) task-group exception
    groups hold if that is all they hold (so callers can report it instead of the group)."""
    leaves = leaf_errors(exc)
    if len(leaves) == 1 and isinstance(leaves[0], MemorydError):
        return leaves[0]
    return None


def describe_error(exc: BaseException) -> str:
    """``Type: message`` (``Type`` alone when there is no message); the errors inside an
    exception group, so described, joined by ``"; "``."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
