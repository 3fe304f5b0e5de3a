"""sd_notify against a real datagram socket standing in for systemd's NOTIFY_SOCKET."""

from __future__ import annotations

import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.runtime.adapters import notify


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, dict[str, str]]]:
    """A bound AF_UNIX datagram socket in a short /tmp dir (sun_path is ~100 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="mdn-", dir="/tmp"))
    path = directory / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(5)  # a missing datagram fails the test instead of hanging it
    try:
        sock.bind(str(path))
        yield sock, {"NOTIFY_SOCKET": str(path)}
    finally:
        sock.close()
        shutil.rmtree(directory)


def received(sock: socket.socket) -> dict[str, str]:
    lines = sock.recv(4096).decode("utf-8").split("\n")
    return dict(line.split("=", 1) for line in lines)


def test_ready_sends_ready_1(listener: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = listener
    assert notify.ready(env) is True
    message = received(sock)
    assert message["READY"] == "1"
    assert int(message["MAINPID"]) > 0


def test_stopping_status_and_reloading(listener: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = listener
    assert notify.stopping(env)
    assert received(sock) == {"STOPPING": "1"}
    assert notify.status("serving 2 workspaces\nwatcher: polling", env)
    assert received(sock) == {"STATUS": "serving 2 workspaces watcher: polling"}
    assert notify.reloading(env)
    message = received(sock)
    assert message["RELOADING"] == "1"
    assert int(message["MONOTONIC_USEC"]) > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")
def test_an_abstract_socket_name_is_supported() -> None:
    name = f"memoryd-test-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.bind("\0" + name)
        assert notify.notify("READY=1", {"NOTIFY_SOCKET": "@" + name}) is True
        assert sock.recv(64) == b"READY=1"


@pytest.mark.parametrize("env", [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "relative/sock"}])
def test_without_a_usable_notify_socket_nothing_is_sent(env: dict[str, str]) -> None:
    assert notify.ready(env) is False


def test_a_socket_nobody_listens_on_is_reported_not_raised(tmp_path: Path) -> None:
    assert notify.ready({"NOTIFY_SOCKET": str(tmp_path / "gone")}) is False
