"""`memoryd mcp` driven by the MCP SDK's own client over stdio, against a live daemon.

Each test spawns ``python -m memoryd mcp -w <project>`` (``MEMORYD_HOME`` set) through
:func:`mcp.client.stdio.stdio_client` and runs a real daemon in this event loop
(:func:`~tests.runtime.daemon_fixtures.in_process_daemon`), which a test may stop and start
again while the bridge keeps running. The chat model behind ``memory_flush`` is a tiny
OpenAI-compatible HTTP stub on 127.0.0.1 (the model boundary). Skipped, with the reason, when
the SDK (the ``mcp`` extra) is not installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
)

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

pytestmark = pytest.mark.anyio


def _sdk_missing() -> bool:
    try:
        import mcp  # noqa: F401
    except ModuleNotFoundError:
        return True
    return False


needs_sdk = pytest.mark.skipif(
    _sdk_missing(),
    reason="the MCP SDK is not installed: pip install -e '.[mcp]' (the `mcp` extra)",
)

FLUSH_ANSWER = "## Widget cache\n\nWarm the widget cache before the integration tests run.\n"


@asynccontextmanager
async def bridge(
    home: Path, workspace: Path, *, mode: str = "auto", in_cwd: bool = False
) -> AsyncIterator[Client]:
    """An MCP client session with ``memoryd mcp -w workspace`` over stdio.

    ``in_cwd``: start it in the workspace without ``-w``, as most clients do.
    """
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp"] + ([] if in_cwd else ["-w", str(workspace)]),
        env={"MEMORYD_HOME": str(home), "PYTHONUNBUFFERED": "1"},
        cwd=str(workspace if in_cwd else home),
    )
    with (home / "bridge.stderr").open("a", encoding="utf-8") as errlog:
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, mode=mode, read_timeout_seconds=30) as client:
            yield client


def text_of(result: CallToolResult) -> str:
    [block] = result.content
    assert block.type == "text"
    return block.text


async def ok(client: Client, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    return text_of(result), result.structured_content


async def failed(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} {arguments} did not fail: {text_of(result)}"
    return text_of(result)


@pytest.fixture
def chat_stub() -> Iterator[str]:
    """An OpenAI-compatible chat completions endpoint that always answers FLUSH_ANSWER."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.dumps({"choices": [{"message": {"content": FLUSH_ANSWER}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --------------------------------------------------------------------------- tools


@needs_sdk
async def test_lists_four_tools_whose_schemas_and_descriptions_guide_a_model(home: Path) -> None:
    # The initialize handshake most clients use today; the other tests negotiate ("auto").
    async with bridge(home, project(home, "app"), mode="legacy") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == ["memory_flush", "memory_get", "memory_remember", "memory_search"]
    arguments = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert arguments == {
        "memory_search": {"query", "max_results", "min_score"},
        "memory_get": {"path", "from", "lines"},
        "memory_remember": {"text", "scope"},
        "memory_flush": {"session_id"},
    }
    required = {name: set(tool.input_schema.get("required", [])) for name, tool in tools.items()}
    assert required == {
        "memory_search": {"query"},
        "memory_get": {"path"},
        "memory_remember": {"text"},
        "memory_flush": set(),  # without it: the workspace's most recent open session
    }
    assert tools["memory_remember"].input_schema["properties"]["scope"]["enum"] == [
        "workspace",
        "global",
    ]
    for tool in tools.values():
        assert tool.description and "Use it" in tool.description  # when to use it
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert tool.annotations is not None
    assert tools["memory_search"].annotations.read_only_hint is True
    assert tools["memory_remember"].annotations.read_only_hint is False


@needs_sdk
async def test_every_tool_answers_readable_text_and_structured_content(
    home: Path, chat_stub: str
) -> None:
    ws = project(home, "shop")
    config = f'[llm]\nbase_url = "{chat_stub}"\nmodel = "stub"\napi_key_env = ""\n'
    async with in_process_daemon(config=config) as d, bridge(home, ws) as client:
        # An older session log (dated by its file name), there before the workspace starts.
        sessions = resolve_workspace(ws, d.root).sessions_dir
        sessions.mkdir(parents=True)
        old_day = (datetime.now(UTC) - timedelta(days=10)).date().isoformat()
        (sessions / f"{old_day}-webhooks-0badcafe.md").write_text(
            "## Webhook retries\n\nThe webhooks retries were 3 before the payments fix.\n",
            encoding="utf-8",
        )

        text, saved = await ok(
            client, "memory_remember", text="The payments service retries webhooks 5 times"
        )
        assert saved["written"] is True and saved["scope"] == "workspace"
        assert saved["path"].endswith("/MEMORY.md") and saved["path"] in text
        _, global_saved = await ok(
            client, "memory_remember", text="Prefer ruff over flake8", scope="global"
        )
        assert global_saved["path"] == "MEMORY.md"

        text, found = await ok(client, "memory_search", query="webhooks retries", max_results=5)
        assert found["workspace"] == str(ws) and found["mode"] == "fts_only"
        by_source = {hit["source"]: hit for hit in found["results"]}
        curated, session = by_source["workspace"], by_source["session"]
        assert curated["path"] == saved["path"] and curated["age_days"] is None
        assert 10 <= session["age_days"] < 12
        assert f"{curated['path']}, line" in text and f"score {curated['score']:.2f}" in text
        assert "project memory" in text
        assert re.search(r"session log, 1[01] days old", text)
        assert "retries webhooks 5 times" in text  # the snippet
        assert "memory_get" in text  # how to read on

        text, got = await ok(client, "memory_get", path=curated["path"], **{"from": 1}, lines=2)
        assert got["start_line"] == 1 and got["end_line"] == 2 and got["total_lines"] >= 3
        assert got["text"].splitlines()[0] in text
        assert re.search(r"^1  \S", text, re.M) and re.search(r"^2\b", text, re.M)
        assert "from=3" in text

        sid = "flush-7f3a2b1c"
        await d.call("session.open", workspace=str(ws), session_id=sid)
        messages = [
            {"role": "user", "content": "Why do the integration tests time out?"},
            {"role": "assistant", "content": "The widget cache is cold; warming it fixes it."},
        ]
        await d.call("session.append", session_id=sid, messages=messages)
        text, flushed = await ok(client, "memory_flush", session_id=sid)
        assert flushed["outcome"] == "written" and flushed["session_id"] == sid
        assert "/sessions/" in flushed["path"] and flushed["path"] in text
        _, found = await ok(client, "memory_search", query="widget cache warm")
        assert found["results"][0]["path"] == flushed["path"]


@needs_sdk
async def test_bad_arguments_and_refusals_are_tool_errors_naming_the_problem(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d, bridge(home, ws) as client:
        assert "'query'" in await failed(client, "memory_search")
        assert "'max_results'" in await failed(client, "memory_search", query="x", max_results=0)
        assert "'min_score'" in await failed(client, "memory_search", query="x", min_score=2)
        assert "'from'" in await failed(client, "memory_get", path="MEMORY.md", **{"from": 0})
        assert "'scope'" in await failed(client, "memory_remember", text="x", scope="team")
        assert "unknown argument 'limit'" in await failed(
            client, "memory_search", query="x", limit=3
        )
        assert "Unknown tool" in await failed(client, "memory_forget")

        refused = await failed(client, "memory_get", path="../../etc/passwd")
        assert "path_outside_memory" in refused
        unknown = await failed(client, "memory_flush", session_id="never-opened")
        assert "never-opened" in unknown
        assert "no open session in workspace" in await failed(client, "memory_flush")
        await d.call("session.open", workspace=str(ws), session_id="no-model-1")
        assert "model_not_configured" in await failed(
            client, "memory_flush", session_id="no-model-1"
        )
        # without a session id: the workspace's most recent session (here the only one)
        assert "model_not_configured" in await failed(client, "memory_flush")
        _, found = await ok(client, "memory_search", query="anything at all")
        assert found["results"] == []  # the bridge still works after every error


@needs_sdk
async def test_without_a_daemon_tools_say_so_and_work_again_once_it_is_back(home: Path) -> None:
    ws = project(home, "app")
    socket = home / "run" / "memoryd.sock"
    async with bridge(home, ws, in_cwd=True) as client:
        message = await failed(client, "memory_search", query="anything")
        assert "memoryd is not running" in message and "memoryd serve" in message
        assert not socket.exists()  # the bridge started no daemon
        assert not [p async for p in anyio.Path(home).rglob("index.sqlite")]  # nor an index

        async with in_process_daemon() as d:
            _, saved = await ok(client, "memory_remember", text="Deploys go through the blue pool")
            assert (d.root / saved["path"]).is_file()

        stopped = await failed(client, "memory_search", query="blue pool")
        assert "not running" in stopped or "closed the connection" in stopped
        assert "memoryd serve" in stopped

        async with in_process_daemon():
            text, found = await ok(client, "memory_search", query="blue pool")
            assert found["results"] and "blue pool" in text
            assert found["workspace"] == str(ws)  # the directory it was started in


@needs_sdk
def test_age_notes_read_naturally() -> None:
    from memoryd.mcp_bridge import age_note

    assert [age_note(d) for d in (None, 0.0, 0.9, 1.0, 1.99, 12.5)] == [
        "age unknown",
        "from today",
        "from today",
        "1 day old",
        "1 day old",
        "12 days old",
    ]


def test_the_cli_says_how_to_install_the_sdk_when_it_is_missing(home: Path) -> None:
    """With the SDK hidden, `memoryd mcp` fails with the extra to install (exit 1)."""
    blocker = home / "blocker"
    blocker.mkdir()
    (blocker / "mcp.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    env = {**os.environ, "MEMORYD_HOME": str(home), "PYTHONPATH": str(blocker)}
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "mcp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1
    assert "pip install 'memoryd[mcp]'" in done.stderr
    assert done.stdout == ""


@needs_sdk
def test_a_workspace_that_is_not_a_directory_fails_at_start(home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "mcp", "-w", str(home / "nowhere")],
        env={**os.environ, "MEMORYD_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1
    assert "nowhere" in done.stderr and "not a directory" in done.stderr
    assert done.stdout == ""  # stdout belongs to the protocol
