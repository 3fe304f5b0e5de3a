"""Start the daemon in the background: fork, detach, and wait for the child's readiness report.

The parent forks; the child starts a new session, points stdin at ``/dev/null`` and stdout and
stderr at the log file, and serves. Through a pipe it reports ``ok`` once the socket answers,
or the error that stopped it; the parent waits for that line (at most
:data:`READY_TIMEOUT_SECS`) so ``memoryd serve`` can say whether the daemon started.

    started = start_detached(config_path, log_path)
    if started.answer == "ok": ...
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd.errors import MemorydError, describe_error, only_error
from memoryd.runtime import main as runtime_main

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Started:
    pid: int  # the daemon's pid
    answer: str  # "ok", or what stopped it ("" when it said nothing in time)


def start_detached(config: str | None, log_path: Path) -> Started:
    """Fork the daemon into the background; return once it is ready, failed, or timed out."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the daemon
        os.close(read_fd)
        _detach(log_path)
        os._exit(_run_detached(config, _Reporter(write_fd), log_path))
    os.close(write_fd)
    return Started(pid, _read_report(read_fd, READY_TIMEOUT_SECS))


READY_TIMEOUT_SECS = 60.0


def _run_detached(config: str | None, reporter: _Reporter, log_path: Path) -> int:
    """The detached child: serve until stopped; report "ok" or the error through the pipe."""
    try:
        runtime_main.serve(config, on_ready=lambda: reporter.send("ok"), log_file=log_path)
    except MemorydError as exc:
        reporter.send(f"error: {exc}")
        log.error("daemon.refused", error=str(exc), code=exc.code)  # the log says why too
        return 1
    except BaseExceptionGroup as group:
        error = only_error(group)
        reporter.send(f"error: {error or describe_error(group)}")
        if error is None:
            traceback.print_exception(group)  # into the log
        return 1
    except BaseException as exc:  # noqa: BLE001 - report anything, then exit the child
        reporter.send(f"error: {describe_error(exc)}")
        traceback.print_exception(exc)
        return 1
    finally:
        reporter.send("error: the daemon stopped before it was ready")
    return 0


def _detach(log_path: Path) -> None:
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


class _Reporter:
    """The child's end of the readiness pipe: the first message is sent, the rest dropped."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def send(self, message: str) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, message.encode()[:4000])
        except OSError:
            pass  # the parent gave up waiting
        finally:
            os.close(fd)


def _read_report(fd: int, timeout: float) -> str:
    import select

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
            if not ready:
                break
            data = os.read(fd, 4096)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").strip()
