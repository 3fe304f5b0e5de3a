"""Security (SPEC §11, §15, issue 9 item 6) of a daemon process.

- Another uid cannot talk to the daemon: a child dropped to uid 65534 (``nobody``; the test
  runs as root, else it is skipped) cannot connect through the private directory, and even
  with the directory and socket opened up it is disconnected unanswered (``SO_PEERCRED``).
- No client path reaches outside the memory root or the workspace's own files: ``..``,
  absolute paths, symlinks, NUL, very long paths, full-width dots, percent-encoding,
  backslashes — for ``memory.get``; session ids and workspaces that look like paths create
  nothing outside the memory root.
- Everything the daemon creates — memory root, workspace, sessions, ``.live``, ``.history``,
  journals, logs, backups, lock, index files, registry, socket directory, socket and its lock —
  is owner-only even under a permissive umask.
- The daemon refuses to start on a socket directory writable by others, naming it.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.errors import MemorydError
from memoryd.store.layout import resolve_workspace
from tests.reliability.harness import report
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    project,
    write_config,
)
from tests.support.fake_llm import FakeLLM, echo_dream

NOBODY = 65534
#: The child that drops to ``nobody`` needs an interpreter ``nobody`` can run (a virtualenv
#: under /root is not); it only uses the standard library.
SYSTEM_PYTHON = next(
    (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)),
    sys.executable,
)
FIGURES = {"hostile_paths_refused": 0, "entries_checked": 0}


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    write_config(home, '[embedding]\nprovider = "none"\n[dream]\nmin_hours = 0\nmin_sessions = 1\n')
    old = os.umask(0o002)  # permissive: whatever is private, the daemon made it so
    try:
        with FakeLLM(respond=echo_dream) as llm:
            process = DaemonProcess(home, env=llm.env()).start()
            try:
                yield process
            finally:
                process.kill()
    finally:
        os.umask(old)


def connect_as(uid: int, sock: Path) -> dict[str, object]:
    """Try to ping the daemon from a child process running as ``uid``."""
    code = f"""
import json, os, socket, sys
os.setgroups([]); os.setgid({uid}); os.setuid({uid})
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect({str(sock)!r})
except OSError as exc:
    print(json.dumps({{"connected": False, "error": exc.__class__.__name__}})); sys.exit()
try:
    s.sendall(b'{{"jsonrpc":"2.0","id":1,"method":"daemon.ping"}}\\n')
    data = s.recv(4096)
except OSError as exc:
    data = exc.__class__.__name__.encode()
print(json.dumps({{"connected": True, "reply": data.decode(errors="replace")}}))
"""
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root")
@pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED is Linux")
def test_another_uid_cannot_connect_or_get_an_answer(daemon: DaemonProcess) -> None:
    refused = connect_as(NOBODY, daemon.socket)
    assert refused == {"connected": False, "error": "PermissionError"}, refused
    run_dir = daemon.socket.parent
    try:  # open everything up: the peer-credential check still refuses
        os.chmod(daemon.home, 0o755)
        os.chmod(run_dir, 0o755)
        os.chmod(daemon.socket, 0o777)
        answered = connect_as(NOBODY, daemon.socket)
    finally:
        os.chmod(run_dir, 0o700)
        os.chmod(daemon.socket, 0o600)
    # Closed unanswered (a reset or a broken pipe, depending on when it closed).
    assert answered["connected"] is True, answered
    assert answered["reply"] in ("", "ConnectionResetError", "BrokenPipeError"), answered
    with daemon.client() as client:
        assert client.call("daemon.ping") == {"ok": True}


HOSTILE_PATHS = [
    "../MEMORY.md",
    "../../etc/passwd",
    "{ws}/../../MEMORY.md",
    "{ws}/../other-12345678/MEMORY.md",
    "/etc/passwd",
    "{root}/MEMORY.md",
    "//etc/passwd",
    "{ws}/sessions/../../../x.md",
    "{ws}\\..\\..\\MEMORY.md",
    "．．/．．/etc/passwd",
    "{ws}/．．/．．/MEMORY.md",
    "%2e%2e/%2e%2e/etc/passwd",
    "{ws}/%2e%2e/%2e%2e/secret.md",
    "{ws}/sessions/escape.md",  # a symlink to a file outside
    "{ws}/linked/MEMORY.md",  # a symlinked directory outside
    "{ws}/MEMORY.md\x00.txt",
    "{ws}/" + "a/" * 600 + "x.md",
    "{ws}/index.sqlite",
    "{ws}/.dream-lock",
    "{ws}/sessions/.live/s.jsonl",
    "workspaces.json",
    "{ws}/..",
    "..",
    ".",
    "",
    "~/.ssh/id_rsa",
    "{ws}/\u2024\u2024/\u2024\u2024/secret.md",
    "{ws}/\uff0e\uff0e\u2215secret.md",
]


def test_no_client_path_reaches_outside_the_memory_root(daemon: DaemonProcess, home: Path) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    outside = home / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("## Secret\n\nsecret-canary\n", encoding="utf-8")
    with daemon.client() as client:
        client.call("memory.remember", workspace=str(path), text="Inside note")
        (ws.sessions_dir / "escape.md").symlink_to(outside / "secret.md")
        (ws.dir / "linked").symlink_to(outside, target_is_directory=True)
        before = sorted(p for p in home.rglob("*") if "memory" not in p.parts)
        for template in HOSTILE_PATHS:
            rel = template.format(ws=ws.key.dirname, root=home / "memory")
            with pytest.raises(MemorydError) as raised:
                client.call("memory.get", workspace=str(path), path=rel)
            # not_found: it stayed inside this workspace's memory (e.g. a directory really
            # named "．．") and there is no such file.
            assert raised.value.code in ("path_outside_memory", "invalid_params", "not_found"), (
                rel,
                raised.value,
            )
            FIGURES["hostile_paths_refused"] += 1
        assert client.call("memory.get", workspace=str(path), path=f"{ws.key.dirname}/MEMORY.md")
        found = client.call("memory.search", workspace=str(path), query="canary")
        assert found["results"] == [], found  # the symlinked file is never indexed
        for sid in ("../../../../outside/evil", "/tmp/evil", "..", "a/../../b", "\u2025/x"):
            client.call("session.open", workspace=str(path), session_id=sid)
            msgs = [{"role": "user", "content": "escape attempt number one two three"}]
            client.call("session.append", session_id=sid, messages=msgs)
            client.call("session.close", session_id=sid)
        for bad_ws in ("relative/dir", str(outside / "secret.md"), "/nonexistent/x"):
            with pytest.raises(MemorydError) as raised:
                client.call("memory.remember", workspace=bad_ws, text="nope")
            assert raised.value.code in ("invalid_params", "workspace_not_found"), raised.value
            FIGURES["hostile_paths_refused"] += 1
    after = sorted(p for p in home.rglob("*") if "memory" not in p.parts)
    new = [p for p in after if p not in before and not p.name.startswith("daemon")]
    assert new == [], new  # nothing was created outside the memory root
    assert (outside / "secret.md").read_text(encoding="utf-8") == "## Secret\n\nsecret-canary\n"
    report("security", dict(FIGURES))


def test_everything_the_daemon_creates_is_owner_only(daemon: DaemonProcess, home: Path) -> None:
    path = project(home, "app")
    ws = resolve_workspace(path, home / "memory")
    with daemon.client() as client:
        client.call("memory.remember", workspace=str(path), text="Private note")
        client.call("memory.remember", workspace=str(path), text="Global note", scope="global")
        client.call("session.open", workspace=str(path), session_id="perm-1")
        msgs = [
            {"role": "user", "content": f"message number {i} about permissions"} for i in range(4)
        ]
        client.call("session.append", session_id="perm-1", messages=msgs)
        client.call("session.close", session_id="perm-1")  # summary log written
        client.call("session.open", workspace=str(path), session_id="perm-2")  # journal open
        client.call("session.append", session_id="perm-2", messages=msgs[:1])
        assert client.call("dream.run", workspace=str(path))["outcome"] == "written"
        client.call("memory.search", workspace=str(path), query="private")
        made = [
            ws.dir.parent,
            ws.dir,
            ws.sessions_dir,
            ws.live_dir,
            ws.history_dir,
            ws.memory_file,
            ws.index_path,
            Path(f"{ws.index_path}-wal"),
            Path(f"{ws.index_path}-shm"),
            ws.lock_path,
            ws.history_dir / "dreams.jsonl",
            home / "memory" / "MEMORY.md",
            daemon.socket.parent,
            daemon.socket,
            Path(f"{daemon.socket}.lock"),
            *ws.live_dir.glob("*.jsonl"),
            *ws.sessions_dir.glob("*.md"),
            *ws.history_dir.glob("MEMORY.*.md"),
        ]
        loose = []
        for entry in made:
            assert entry.exists(), entry
            mode = stat.S_IMODE(entry.lstat().st_mode)
            FIGURES["entries_checked"] += 1
            if mode & 0o077:
                loose.append(f"{entry.relative_to(home)} {mode:o}")
        for entry in (home / "memory").rglob("*"):  # and anything else under the root
            mode = stat.S_IMODE(entry.lstat().st_mode)
            if mode & 0o077 and not entry.is_symlink():
                loose.append(f"{entry.relative_to(home)} {mode:o}")
        assert not loose, loose
    report("security", dict(FIGURES))


def test_the_daemon_refuses_a_socket_directory_writable_by_others(home: Path) -> None:
    write_config(home, '[embedding]\nprovider = "none"\n')
    run_dir = home / "run"
    run_dir.mkdir()
    os.chmod(run_dir, 0o777)
    process = DaemonProcess(home).spawn()
    try:
        code = process.wait(30)
    finally:
        process.kill()
    assert code != 0
    message = process.stderr()
    assert str(run_dir) in message and "writable by group or others" in message, message
    assert not (run_dir / "memoryd.sock").exists()
    with pytest.raises(OSError):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(run_dir / "memoryd.sock"))
        finally:
            s.close()
