"""The daemon under test: a real ``memoryd serve --foreground`` subprocess and its socket.

:class:`BenchHome` is one relocated memoryd state directory (``MEMORYD_HOME``) with its
workspace directories; :class:`DaemonProcess` runs the daemon on it with a chosen embedding
provider, waits until its socket answers, measures its RSS and stops it with SIGTERM. Every
figure the suite reports for memoryd goes through this socket, exactly as a client's would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil

from memoryd.client import Client
from memoryd.errors import DaemonNotRunning
from memoryd.store.layout import resolve_workspace

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


@dataclass
class BenchHome:
    """A ``MEMORYD_HOME`` for one part of the suite: memory root, socket, workspaces."""

    path: Path
    workspaces: dict[str, Path] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path / "memory"

    @property
    def socket(self) -> Path:
        return self.path / "d.sock"

    def workspace(self, name: str) -> tuple[Path, Path]:
        """A workspace directory (created) and the memory directory memoryd gives it."""
        ws = self.path / "ws" / name
        ws.mkdir(parents=True, exist_ok=True)
        self.workspaces[name] = ws
        return ws, resolve_workspace(ws, self.root).dir

    def index_path(self, name: str) -> Path:
        return resolve_workspace(self.workspaces[name], self.root).index_path


class DaemonProcess:
    """``python -m memoryd serve --foreground`` on a :class:`BenchHome`."""

    def __init__(
        self,
        home: BenchHome,
        *,
        provider: str = "none",
        dims: int = 384,
        log_level: str = "info",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.provider = provider
        self.dims = dims
        self.log_path = home.path / f"daemon-{provider}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        env.update(
            MEMORYD_HOME=str(home.path),
            MEMORYD_DAEMON_SOCKET=str(home.socket),
            MEMORYD_DAEMON_LOG_LEVEL=log_level,
            MEMORYD_DAEMON_LOG_FORMAT="json",
            MEMORYD_DAEMON_ACTOR_IDLE_SECS="86400",
            MEMORYD_EMBEDDING_PROVIDER=provider,
        )
        if provider == "hash":
            env["MEMORYD_EMBEDDING_DIMENSIONS"] = str(dims)
        env.update(extra_env or {})
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_in: float = 0.0

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        started = time.perf_counter()
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--foreground"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=self.home.path,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memoryd exited with {self.proc.returncode}: {self.tail()}")
            try:
                with Client(self.home.socket, timeout=5) as client:
                    client.call("daemon.ping")
                break
            except (DaemonNotRunning, TimeoutError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"memoryd did not start: {self.tail()}") from None
                time.sleep(0.05)
        self.started_in = time.perf_counter() - started

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def client(self, timeout: float | None = 60.0) -> Client:
        return Client(self.home.socket, timeout=timeout)

    def call(self, method: str, /, **params: Any) -> Any:
        with self.client() as client:
            return client.call(method, **params)

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)

    def wait_vectors(self, workspace: Path, timeout: float) -> dict[str, Any]:
        """Poll ``index.stats`` until no chunk lacks a vector; returns the last stats."""
        deadline = time.monotonic() + timeout
        while True:
            stats: dict[str, Any] = self.call("index.stats", workspace=str(workspace))
            if stats.get("vectors_pending", 0) == 0 or time.monotonic() > deadline:
                return stats
            time.sleep(0.5)
