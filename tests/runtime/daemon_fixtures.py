"""Fixtures for the end-to-end daemon tests: a real daemon on a real socket, in or out of process.

- ``home`` (a pytest fixture; import :func:`home_fixture`): a short ``MEMORYD_HOME`` under
  ``/tmp`` (``AF_UNIX`` paths are limited to ~107 bytes, and pytest's ``tmp_path`` can be
  longer), removed afterwards.
- :func:`in_process_daemon`: ``async with in_process_daemon() as d:`` runs
  ``Daemon.run(stop=event, handle_signals=False)`` in a task group, yields once the socket
  listens, and stops the daemon (bounded) on exit. ``d.call(...)`` talks to it over the socket
  with :class:`~memoryd.client.AsyncClient`.
- :class:`DaemonProcess`: ``python -m memoryd serve --foreground`` (or a given script) as a
  subprocess with ``MEMORYD_HOME`` set, stderr captured to a file; :meth:`~DaemonProcess.start`
  waits until the socket answers a ping. The ``processes`` fixture
  (:func:`processes_fixture`) kills (by pid) any still running at the end of a test.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from memoryd.client import AsyncClient, Client
from memoryd.errors import MemorydError
from memoryd.runtime.main import Daemon
from memoryd.store import configfile

#: The daemons under test search FTS-only unless a test configures ``[embedding]`` itself:
#: the default (``auto``) may load a local model, slow and beside the point here.
NO_EMBEDDINGS = '[embedding]\nprovider = "none"\n'
STOP_TIMEOUT = 15.0
START_TIMEOUT = 20.0


@pytest.fixture(name="home")
def home_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short MEMORYD_HOME under /tmp, so the socket path fits in sun_path."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="mdd-"))
    monkeypatch.setenv("MEMORYD_HOME", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def project(home: Path, name: str) -> Path:
    """A workspace directory (a plain directory, no git) under ``home``; canonical."""
    path = home / "projects" / name
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def socket_path(home: Path) -> Path:
    return home / "run" / "memoryd.sock"


def write_config(home: Path, text: str) -> Path:
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- in process


@dataclass
class RunningDaemon:
    """An in-process daemon and a client connected to its socket."""

    daemon: Daemon
    home: Path
    client: AsyncClient

    @property
    def socket(self) -> Path:
        return self.daemon.socket_path

    @property
    def root(self) -> Path:
        return self.daemon.root

    async def call(self, method: str, /, **params: Any) -> Any:
        return await self.client.request(method, params)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        return await self.client.request(method, params)

    async def search(self, workspace: Path, query: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "memory.search", workspace=str(workspace), query=query, **params
        )
        return result

    async def status(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("daemon.status")
        return result

    async def actor_status(self, workspace: Path) -> dict[str, Any] | None:
        for actor in (await self.status())["actors"]:
            if actor["workspace"] == str(workspace):
                return dict(actor)
        return None


async def _run_daemon(
    daemon: Daemon,
    stop: anyio.Event,
    done: anyio.Event,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    try:
        await daemon.run(stop=stop, handle_signals=False, task_status=task_status)
    finally:
        done.set()


@asynccontextmanager
async def in_process_daemon(
    *,
    config: str | None = None,
    flags: Mapping[str, Any] | None = None,
    loop: str = "asyncio",
    **options: Any,
) -> AsyncIterator[RunningDaemon]:
    """Run a daemon in this event loop (MEMORYD_HOME must be set, see :func:`home`).

    ``config`` is written to ``$MEMORYD_HOME/config.toml`` first (with :data:`NO_EMBEDDINGS`
    unless it has an ``[embedding]`` section); ``options`` go to
    :class:`~memoryd.runtime.main.Daemon` (test seams such as ``watch`` or ``backoff``).
    """
    home = Path(os.environ["MEMORYD_HOME"])
    config = config or ""
    write_config(home, config if "[embedding]" in config else config + NO_EMBEDDINGS)
    loaded = configfile.load(None, flags)
    daemon = Daemon(loaded, flags=flags, loop=loop, **options)
    stop, done = anyio.Event(), anyio.Event()
    root_logger = logging.getLogger()
    handlers, level = list(root_logger.handlers), root_logger.level
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(START_TIMEOUT):
                await tg.start(functools.partial(_run_daemon, daemon, stop, done))
            try:
                async with AsyncClient(daemon.socket_path, timeout=10.0) as client:
                    yield RunningDaemon(daemon, home, client)
            finally:
                stop.set()
                with anyio.fail_after(STOP_TIMEOUT):
                    await done.wait()
    finally:
        # The daemon configured logging for itself; put the test's back.
        for handler in list(root_logger.handlers):
            if handler not in handlers:
                root_logger.removeHandler(handler)
                handler.close()
        root_logger.setLevel(level)


async def exchange(path: Path, payload: bytes, replies: int) -> list[dict[str, Any]]:
    """Send raw bytes on a fresh connection and read ``replies`` JSON lines back."""
    async with await anyio.connect_unix(path) as stream:
        await stream.send(payload)
        reader = BufferedByteReceiveStream(stream)
        with anyio.fail_after(10):
            return [json.loads(await reader.receive_until(b"\n", 1 << 24)) for _ in range(replies)]


def rpc(request_id: int | str | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    """One JSON-RPC request line."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode() + b"\n"


async def wait_until(check: Callable[[], Any], *, within: float = 5.0, every: float = 0.02) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail after ``within``."""
    with anyio.fail_after(within):
        while True:
            value = check()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            await anyio.sleep(every)


# --------------------------------------------------------------------------- subprocess


def cli_env(home: Path) -> dict[str, str]:
    """This process's environment for a child memoryd: MEMORYD_HOME set, no other MEMORYD_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update({"MEMORYD_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    env.pop("NOTIFY_SOCKET", None)
    return env


def memoryd_cli(
    home: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m memoryd ARGS`` (a client command) against the daemon of ``home``."""
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        env=cli_env(home),
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class DaemonProcess:
    """A daemon in a child process: ``python -m memoryd serve --foreground`` by default."""

    home: Path
    args: tuple[str, ...] = ("-m", "memoryd", "serve", "--foreground")
    env: Mapping[str, str] = field(default_factory=dict)
    name: str = "daemon"
    embeddings: str | None = "none"  # embedding.provider (see NO_EMBEDDINGS); None: the default
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return socket_path(self.home)

    @property
    def stderr_path(self) -> Path:
        return self.home / f"{self.name}.stderr"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> DaemonProcess:
        """Start the process without waiting for it."""
        env = cli_env(self.home)
        if self.embeddings is not None:
            env["MEMORYD_EMBEDDING_PROVIDER"] = self.embeddings
        env.update(self.env)
        with (
            open(self.stderr_path, "wb") as err,
            open(self.home / f"{self.name}.stdout", "wb") as out,
        ):
            self.proc = subprocess.Popen(
                [sys.executable, *self.args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=self.home,
            )
        return self

    def start(self, timeout: float = START_TIMEOUT) -> DaemonProcess:
        """Start it and wait until the socket answers ``daemon.ping``."""
        self.spawn()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the daemon exited with {self.proc.returncode}:\n{self.stderr()}"
                )
            with suppress(MemorydError, OSError), Client(self.socket, timeout=2.0) as client:
                if client.call("daemon.ping") == {"ok": True}:
                    return
            time.sleep(0.05)
        raise AssertionError(f"the daemon did not answer within {timeout}s:\n{self.stderr()}")

    def client(self) -> Client:
        return Client(self.socket, timeout=10.0)

    def call(self, method: str, /, **params: Any) -> Any:
        with self.client() as client:
            return client.request(method, params)

    def send(self, signum: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test if the process is still running after ``timeout``."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the daemon did not exit within {timeout}s:\n{self.stderr()}"
            ) from None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (a line that is not JSON fails the test)."""
        return [json.loads(line) for line in self.stderr().splitlines() if line.strip()]


@pytest.fixture(name="processes")
def processes_fixture(home: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """``processes(**kw)`` makes a :class:`DaemonProcess`; all are killed at teardown."""
    made: list[DaemonProcess] = []

    def make(**kwargs: Any) -> DaemonProcess:
        kwargs.setdefault("name", f"daemon{len(made)}")
        process = DaemonProcess(home, **kwargs)
        made.append(process)
        return process

    yield make
    for process in made:
        process.kill()


@contextmanager
def ping_latencies(socket: Path | str, every: float = 0.005) -> Iterator[list[float]]:
    """Ping the daemon from a thread (its own connection) while the block runs; the list holds
    each ping's round trip in seconds once the block ends: how long the event loop stalled."""
    pings: list[float] = []
    done = threading.Event()

    def pinger() -> None:
        with Client(socket, timeout=60) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.call("daemon.ping")
                pings.append(time.perf_counter() - started)
                time.sleep(every)

    thread = threading.Thread(target=pinger)
    thread.start()
    try:
        yield pings
    finally:
        done.set()
        thread.join()
