"""The socket server over a real Unix socket, with a small test method table.

Each bad input of issue 3 item 4 has its own test; after each, the same server answers a ping
and the process's open file descriptors are back where they were.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from structlog.testing import capture_logs

from memoryd.core.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
)
from memoryd.errors import AlreadyRunning, Busy, ConfigError, InvalidParams
from memoryd.runtime.adapters.server import SocketServer
from memoryd.runtime.rpc.table import MethodTable

pytestmark = pytest.mark.anyio


class Service:
    """The test method table, recording what ran."""

    def __init__(self) -> None:
        self.table = MethodTable()
        self.gates: dict[str, anyio.Event] = {}
        self.calls: dict[str, int] = {}
        self.waiting = 0
        self.cancelled = 0
        t = self.table

        @t.method("daemon.ping")
        async def ping(params: dict[str, Any]) -> dict[str, Any]:
            return {"ok": True}

        @t.method("echo")
        async def echo(params: dict[str, Any]) -> dict[str, Any]:
            self._count("echo")
            return params

        @t.method("add")
        async def add(params: dict[str, Any]) -> int:
            a, b = params.get("a"), params.get("b")
            if type(a) is not int or type(b) is not int:
                raise InvalidParams("parameters 'a' and 'b' must be integers", param="a")
            return a + b

        @t.method("wait")
        async def wait(params: dict[str, Any]) -> str:
            self._count("wait")
            self.waiting += 1
            try:
                await self.gate(params["key"]).wait()
            except anyio.get_cancelled_exc_class():
                self.cancelled += 1
                raise
            finally:
                self.waiting -= 1
            return str(params["key"])

        @t.method("release")
        async def release(params: dict[str, Any]) -> None:
            self.gate(params["key"]).set()

        @t.method("big")
        async def big(params: dict[str, Any]) -> str:
            self._count("big")
            return "x" * int(params["size"])

        @t.method("boom")
        async def boom(params: dict[str, Any]) -> None:
            raise RuntimeError("a secret detail")

        @t.method("grouped")
        async def grouped(params: dict[str, Any]) -> None:
            raise ExceptionGroup("from a task group", [Busy("flush already running")])

        @t.method("unencodable")
        async def unencodable(params: dict[str, Any]) -> object:
            return object()

    def gate(self, key: str) -> anyio.Event:
        return self.gates.setdefault(key, anyio.Event())

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


def rpc(request_id: int | None, method: str, **params: Any) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode() + b"\n"


@pytest.fixture
def sock_path() -> Iterator[Path]:
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="mds-"))
    yield base / "run" / "memoryd.sock"
    shutil.rmtree(base, ignore_errors=True)


@asynccontextmanager
async def running(path: Path, service: Service, **options: Any) -> AsyncIterator[SocketServer]:
    options.setdefault("stop_timeout", 1.0)
    server = SocketServer(path, service.table, **options)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        try:
            yield server
        finally:
            server.stop()


async def exchange(path: Path, payload: bytes, *, eof: bool = True) -> list[dict[str, Any]]:
    """Send ``payload`` (then EOF), read replies until the server closes the connection."""
    received = bytearray()
    with anyio.fail_after(10):
        stream = await anyio.connect_unix(path)
        async with stream, anyio.create_task_group() as tg:

            async def send() -> None:
                try:
                    await stream.send(payload)
                    if eof:
                        await stream.send_eof()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass  # the server closed first (e.g. a line too large)

            tg.start_soon(send)
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    return [json.loads(line) for line in received.splitlines()]


async def ping(path: Path) -> None:
    assert await exchange(path, rpc(99, "daemon.ping")) == [
        {"jsonrpc": "2.0", "id": 99, "result": {"ok": True}}
    ]


async def wait_until(condition: Any, what: str) -> None:
    with anyio.move_on_after(20):  # generous: a loaded CI machine closes sockets late
        while not condition():  # noqa: ASYNC110 - polls state that has no event to wait on
            await anyio.sleep(0.01)
    assert condition(), f"timed out waiting for {what}"


class Healthy:
    """Records the fd count of a warmed-up server; ``check()`` asserts it serves and is back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process = psutil.Process()
        self.baseline = -1

    async def __aenter__(self) -> Healthy:
        await ping(self.path)
        self.baseline = self.process.num_fds()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            await self.check()

    async def check(self) -> None:
        await ping(self.path)
        # <=: an fd an earlier test left to the garbage collector may close meanwhile
        await wait_until(lambda: self.process.num_fds() <= self.baseline, "fds to be released")


def error_of(reply: dict[str, Any]) -> tuple[Any, int, str]:
    return reply["id"], reply["error"]["code"], reply["error"]["data"]["code"]


# --- answering -------------------------------------------------------------------------


async def test_pipelined_requests_are_answered_as_they_complete(sock_path: Path) -> None:
    service = Service()
    async with running(sock_path, service), Healthy(sock_path):
        stream = await anyio.connect_unix(sock_path)
        async with stream:
            # 1 waits on a gate; 2 overtakes it; 3 opens the gate on the same connection.
            await stream.send(rpc(1, "wait", key="g") + rpc(2, "echo", n=2))
            with anyio.fail_after(5):
                first = json.loads(await stream.receive())
                assert first == {"jsonrpc": "2.0", "id": 2, "result": {"n": 2}}
                await stream.send(rpc(3, "release", key="g"))
                rest = b""
                while rest.count(b"\n") < 2:
                    rest += await stream.receive()
        replies = {r["id"]: r["result"] for r in map(json.loads, rest.splitlines())}
        assert replies == {1: "g", 3: None}


async def test_many_pipelined_requests_each_get_their_own_reply(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        payload = b"".join(rpc(i, "echo", n=i) for i in range(1, 101))
        replies = await exchange(sock_path, payload)
    assert sorted((r["id"], r["result"]["n"]) for r in replies) == [(i, i) for i in range(1, 101)]


async def test_a_notification_runs_but_gets_no_reply(sock_path: Path) -> None:
    service = Service()
    async with running(sock_path, service), Healthy(sock_path):
        replies = await exchange(sock_path, rpc(None, "echo") + rpc(1, "daemon.ping"))
    assert [r["id"] for r in replies] == [1]
    assert service.calls["echo"] == 1


async def test_an_exception_group_around_one_memoryd_error_is_that_error(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        [reply] = await exchange(sock_path, rpc(1, "grouped"))
    assert error_of(reply) == (1, SERVER_ERROR, "busy")
    assert reply["error"]["message"] == "flush already running"


# --- bad input (issue 3, item 4) -------------------------------------------------------


async def test_malformed_json_gets_a_parse_error_and_the_connection_carries_on(
    sock_path: Path,
) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        replies = await exchange(sock_path, b'{"jsonrpc": "2.0", "id": 1,\n' + rpc(2, "echo"))
    assert error_of(replies[0]) == (None, PARSE_ERROR, "parse_error")
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_a_batch_gets_one_array_with_a_reply_per_member(sock_path: Path) -> None:
    service = Service()
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"n": 1}},
        {"jsonrpc": "2.0", "method": "echo", "params": {"note": True}},  # notification
        {"jsonrpc": "2.0", "id": 2, "method": "add", "params": {"a": 1, "b": "x"}},
        {"jsonrpc": "2.0", "id": 3, "method": "memory.nope"},
        {"jsonrpc": "2.0", "id": 4},  # no method: this member alone is invalid
        [1, 2],
        {"jsonrpc": "2.0", "id": 5, "method": "boom"},
        {"jsonrpc": "2.0", "id": 6, "method": "add", "params": {"a": 2, "b": 3}},
    ]
    async with running(sock_path, service), Healthy(sock_path):
        lines = await exchange(sock_path, json.dumps(batch).encode() + b"\n" + rpc(7, "echo"))
        (replies,) = [line for line in lines if isinstance(line, list)]
        assert {"jsonrpc": "2.0", "id": 7, "result": {}} in lines  # the connection carried on
        assert service.calls["echo"] >= 2  # the notification ran
        only_notes = json.dumps([{"jsonrpc": "2.0", "method": "echo"}] * 2).encode() + b"\n"
        assert await exchange(sock_path, only_notes + rpc(8, "echo")) == [
            {"jsonrpc": "2.0", "id": 8, "result": {}}  # nothing sent for the notifications
        ]
    assert isinstance(replies, list) and len(replies) == 7
    assert replies[0] == {"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}
    assert error_of(replies[1]) == (2, INVALID_PARAMS, "invalid_params")
    assert error_of(replies[2])[:2] == (3, METHOD_NOT_FOUND)
    assert error_of(replies[3]) == (4, INVALID_REQUEST, "invalid_request")
    assert error_of(replies[4]) == (None, INVALID_REQUEST, "invalid_request")
    assert error_of(replies[5]) == (5, INTERNAL_ERROR, "internal_error")
    assert replies[6] == {"jsonrpc": "2.0", "id": 6, "result": 5}


@pytest.mark.parametrize("size", [0, 65])
async def test_an_empty_or_oversized_batch_is_refused_whole(sock_path: Path, size: int) -> None:
    service = Service()
    batch = [{"jsonrpc": "2.0", "id": i, "method": "echo"} for i in range(size)]
    async with running(sock_path, service), Healthy(sock_path):
        [reply] = await exchange(sock_path, json.dumps(batch).encode() + b"\n")
    assert error_of(reply) == (None, INVALID_REQUEST, "invalid_request")
    assert ("empty" if size == 0 else "at most 64") in reply["error"]["message"]
    assert service.calls.get("echo", 0) == 0


async def test_a_json_number_is_an_invalid_request(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        [reply] = await exchange(sock_path, b"42\n")
    assert error_of(reply) == (None, INVALID_REQUEST, "invalid_request")


async def test_wrong_parameter_types_are_invalid_params(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        replies = await exchange(
            sock_path,
            rpc(1, "add", a="1", b=2)
            + b'{"jsonrpc":"2.0","id":2,"method":"add","params":[1,2]}\n'
            + rpc(3, "add", a=1, b=2),
        )
    by_id = {r["id"]: r for r in replies}
    assert error_of(by_id[1]) == (1, INVALID_PARAMS, "invalid_params")
    assert by_id[1]["error"]["data"]["param"] == "a"
    assert error_of(by_id[2]) == (2, INVALID_PARAMS, "invalid_params")
    assert by_id[3]["result"] == 3


async def test_an_unknown_method_is_method_not_found(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        [reply] = await exchange(sock_path, rpc(1, "memory.nope"))
    assert error_of(reply) == (1, METHOD_NOT_FOUND, "method_not_found")
    assert "memory.nope" in reply["error"]["message"]


async def test_a_line_over_the_limit_gets_an_error_and_the_connection_is_closed(
    sock_path: Path,
) -> None:
    async with running(sock_path, Service(), max_request_bytes=4096), Healthy(sock_path):
        # A line of exactly the limit is fine.
        fits = rpc(1, "echo", pad="x" * (4097 - len(rpc(1, "echo", pad=""))))
        assert len(fits) == 4096 + 1
        [ok] = await exchange(sock_path, fits)
        assert ok["id"] == 1 and "result" in ok
        # One byte more: an error, then the server closes without waiting for our EOF.
        too_long = rpc(2, "echo", pad="x" * (4098 - len(rpc(2, "echo", pad=""))))
        assert len(too_long) == 4097 + 1
        replies = await exchange(sock_path, too_long, eof=False)
    assert [error_of(r) for r in replies] == [(None, INVALID_REQUEST, "request_too_large")]
    assert replies[0]["error"]["data"]["max_bytes"] == 4096


async def test_a_huge_line_at_the_default_limit_is_refused(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        replies = await exchange(sock_path, b'{"pad": "' + b"x" * (2 << 20), eof=False)
    assert [error_of(r)[2] for r in replies] == ["request_too_large"]


async def test_invalid_utf8_is_a_parse_error(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        replies = await exchange(
            sock_path, b'{"jsonrpc":"2.0","id":1,"method":"echo\xff\xfe"}\n' + rpc(2, "echo")
        )
    assert error_of(replies[0]) == (None, PARSE_ERROR, "parse_error")
    assert replies[1]["id"] == 2


async def test_a_mebibyte_of_random_bytes_gets_only_errors(sock_path: Path) -> None:
    garbage = random.Random(20).randbytes(1 << 20)
    async with running(sock_path, Service()), Healthy(sock_path):
        replies = await exchange(sock_path, garbage)
    assert replies, "some of the random lines should have been answered"
    assert all(r["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST) for r in replies)
    assert len(replies) <= garbage.count(b"\n") + 1


async def test_half_a_line_then_disconnect_just_closes(sock_path: Path) -> None:
    service = Service()
    async with running(sock_path, service) as server, Healthy(sock_path):
        assert await exchange(sock_path, b'{"jsonrpc":"2.0","id":1,"method":"ec') == []
        stream = await anyio.connect_unix(sock_path)
        await stream.send(b'{"jsonrpc":"2.0","id":1,"meth')
        await stream.aclose()
        await wait_until(lambda: server.connections == 0, "the connection to close")
    assert service.calls == {}


async def test_200_connections_opened_and_dropped_at_once(sock_path: Path) -> None:
    async with running(sock_path, Service()) as server, Healthy(sock_path):
        streams = [await anyio.connect_unix(sock_path) for _ in range(200)]
        for i, stream in enumerate(streams):
            if i % 2:
                await stream.send(b'{"jsonrpc":"2.0","id":1,"method":"echo"')
        await wait_until(lambda: server.connections == 200, "all connections to be accepted")
        for stream in streams:
            await stream.aclose()
        await wait_until(lambda: server.connections == 0, "all connections to close")


async def test_an_unexpected_exception_is_an_internal_error_and_logged(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        with capture_logs() as logs:
            replies = await exchange(sock_path, rpc(1, "boom") + rpc(2, "unencodable"))
    by_id = {r["id"]: r for r in replies}
    assert error_of(by_id[1]) == (1, INTERNAL_ERROR, "internal_error")
    assert "secret" not in by_id[1]["error"]["message"]
    assert error_of(by_id[2]) == (2, INTERNAL_ERROR, "internal_error")
    events = {e["event"]: e for e in logs}
    assert events["rpc.internal_error"]["method"] == "boom"
    assert events["rpc.internal_error"]["log_level"] == "error"
    assert "rpc.unencodable_result" in events


# --- flow control ----------------------------------------------------------------------


async def test_requests_in_flight_per_connection_are_bounded(sock_path: Path) -> None:
    service = Service()
    async with running(sock_path, service, max_in_flight=3), Healthy(sock_path):
        stream = await anyio.connect_unix(sock_path)
        async with stream:
            await stream.send(b"".join(rpc(i, "wait", key="g") for i in range(10)))
            await wait_until(lambda: service.waiting == 3, "three requests to start")
            await anyio.sleep(0.1)
            assert service.calls["wait"] == 3  # the rest are not even read yet
            service.gate("g").set()
            received = b""
            with anyio.fail_after(5):
                while received.count(b"\n") < 10:
                    received += await stream.receive()
    assert sorted(json.loads(line)["id"] for line in received.splitlines()) == list(range(10))


async def test_a_client_that_stops_reading_is_dropped(sock_path: Path) -> None:
    service = Service()
    options = {"max_in_flight": 4, "send_timeout": 0.3}
    async with running(sock_path, service, **options) as server, Healthy(sock_path):
        stream = await anyio.connect_unix(sock_path)
        async with stream:
            await stream.send(b"".join(rpc(i, "big", size=300_000) for i in range(200)))
            # Replies fill the socket buffers; the stuck send times out; the server gives up.
            await wait_until(lambda: service.calls.get("big", 0) > 0, "the requests to run")
            await wait_until(lambda: server.connections == 0, "the server to drop the client")
            received = 0
            with anyio.fail_after(5):
                while True:
                    try:
                        received += len(await stream.receive())
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
        # Reading stopped at the in-flight bound: 200 requests were sent, few ever ran.
        assert service.calls["big"] <= 5
        assert received < 5 * 300_100


# --- the socket file -------------------------------------------------------------------


async def test_the_socket_is_0600_in_a_0700_directory(sock_path: Path) -> None:
    async with running(sock_path, Service()):
        socket_mode = (await anyio.Path(sock_path).stat()).st_mode
        assert stat.S_ISSOCK(socket_mode)
        assert stat.S_IMODE(socket_mode) == 0o600
        assert stat.S_IMODE((await anyio.Path(sock_path.parent).stat()).st_mode) == 0o700


async def test_a_directory_writable_by_others_is_refused(sock_path: Path) -> None:
    sock_path.parent.mkdir()
    sock_path.parent.chmod(0o777)
    with pytest.raises(ConfigError, match=str(sock_path.parent)) as info:
        await SocketServer(sock_path, Service().table).serve()
    assert "writable by group or others" in str(info.value)
    assert not await anyio.Path(sock_path).exists()


async def test_a_stale_socket_file_is_replaced(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock_path))  # a socket file nobody listens on, as a killed daemon leaves it
    dead.close()
    assert stat.S_ISSOCK((await anyio.Path(sock_path).lstat()).st_mode)
    async with running(sock_path, Service()):
        await ping(sock_path)


async def test_a_file_that_is_not_a_socket_is_left_alone(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    await anyio.Path(sock_path).write_text("precious")
    with pytest.raises(ConfigError, match="not a socket"):
        await SocketServer(sock_path, Service().table).serve()
    assert await anyio.Path(sock_path).read_text() == "precious"


async def test_a_second_server_on_a_live_socket_raises_already_running(sock_path: Path) -> None:
    async with running(sock_path, Service()):
        with pytest.raises(AlreadyRunning, match=str(sock_path)) as info:
            await SocketServer(sock_path, Service().table).serve()
        assert f"pid {os.getpid()}" in str(info.value)
        await ping(sock_path)  # the first one is untouched


async def test_another_process_listening_on_the_path_raises_already_running(
    sock_path: Path,
) -> None:
    sock_path.parent.mkdir(mode=0o700)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(sock_path))
    other.listen()
    try:
        with pytest.raises(AlreadyRunning, match="listening"):
            await SocketServer(sock_path, Service().table).serve()
        assert stat.S_ISSOCK((await anyio.Path(sock_path).lstat()).st_mode)
    finally:
        other.close()


# --- another user ----------------------------------------------------------------------

OTHER_UID = 65534
CHILD = r"""
import os, socket, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("denied"); sys.exit(0)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.ping"}\n')
    data = s.recv(65536)
except (BrokenPipeError, ConnectionResetError):
    data = b""
print("closed" if data == b"" else "answered " + data.decode())
"""

needs_root_on_linux = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="needs root on Linux to switch uid"
)


async def run_as_other_user(path: Path) -> str:
    # The dirs above the socket's own directory must let the other user through.
    path.parent.parent.chmod(0o755)
    result = await anyio.run_process(
        [sys.executable, "-I", "-S", "-c", CHILD, str(path)], check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().strip()


@needs_root_on_linux
async def test_another_user_cannot_reach_the_socket(sock_path: Path) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        assert await run_as_other_user(sock_path) == "denied"


@needs_root_on_linux
async def test_another_user_is_disconnected_unanswered_even_with_open_permissions(
    sock_path: Path,
) -> None:
    async with running(sock_path, Service()), Healthy(sock_path):
        await anyio.Path(sock_path.parent).chmod(0o755)  # as if someone loosened them by hand
        await anyio.Path(sock_path).chmod(0o666)
        with capture_logs() as logs:
            assert await run_as_other_user(sock_path) == "closed"
    refused = [e for e in logs if e["event"] == "server.peer_refused"]
    assert [e["peer_uid"] for e in refused] == [OTHER_UID]


# --- stopping --------------------------------------------------------------------------


async def test_stop_lets_in_flight_requests_answer_and_removes_the_socket(sock_path: Path) -> None:
    service = Service()
    server = SocketServer(sock_path, service.table, stop_timeout=5)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            stream = await anyio.connect_unix(sock_path)
            async with stream:
                await stream.send(rpc(1, "wait", key="g"))
                await wait_until(lambda: service.waiting == 1, "the request to start")
                server.stop()
                await wait_until(lambda: not sock_path.exists(), "the socket file to go")
                with pytest.raises(FileNotFoundError):
                    await anyio.connect_unix(sock_path)  # no longer accepting
                service.gate("g").set()
                assert json.loads(await stream.receive()) == {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "result": "g",
                }
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()
    assert service.cancelled == 0


async def test_stop_cancels_requests_still_running_at_the_deadline(sock_path: Path) -> None:
    service = Service()
    server = SocketServer(sock_path, service.table, stop_timeout=0.2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            stream = await anyio.connect_unix(sock_path)
            async with stream:
                await stream.send(rpc(1, "wait", key="never"))
                await wait_until(lambda: service.waiting == 1, "the request to start")
                server.stop()
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await stream.receive()
    assert service.cancelled == 1
    assert not await anyio.Path(sock_path).exists()


async def test_starting_and_stopping_leaks_no_file_descriptors(sock_path: Path) -> None:
    process = psutil.Process()
    async with running(sock_path, Service()):  # warm up lazily created loop resources
        await ping(sock_path)
    before = process.num_fds()
    for _ in range(5):
        async with running(sock_path, Service()):
            await ping(sock_path)
        assert not await anyio.Path(sock_path).exists()
    assert process.num_fds() <= before  # <=: an earlier test's stray fd may close meanwhile
