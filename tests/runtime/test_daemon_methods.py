"""Every method of issue 3 item 3 over a real socket to a real in-process daemon.

Shapes of SPEC §11, pipelining, parameter errors that name the parameter, workspace errors,
and the confinement and line windows of ``memory.get`` (issue 3 item 5).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memoryd import __version__
from memoryd.errors import InvalidParams, PathOutsideMemory, WorkspaceNotFound
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    exchange,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    project,
    rpc,
)

pytestmark = pytest.mark.anyio

INVALID_PARAMS = -32602


async def remember(d: RunningDaemon, workspace: Path, text: str, scope: str = "workspace") -> str:
    result = await d.call("memory.remember", workspace=str(workspace), text=text, scope=scope)
    assert result["written"] is True
    path: str = result["path"]
    return path


async def test_memory_methods_round_trip_over_the_socket(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        assert await d.call("daemon.ping") == {"ok": True}
        path = await remember(d, ws, "The build uses meson with ninja as the backend")
        assert path.endswith("/MEMORY.md") and not path.startswith("/")
        assert (d.root / path).read_text().count("meson with ninja") == 1

        found = await d.search(ws, "meson backend")
        assert found["mode"] == "fts_only"
        assert isinstance(found["took_ms"], float) and "synced_paths" in found
        [hit] = found["results"]
        assert hit["path"] == path and hit["source"] == "workspace"
        assert "meson with ninja" in hit["snippet"]
        assert 1 <= hit["start_line"] <= hit["end_line"]

        got = await d.call("memory.get", workspace=str(ws), path=path)
        assert "meson with ninja" in got["text"]
        assert got["path"] == path and got["start_line"] == 1
        assert got["total_lines"] == len(got["text"].splitlines())

        files = (await d.call("memory.files", workspace=str(ws)))["files"]
        [entry] = [f for f in files if f["path"] == path]
        assert entry["chunks"] >= 1 and entry["size"] == (d.root / path).stat().st_size

        stats = await d.call("index.stats", workspace=str(ws))
        assert stats["files"] >= 1 and stats["chunks"] >= 1 and stats["fts5"] is True

        reindexed = await d.call("index.reindex", workspace=str(ws))
        assert reindexed["files"] >= 1 and reindexed["changed"] == 0
        assert (await d.search(ws, "meson"))["results"][0]["path"] == path


async def test_global_memory_is_shared_by_every_workspace(home: Path) -> None:
    a, b = project(home, "a"), project(home, "b")
    async with in_process_daemon() as d:
        path = await remember(d, a, "Prefer tabs over spaces everywhere", scope="global")
        assert path == "MEMORY.md"
        [hit] = (await d.search(b, "tabs spaces"))["results"]
        assert hit["path"] == "MEMORY.md" and hit["source"] == "global"
        got = await d.call("memory.get", workspace=str(b), path="MEMORY.md")
        assert "Prefer tabs" in got["text"]


async def test_status_reports_daemon_actors_and_indexes(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        await remember(d, ws, "Status should show this workspace")
        await d.search(ws, "workspace")
        status = await d.status()
        assert status["version"] == __version__
        assert status["pid"] == os.getpid()
        assert status["rss_bytes"] > 1_000_000
        assert status["loop"] == "asyncio"
        assert status["uptime_secs"] >= 0
        assert status["socket"] == str(d.socket)
        assert "embedding_provider" in status and status["embedding_provider"] is None
        [actor] = status["actors"]
        assert actor["workspace"] == str(ws)
        assert actor["state"] == "running"
        assert actor["watcher"] == "watching"
        assert isinstance(actor["dirty"], int)
        assert actor["last_search"]["mode"] == "fts_only"
        assert actor["last_search"]["took_ms"] >= 0
        assert actor["index"]["files"] >= 1 and actor["index"]["chunks"] >= 1
        assert "embedding_provider" in actor["index"]
        assert actor["failures"] == 0


async def test_status_shows_the_hash_provider_when_configured(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon(config='[embedding]\nprovider = "hash"\ndimensions = 64\n') as d:
        await remember(d, ws, "vectors for everyone")
        found = await d.search(ws, "vectors")
        assert found["mode"] == "hybrid"
        status = await d.status()
        assert status["embedding_provider"] == "hash-64"
        assert status["actors"][0]["index"]["embedding_provider"] == "hash-64"


async def test_pipelined_requests_are_answered_with_their_ids(home: Path) -> None:
    ws = str(project(home, "app"))
    async with in_process_daemon() as d:
        await remember(d, project(home, "app"), "pipelining keeps one connection busy")
        payload = b"".join(
            [
                rpc(1, "daemon.ping"),
                rpc("two", "memory.search", {"workspace": ws, "query": "pipelining"}),
                rpc(3, "memory.files", {"workspace": ws}),
                rpc(4, "memory.search", {"workspace": ws, "query": 7}),
                rpc(None, "daemon.ping"),  # a notification: no reply
                rpc(5, "no.such.method"),
                rpc(6, "daemon.status"),
            ]
        )
        replies = {r["id"]: r for r in await exchange(d.socket, payload, 6)}
        assert set(replies) == {1, "two", 3, 4, 5, 6}
        assert all(r["jsonrpc"] == "2.0" for r in replies.values())
        assert replies[1]["result"] == {"ok": True}
        assert "pipelining" in replies["two"]["result"]["results"][0]["snippet"]
        assert replies[3]["result"]["files"]
        assert replies[4]["error"]["code"] == INVALID_PARAMS
        assert replies[5]["error"]["code"] == -32601
        assert replies[6]["result"]["pid"] == os.getpid()


async def test_a_batch_is_answered_per_member_with_plain_error_data(home: Path) -> None:
    ws = str(project(home, "app"))
    async with in_process_daemon() as d:
        members = [
            {"jsonrpc": "2.0", "id": 1, "method": "memory.remember",
             "params": {"workspace": ws, "text": "batches answer each member"}},
            {"jsonrpc": "2.0", "id": 2, "method": "memory.search",
             "params": {"workspace": ws, "query": "batches"}},
            {"jsonrpc": "2.0", "id": 3, "method": "memory.search",
             "params": {"workspace": "/nonexistent/dir", "query": "x"}},
            {"jsonrpc": "2.0", "id": 4, "method": "memory.get",
             "params": {"workspace": ws, "path": "../x"}},
        ]  # fmt: skip
        [replies] = await exchange(d.socket, json.dumps(members).encode() + b"\n", 1)
        by_id = {reply["id"]: reply for reply in replies}
        assert by_id[1]["result"]["written"] is True
        # members run in order: the search sees the note remembered just before it
        assert "batches answer" in by_id[2]["result"]["results"][0]["snippet"]
        assert by_id[3]["error"]["data"] == {
            "code": "workspace_not_found",
            "path": "/nonexistent/dir",  # as sent, not "'/nonexistent/dir'"
        }
        assert by_id[4]["error"]["data"] == {"code": "path_outside_memory", "path": "../x"}


async def test_pipelined_writes_apply_in_order_and_a_later_read_sees_them(home: Path) -> None:
    ws = str(project(home, "app"))
    notes = [f"pipelined note {n:02d}" for n in range(30)]
    async with in_process_daemon() as d:  # the first write also starts the actor
        payload = b"".join(
            rpc(n, "memory.remember", {"workspace": ws, "text": note})
            for n, note in enumerate(notes)
        )
        path_request = rpc("files", "memory.files", {"workspace": ws})
        replies = {r["id"]: r for r in await exchange(d.socket, payload + path_request, 31)}
        [entry] = [f for f in replies["files"]["result"]["files"] if f["path"] != "MEMORY.md"]
        text = (d.root / entry["path"]).read_text()
        written = [line.removeprefix("## ") for line in text.splitlines() if "pipelined" in line]
        assert written == notes
        assert entry["size"] == len(text.encode())  # the read came after every write


WS = "<ws>"
BAD_PARAMS = [
    ("memory.search", {"workspace": WS, "query": 5}, "query"),
    ("memory.search", {"workspace": WS, "query": "x", "max_results": "3"}, "max_results"),
    ("memory.search", {"workspace": WS, "query": "x", "max_results": 0}, "max_results"),
    ("memory.search", {"workspace": WS, "query": "x", "min_score": "high"}, "min_score"),
    ("memory.search", {"workspace": WS, "query": "x", "sources": "workspace"}, "sources"),
    ("memory.search", {"workspace": WS, "query": "x", "sources": ["team"]}, "sources"),
    ("memory.search", {"workspace": WS, "query": "x", "limit": 3}, "limit"),
    ("memory.search", {"workspace": 42, "query": "x"}, "workspace"),
    ("memory.get", {"workspace": WS, "path": 1}, "path"),
    ("memory.get", {"workspace": WS, "path": "MEMORY.md", "from": "2"}, "from"),
    ("memory.get", {"workspace": WS, "path": "MEMORY.md", "from": 0}, "from"),
    ("memory.get", {"workspace": WS, "path": "MEMORY.md", "lines": 1.5}, "lines"),
    ("memory.remember", {"workspace": WS, "text": None}, "text"),
    ("memory.remember", {"workspace": WS, "text": "x", "scope": "team"}, "scope"),
    ("memory.files", {"workspace": [WS]}, "workspace"),
    ("index.reindex", {"workspace": WS, "embeddings": "yes"}, "embeddings"),
    ("index.stats", {"workspace": WS, "verbose": True}, "verbose"),
    ("daemon.status", {"verbose": True}, "verbose"),
]


def fill(params: dict[str, Any], ws: str) -> dict[str, Any]:
    return {k: ws if v == WS else v for k, v in params.items()}


@pytest.mark.parametrize(("method", "params", "name"), BAD_PARAMS)
async def test_wrong_parameter_types_are_invalid_params_naming_the_parameter(
    home: Path, method: str, params: dict[str, Any], name: str
) -> None:
    ws = str(project(home, "app"))
    async with in_process_daemon() as d:
        [reply] = await exchange(d.socket, rpc(9, method, fill(params, ws)), 1)
        assert reply["id"] == 9
        error = reply["error"]
        assert error["code"] == INVALID_PARAMS
        assert error["data"]["code"] == "invalid_params"
        assert error["data"]["param"] == name
        assert f"'{name}'" in error["message"]
        assert await d.call("daemon.ping") == {"ok": True}


WORKSPACE_METHODS = [
    ("memory.search", {"query": "x"}),
    ("memory.get", {"path": "MEMORY.md"}),
    ("memory.remember", {"text": "x"}),
    ("memory.files", {}),
    ("index.stats", {}),
    ("index.reindex", {}),
]


@pytest.mark.parametrize(("method", "params"), WORKSPACE_METHODS)
async def test_workspace_errors_of_every_workspace_method(
    home: Path, method: str, params: dict[str, Any]
) -> None:
    async with in_process_daemon() as d:
        with pytest.raises(InvalidParams) as missing:
            await d.request(method, params)
        assert missing.value.data["param"] == "workspace"
        assert "missing parameter 'workspace'" in str(missing.value)

        with pytest.raises(InvalidParams) as relative:
            await d.request(method, {**params, "workspace": "projects/app"})
        assert relative.value.data["param"] == "workspace"
        assert "absolute" in str(relative.value)

        with pytest.raises(WorkspaceNotFound):
            await d.request(method, {**params, "workspace": str(home / "nowhere")})
        a_file = home / "file.txt"
        a_file.write_text("not a directory")
        with pytest.raises(WorkspaceNotFound):
            await d.request(method, {**params, "workspace": str(a_file)})

        assert (await d.status())["actors"] == []  # nothing started for bad workspaces


# --------------------------------------------------------------------------- memory.get


async def test_memory_get_refuses_paths_outside_this_workspaces_memory(home: Path) -> None:
    ws, other = project(home, "app"), project(home, "other")
    secret = home / "secret.md"
    secret.write_text("# secret\nthe password is hunter2\n")
    async with in_process_daemon() as d:
        mine = await remember(d, ws, "my own note")
        theirs = await remember(d, other, "another workspace's private note")
        my_dir = mine.split("/")[0]
        link = d.root / my_dir / "sessions" / "2025-01-01-leak.md"
        link.symlink_to(secret)
        dir_link = d.root / my_dir / "sessions" / "escape"
        dir_link.symlink_to(home)

        refused = [
            "../secret.md",
            f"{my_dir}/../{theirs}",
            f"{my_dir}/sessions/../../{theirs}",
            str(secret),
            "/etc/passwd",
            f"{my_dir}/sessions/2025-01-01-leak.md",
            f"{my_dir}/sessions/escape/secret.md",
            theirs,
            f"{my_dir}/index.sqlite",
        ]
        for path in refused:
            with pytest.raises(PathOutsideMemory) as caught:
                await d.call("memory.get", workspace=str(ws), path=path)
            assert caught.value.code == "path_outside_memory", path
            assert "hunter2" not in str(caught.value.data)

        # What is refused above is fine for its own workspace, and the daemon is unharmed.
        got = await d.call("memory.get", workspace=str(other), path=theirs)
        assert "private note" in got["text"]
        assert "my own note" in (await d.call("memory.get", workspace=str(ws), path=mine))["text"]


async def test_memory_get_returns_one_based_line_windows(home: Path) -> None:
    ws = project(home, "app")
    async with in_process_daemon() as d:
        path = await remember(d, ws, "placeholder")
        lines = [f"line {n}" for n in range(1, 11)]
        (d.root / path).write_text("\n".join(lines) + "\n")

        async def get(**window: int) -> dict[str, Any]:
            result: dict[str, Any] = await d.request(
                "memory.get", {"workspace": str(ws), "path": path, **window}
            )
            return result

        whole = await get()
        assert whole["text"].splitlines() == lines
        assert (whole["start_line"], whole["total_lines"]) == (1, 10)

        window = await get(**{"from": 3, "lines": 2})
        assert window["text"] == "line 3\nline 4\n"
        assert (window["start_line"], window["total_lines"]) == (3, 10)

        tail = await get(**{"from": 9})
        assert tail["text"] == "line 9\nline 10\n" and tail["start_line"] == 9

        first = await get(lines=1)
        assert first["text"] == "line 1\n" and first["start_line"] == 1

        past = await get(**{"from": 50, "lines": 5})
        assert past["text"] == "" and past["total_lines"] == 10


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
)
async def test_status_reports_uvloop_when_the_daemon_runs_on_it(home: Path) -> None:
    pytest.importorskip("uvloop")
    ws = project(home, "app")
    async with in_process_daemon(loop="uvloop") as d:
        await remember(d, ws, "works the same on uvloop")
        assert (await d.search(ws, "uvloop"))["results"] != []
        assert (await d.status())["loop"] == "uvloop"
