"""The client library against a real socket server (and a raw fake daemon where needed)."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from memoryd.client import ERROR_CLASSES, AsyncClient, Client
from memoryd.errors import (
    ConfigError,
    DaemonNotRunning,
    DaemonTimeout,
    InvalidParams,
    MemorydError,
    MethodNotFound,
    PathOutsideMemory,
    WorkspaceNotFound,
)
from memoryd.runtime.adapters.server import SocketServer
from memoryd.runtime.rpc.table import MethodTable

pytestmark = pytest.mark.anyio


def make_table(gates: dict[str, anyio.Event]) -> MethodTable:
    table = MethodTable()

    @table.method("daemon.ping")
    async def ping(params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    @table.method("echo")
    async def echo(params: dict[str, Any]) -> dict[str, Any]:
        return params

    @table.method("wait")
    async def wait(params: dict[str, Any]) -> str:
        await gates.setdefault(params["key"], anyio.Event()).wait()
        return str(params["key"])

    @table.method("release")
    async def release(params: dict[str, Any]) -> None:
        gates.setdefault(params["key"], anyio.Event()).set()

    @table.method("fail")
    async def fail(params: dict[str, Any]) -> None:
        kind = params["kind"]
        if kind == "workspace":
            raise WorkspaceNotFound("no such workspace: /nope", workspace="/nope")
        if kind == "outside":
            raise PathOutsideMemory("path escapes the memory root", path="../x")
        if kind == "config":
            raise ConfigError("bad value for search.min_score", key="search.min_score")
        if kind == "params":
            raise InvalidParams("parameter 'query' must be a string", param="query")
        raise RuntimeError("bug")

    return table


@pytest.fixture
def sock_path() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="mdc-"))
    yield base / "run" / "memoryd.sock"
    shutil.rmtree(base, ignore_errors=True)


@asynccontextmanager
async def daemon(path: Path, **options: Any) -> AsyncIterator[SocketServer]:
    server = SocketServer(path, make_table({}), stop_timeout=0.5, **options)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        try:
            yield server
        finally:
            server.stop()


@asynccontextmanager
async def fake_daemon(
    path: Path, answer: Callable[[dict[str, Any]], bytes | None]
) -> AsyncIterator[list[dict[str, Any]]]:
    """A raw listener: records each request and writes whatever ``answer`` returns."""
    seen: list[dict[str, Any]] = []
    path.parent.mkdir(mode=0o700, exist_ok=True)

    async def serve(stream: SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            while True:
                try:
                    request = json.loads(await reader.receive_until(b"\n", 1 << 20))
                except (anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                seen.append(request)
                reply = answer(request)
                if reply is None:
                    return  # hang up without answering
                await stream.send(reply)

    async with await anyio.create_unix_listener(path) as listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield seen
        finally:
            tg.cancel_scope.cancel()


def sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking client call off the event loop the server runs on."""
    return anyio.to_thread.run_sync(partial(fn, *args, **kwargs))


# --- calls -----------------------------------------------------------------------------


async def test_sync_client_calls_and_returns_results(sock_path: Path) -> None:
    async with daemon(sock_path):
        with Client(sock_path) as client:
            assert await sync(client.call, "daemon.ping") == {"ok": True}
            assert await sync(client.call, "echo", a=[1, "ü"], b=None) == {"a": [1, "ü"], "b": None}
            assert await sync(client.request, "echo", {"from": 3}) == {"from": 3}


async def test_async_client_calls_and_returns_results(sock_path: Path) -> None:
    async with daemon(sock_path), AsyncClient(sock_path) as client:
        assert await client.call("daemon.ping") == {"ok": True}
        assert await client.request("echo", {"from": 3, "lines": 2}) == {"from": 3, "lines": 2}


async def test_request_ids_count_up(sock_path: Path) -> None:
    def answer(request: dict[str, Any]) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": None}).encode() + b"\n"

    async with fake_daemon(sock_path, answer) as seen:
        async with AsyncClient(sock_path) as client:
            for _ in range(3):
                await client.call("daemon.ping")
        with Client(sock_path) as sync_client:
            for _ in range(2):
                await sync(sync_client.call, "echo", x=1)
    assert [r["id"] for r in seen] == [1, 2, 3, 1, 2]
    assert seen[-1] == {"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"x": 1}}


async def test_async_calls_run_concurrently_over_one_connection(sock_path: Path) -> None:
    async with daemon(sock_path) as server, AsyncClient(sock_path) as client:
        results: dict[str, Any] = {}

        async def waiter() -> None:
            results["wait"] = await client.call("wait", key="g")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0.05)
                # Would deadlock if the client waited for one reply before sending the next.
                results["release"] = await client.call("release", key="g")
        assert results == {"wait": "g", "release": None}
        assert server.connections == 1


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "cls", "data"),
    [
        ("workspace", WorkspaceNotFound, {"workspace": "/nope"}),
        ("outside", PathOutsideMemory, {"path": "../x"}),
        ("config", ConfigError, {"key": "search.min_score"}),
        ("params", InvalidParams, {"param": "query"}),
    ],
)
async def test_error_replies_raise_the_matching_error_class(
    sock_path: Path, kind: str, cls: type[MemorydError], data: dict[str, Any]
) -> None:
    async with daemon(sock_path), AsyncClient(sock_path) as client:
        with pytest.raises(cls) as info:
            await client.call("fail", kind=kind)
        assert type(info.value) is cls
        assert info.value.data == data
        with Client(sock_path) as sync_client, pytest.raises(cls):
            await sync(sync_client.call, "fail", kind=kind)
        assert await client.call("daemon.ping") == {"ok": True}  # the connection is still good


async def test_unknown_methods_and_internal_errors(sock_path: Path) -> None:
    async with daemon(sock_path), AsyncClient(sock_path) as client:
        with pytest.raises(MethodNotFound, match=r"no\.such"):
            await client.call("no.such")
        with pytest.raises(MemorydError) as info:
            await client.call("fail", kind="bug")
        assert type(info.value) is MemorydError
        assert info.value.code == "internal_error"


def test_every_error_code_has_its_class() -> None:
    assert ERROR_CLASSES["method_not_found"] is MethodNotFound
    assert ERROR_CLASSES["daemon_not_running"] is DaemonNotRunning
    assert ERROR_CLASSES["index_corrupt"].__name__ == "IndexCorrupt"
    assert all(cls.code == code for code, cls in ERROR_CLASSES.items())


async def test_a_request_too_large_raises_its_error_not_daemon_not_running(sock_path: Path) -> None:
    async with daemon(sock_path, max_request_bytes=1000):
        async with AsyncClient(sock_path) as client:
            with pytest.raises(MemorydError, match="too large") as info:
                await client.call("echo", pad="x" * 3_000_000)
            assert info.value.data["remote_code"] == "request_too_large"
            assert await client.call("daemon.ping") == {"ok": True}  # reconnects
        with Client(sock_path) as sync_client:
            with pytest.raises(MemorydError, match="too large"):
                await sync(sync_client.call, "echo", pad="x" * 3_000_000)
            assert await sync(sync_client.call, "daemon.ping") == {"ok": True}


# --- no daemon -------------------------------------------------------------------------


async def test_no_socket_raises_daemon_not_running_saying_how_to_start(sock_path: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="memoryd serve"):
        await AsyncClient(sock_path).call("daemon.ping")
    with pytest.raises(DaemonNotRunning, match="memoryd serve"):
        Client(sock_path).call("daemon.ping")


async def test_a_stale_socket_file_raises_daemon_not_running(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock_path))
    dead.close()
    with pytest.raises(DaemonNotRunning, match="nothing listening"):
        await AsyncClient(sock_path).call("daemon.ping")
    with pytest.raises(DaemonNotRunning, match="nothing listening"):
        Client(sock_path).call("daemon.ping")


async def test_a_daemon_hanging_up_mid_call_raises_daemon_not_running(sock_path: Path) -> None:
    async with fake_daemon(sock_path, lambda request: None):
        async with AsyncClient(sock_path) as client:
            with pytest.raises(DaemonNotRunning, match="closed the connection"):
                await client.call("daemon.ping")
        with pytest.raises(DaemonNotRunning, match="closed the connection"):
            await sync(Client(sock_path).call, "daemon.ping")


async def test_clients_reconnect_after_the_daemon_restarts(sock_path: Path) -> None:
    client = AsyncClient(sock_path)
    sync_client = Client(sock_path)
    try:
        async with daemon(sock_path):
            assert await client.call("daemon.ping") == {"ok": True}
            assert await sync(sync_client.call, "daemon.ping") == {"ok": True}
        async with daemon(sock_path):
            assert await client.call("daemon.ping") == {"ok": True}
            assert await sync(sync_client.call, "daemon.ping") == {"ok": True}
    finally:
        await client.aclose()
        sync_client.close()


# --- timeouts --------------------------------------------------------------------------


async def test_async_timeout_raises_and_the_late_reply_is_dropped(sock_path: Path) -> None:
    async with daemon(sock_path), AsyncClient(sock_path, timeout=0.2) as client:
        with pytest.raises(DaemonTimeout, match="did not answer") as info:
            await client.call("wait", key="slow")
        assert info.value.code == "daemon_timeout" and isinstance(info.value, TimeoutError)
        await client.call("release", key="slow")  # the first reply now arrives, unclaimed
        assert await client.call("echo", n=1) == {"n": 1}


async def test_sync_timeout_raises_and_the_next_call_works(sock_path: Path) -> None:
    async with daemon(sock_path):
        with Client(sock_path, timeout=0.2) as client:
            with pytest.raises(DaemonTimeout, match="did not answer") as info:
                await sync(client.call, "wait", key="slow")
            assert info.value.code == "daemon_timeout" and isinstance(info.value, TimeoutError)
            assert await sync(client.call, "release", key="slow") is None
            assert await sync(client.call, "echo", n=1) == {"n": 1}


async def test_a_malformed_reply_raises_memoryd_error(sock_path: Path) -> None:
    async with fake_daemon(sock_path, lambda request: b"not json\n"):
        async with AsyncClient(sock_path) as client:
            with pytest.raises(MemorydError, match="malformed reply"):
                await client.call("daemon.ping")
        with pytest.raises(MemorydError, match="malformed reply"):
            await sync(Client(sock_path).call, "daemon.ping")
