"""systemd readiness (issue 3 item 9): the daemon sends READY=1 on $NOTIFY_SOCKET once its
socket listens, and STOPPING=1 when it stops — seen by a fake NOTIFY_SOCKET."""

from __future__ import annotations

import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memoryd.client import Client
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    processes_fixture,  # noqa: F401 - the `processes` fixture
)

Processes = Callable[..., DaemonProcess]


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, Path]]:
    directory = Path(tempfile.mkdtemp(dir="/tmp", prefix="ntf-"))
    path = directory / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(20.0)
    yield sock, path
    sock.close()
    path.unlink(missing_ok=True)
    directory.rmdir()


def test_ready_is_sent_once_the_socket_answers_and_stopping_on_sigterm(
    processes: Processes, notify_socket: tuple[socket.socket, Path]
) -> None:
    sock, path = notify_socket
    daemon = processes(env={"NOTIFY_SOCKET": str(path)}).spawn()
    messages: list[str] = []
    while not any(m.startswith("READY=1") for m in messages):
        messages.extend(sock.recv(4096).decode().splitlines())
    # At the moment READY=1 arrived, the socket was already listening.
    with Client(daemon.socket, timeout=5.0) as client:
        assert client.call("daemon.ping") == {"ok": True}
    assert f"MAINPID={daemon.pid}" in messages
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    while not any(m.startswith("STOPPING=1") for m in messages):
        messages.extend(sock.recv(4096).decode().splitlines())
    assert daemon.proc.wait(timeout=10) == 0
