"""Protocol fuzzing (SPEC §11, §15, issue 9 item 4) against a live daemon process.

Hypothesis generates JSON-RPC messages — well-formed requests to every method with random
params, wrong shapes, odd ids, huge and deeply nested values, odd Unicode, NUL bytes — and
raw byte streams, and sends each on a connection to ``memoryd serve`` running as a child
process, followed by a ``daemon.ping`` with a fresh id. The daemon must answer that ping on
the same connection within the client timeout (every line it sends being a well-formed
JSON-RPC reply), or close the connection, after which a new connection's ping is answered;
the process never exits. A bounded number of inputs per run (``FUZZ_EXAMPLES``; more with
``--slow``). A client that pipelines large-reply requests and never reads costs the daemon a
bounded amount of memory, and is dropped.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.harness import report
from tests.runtime.daemon_fixtures import DaemonProcess, project, write_config

FUZZ_EXAMPLES = 300
REPLY_TIMEOUT = 15.0
METHODS = [
    "daemon.ping",
    "daemon.status",
    "memory.search",
    "memory.get",
    "memory.remember",
    "memory.files",
    "index.stats",
    "index.reindex",
    "session.open",
    "session.append",
    "session.usage",
    "session.flush",
    "session.close",
    "dream.run",
    "dream.status",
    "dream.undo",
    "agents.resolve",
    "agents.list",
    "confluence.status",
]
PARAMS = [
    "workspace",
    "query",
    "max_results",
    "min_score",
    "sources",
    "path",
    "from",
    "lines",
    "text",
    "scope",
    "session_id",
    "messages",
    "subagent",
    "tokens",
    "context_window",
    "threshold_percent",
    "compaction_count",
    "force",
    "embeddings",
    "subagent_type",
    "overrides",
]
ODD_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "a\x00b",
        "\ud800",
        "../../etc/passwd",
        "．．/．．/MEMORY.md",
        "%2e%2e/MEMORY.md",
        "/",
        "/etc",
        "MEMORY.md",
        "\u202eevil",
        "🦀" * 50,
        "x" * 5000,
        "NO_REPLY",
        "## heading",
        "user",
        "workspace",
        "global",
    ]
)
TEXT = st.one_of(st.text(max_size=60), ODD_TEXT)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(PARAMS), TEXT), inner, max_size=4),
    ),
    max_leaves=12,
)
MESSAGE_IDS = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=10),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)


def requests(workspaces: list[str]) -> st.SearchStrategy[Any]:
    """Well-formed-looking requests with random params (often wrong), and any JSON value."""
    value = st.one_of(
        JSON, st.sampled_from(workspaces), st.just([{"role": "user", "content": "hi"}])
    )
    params = st.dictionaries(st.sampled_from(PARAMS), value, max_size=6)
    request = st.fixed_dictionaries(
        {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2])},
        optional={
            "id": MESSAGE_IDS,
            "method": st.one_of(st.sampled_from(METHODS), TEXT),
            "params": st.one_of(params, JSON),
        },
    )
    return st.one_of(request, request, JSON)


class Conversation:
    """One connection to the daemon: send a line, then ping, read until the ping answers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.buffer = b""
        self.next_id = 10**9
        self.closed_by_daemon = 0
        self.replies = 0

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(REPLY_TIMEOUT)
            self.sock.connect(str(self.path))
            self.buffer = b""
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def probe(self, payload: bytes) -> None:
        """Send ``payload`` then a ping; the ping is answered or the connection closed."""
        sock = self._connect()
        self.next_id += 1
        ping = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "daemon.ping"})
        try:
            sock.sendall(payload + b"\n" + ping.encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            self._reconnected()
            return
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            line = self._line(deadline)
            if line is None:
                self._reconnected()
                return
            decoded = json.loads(line)
            batch = decoded if isinstance(decoded, list) else [decoded]  # a batch's replies
            assert batch, "an empty batch reply is never sent"
            for reply in batch:
                self.replies += 1
                assert reply.get("jsonrpc") == "2.0", reply
                assert ("result" in reply) != ("error" in reply), reply
                if "error" in reply:
                    assert isinstance(reply["error"]["code"], int), reply
                    assert isinstance(reply["error"]["data"]["code"], str), reply
            if not isinstance(decoded, list) and decoded.get("id") == self.next_id:
                assert decoded["result"] == {"ok": True}, decoded
                return

    def _line(self, deadline: float) -> bytes | None:
        """The next reply line, or None when the daemon closed the connection."""
        assert self.sock is not None
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the daemon hung the connection"
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            except TimeoutError:
                raise AssertionError("the daemon hung the connection") from None
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _reconnected(self) -> None:
        """The daemon closed the connection: a fresh one must answer a ping."""
        self.closed_by_daemon += 1
        self.close()
        self.probe(b"")


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    home = Path(tempfile.mkdtemp(dir="/tmp", prefix="mdd-fuzz-"))
    write_config(home, '[embedding]\nprovider = "none"\n[daemon]\nmax_request_bytes = 65536\n')
    process = DaemonProcess(home, name="fuzz")
    try:
        project(home, "fuzzed")
        yield process.start()
    finally:
        process.kill()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def conversation(daemon: DaemonProcess) -> Iterator[Conversation]:
    talk = Conversation(daemon.socket)
    yield talk
    talk.close()
    assert daemon.running, daemon.stderr()[-3000:]


def examples(count: int) -> Any:
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )


FIGURES = {"json_messages": 0, "byte_streams": 0, "closed_by_daemon": 0}


def workspaces_of(daemon: DaemonProcess) -> list[str]:
    return [str(project(daemon.home, "fuzzed")), "/", "relative/path", "/nonexistent/dir"]


def fuzz(daemon: DaemonProcess, conversation: Conversation, messages: int, streams: int) -> None:
    @examples(messages)
    @given(message=requests(workspaces_of(daemon)))
    def json_messages(message: Any) -> None:
        line = json.dumps(message, ensure_ascii=bool(hash(str(message)) & 1))
        conversation.probe(line.encode("utf-8", "surrogatepass"))
        FIGURES["json_messages"] += 1

    @examples(streams)
    @given(data=st.binary(max_size=2000))
    def byte_streams(data: bytes) -> None:
        conversation.probe(data.replace(b"\n", b" "))
        FIGURES["byte_streams"] += 1

    json_messages()
    assert daemon.running, daemon.stderr()[-3000:]
    byte_streams()
    assert daemon.running, daemon.stderr()[-3000:]
    FIGURES["closed_by_daemon"] = conversation.closed_by_daemon
    report("protocol_fuzz", dict(FIGURES))


def test_fuzzed_messages_and_byte_streams_never_kill_or_hang_the_daemon(
    daemon: DaemonProcess, conversation: Conversation
) -> None:
    fuzz(daemon, conversation, FUZZ_EXAMPLES, FUZZ_EXAMPLES // 2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ten_times_more_fuzzed_inputs(daemon: DaemonProcess, conversation: Conversation) -> None:
    fuzz(daemon, conversation, FUZZ_EXAMPLES * 10, FUZZ_EXAMPLES * 5)


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 200_000,
        b'{"a":' * 100_000,
        b'{"jsonrpc":"2.0","id":1,"method":"memory.search","params":{"query":"'
        + b"x" * 60_000
        + b'"}}',
        b"x" * 70_000,  # over max_request_bytes: error, then the connection is closed
        b'{"jsonrpc":"2.0","id":1,"method":"daemon.ping"}' + b"\x00" * 1000,
        b"\xff\xfe" * 1000,
        b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"daemon.ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"memory.get","params":{"workspace":"/","path":"'
        + "．．/".encode() * 300
        + b'"}}',
    ],
    ids=[
        "deep-arrays",
        "deep-objects",
        "big-string",
        "too-long",
        "nul-tail",
        "bad-utf8",
        "huge-id",
        "lookalikes",
    ],
)
def test_hostile_lines_get_an_error_or_a_closed_connection(
    daemon: DaemonProcess, conversation: Conversation, payload: bytes
) -> None:
    conversation.probe(payload)
    assert daemon.running, daemon.stderr()[-3000:]
    with daemon.client() as client:
        assert client.call("daemon.ping") == {"ok": True}


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_a_client_that_never_reads_cannot_grow_the_daemon_without_bound(
    daemon: DaemonProcess,
) -> None:
    ws = project(daemon.home, "bigreply")
    with daemon.client() as client:
        client.call("memory.remember", workspace=str(ws), text="Seed note")
        status = client.call("daemon.status")
    memory_file = (
        daemon.home
        / "memory"
        / next(a["memory_dir"] for a in status["actors"] if a["workspace"] == str(ws))
        / "MEMORY.md"
    )
    line = "- " + "payload " * 60 + "\n"
    memory_file.write_text("# Big\n\n" + line * 4000, encoding="utf-8")  # ~2 MB per reply
    reply_bytes = memory_file.stat().st_size
    request = (
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "memory.get",
                "params": {
                    "workspace": str(ws),
                    "path": memory_file.relative_to(daemon.home / "memory").as_posix(),
                },
            }
        ).encode()
        + b"\n"
    )
    with daemon.client() as client:  # warm up: one reply read in full
        client.request("memory.get", json.loads(request)["params"])
    before = rss(daemon.pid)
    sent = 0
    peak = before
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(str(daemon.socket))
    stalled.setblocking(False)
    try:
        for _ in range(1000):  # pipeline requests, never read a reply
            try:
                stalled.send(request)
                sent += 1
            except BlockingIOError:
                time.sleep(0.01)
            peak = max(peak, rss(daemon.pid))
        with daemon.client() as other:  # the daemon serves others meanwhile
            assert other.call("daemon.ping") == {"ok": True}
        for _ in range(100):
            peak = max(peak, rss(daemon.pid))
            time.sleep(0.02)
    finally:
        stalled.close()
    growth = peak - before
    report(
        "slow_client",
        {"requests_sent": sent, "reply_bytes": reply_bytes, "rss_growth_bytes": growth},
    )
    # At most max_in_flight (64) replies are ever held for one connection.
    assert growth < 64 * reply_bytes * 3 + (64 << 20), (growth, reply_bytes)
    with daemon.client() as client:
        assert client.call("daemon.ping") == {"ok": True}
