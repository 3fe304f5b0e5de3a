"""The socket server under hostile clients (issue #17 item 3): half-lines time out, the number of
connections is capped, and a ping still answers within a second while hundreds of slow clients
hang around (on main before #17: nothing dropped half-lines, every connection was kept)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from memoryd.core.protocol import INVALID_REQUEST, SERVER_ERROR
from tests.runtime.test_server import (
    Healthy,
    Service,
    error_of,
    exchange,
    ping,
    rpc,
    running,
    wait_until,
)
from tests.runtime.test_server import sock_path as _sock_path

pytestmark = pytest.mark.anyio
sock_path = _sock_path  # the fixture


async def read_all(stream: anyio.abc.SocketStream) -> bytes:
    received = bytearray()
    with anyio.fail_after(10):
        while True:
            try:
                received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return bytes(received)


async def test_a_partial_line_older_than_the_timeout_is_dropped_with_an_error(
    sock_path: Path,
) -> None:
    async with running(sock_path, Service(), request_timeout=0.3) as server, Healthy(sock_path):
        stream = await anyio.connect_unix(sock_path)
        async with stream:
            await stream.send(b'{"jsonrpc":"2.0","id":1,"meth')
            started = time.monotonic()
            with capture_logs() as logs:
                received = await read_all(stream)
            took = time.monotonic() - started
        (reply,) = [json.loads(line) for line in received.splitlines()]
        assert error_of(reply) == (None, INVALID_REQUEST, "request_timeout")
        assert 0.25 <= took < 5
        assert any(e["event"] == "rpc.request_timeout" for e in logs)
        await wait_until(lambda: server.connections == 0, "the connection to close")
        assert server.timed_out == 1


async def test_an_idle_connection_between_lines_is_not_timed_out(sock_path: Path) -> None:
    async with running(sock_path, Service(), request_timeout=0.2) as server:
        stream = await anyio.connect_unix(sock_path)
        async with stream:
            await stream.send(rpc(1, "daemon.ping"))
            assert json.loads(await stream.receive())["result"] == {"ok": True}
            await anyio.sleep(0.6)  # idle, no partial line: stays open
            assert server.connections == 1
            # a line sent in pieces within the timeout is fine
            line = rpc(2, "echo", a=1)
            await stream.send(line[:10])
            await anyio.sleep(0.05)
            await stream.send(line[10:])
            assert json.loads(await stream.receive())["result"] == {"a": 1}


async def test_over_the_cap_a_new_connection_is_refused_with_an_error_line(
    sock_path: Path,
) -> None:
    async with running(sock_path, Service(), max_connections=5) as server:
        idle = [await anyio.connect_unix(sock_path) for _ in range(5)]
        await wait_until(lambda: server.connections == 5, "five connections")
        extra = await anyio.connect_unix(sock_path)
        async with extra:
            received = await read_all(extra)
        (reply,) = [json.loads(line) for line in received.splitlines()]
        assert error_of(reply) == (None, SERVER_ERROR, "too_many_connections")
        assert reply["error"]["data"]["max_connections"] == 5
        assert server.refused == 1
        for stream in idle:
            await stream.aclose()
        await wait_until(lambda: server.connections == 0, "the idle connections to close")
        await ping(sock_path)


async def test_a_ping_answers_within_a_second_while_slow_clients_hold_every_slot(
    sock_path: Path,
) -> None:
    """400 clients each send one byte and wait; the cap is 50. The newest connection takes
    the place of the oldest half-line holder, so ping answers at once; descriptors held by
    the server stay bounded by the cap."""
    async with running(sock_path, Service(), max_connections=50) as server, Healthy(sock_path):
        slow = []
        for _ in range(400):
            stream = await anyio.connect_unix(sock_path)
            await stream.send(b"{")
            slow.append(stream)
        await anyio.sleep(0.2)
        assert server.connections <= 50
        for _ in range(5):
            started = time.monotonic()
            await ping(sock_path)
            assert time.monotonic() - started < 1.0
        assert server.evicted >= 350
        for stream in slow:
            await stream.aclose()
        await wait_until(lambda: server.connections == 0, "the slow connections to close")


async def test_an_evicted_connection_sees_end_of_stream(sock_path: Path) -> None:
    async with running(sock_path, Service(), max_connections=1) as server:
        first = await anyio.connect_unix(sock_path)
        async with first:
            await first.send(b'{"jsonrpc"')
            await wait_until(lambda: server.connections == 1, "the first connection")
            await anyio.sleep(0.05)
            assert await exchange(sock_path, rpc(7, "daemon.ping")) == [
                {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}
            ]
            assert await read_all(first) == b""
        assert server.evicted == 1
