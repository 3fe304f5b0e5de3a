"""A hostile environment (issue #17 item 8): a ``XDG_RUNTIME_DIR`` that does not exist is an
error naming it, never created; every directory memoryd creates is 0700, ancestors included,
whatever the umask (on main before #17: the bogus runtime dir was created, its intermediate
directories 0755)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.client import Client
from memoryd.errors import DaemonNotRunning, ReadOnly
from memoryd.store.files import make_private_dirs
from memoryd.store.layout import resolve_workspace


@pytest.fixture
def user_home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="mdx-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def xdg_env(home: Path, **extra: str) -> dict[str, str]:
    """No MEMORYD_* and no XDG_* from this process: paths come from HOME and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEMORYD_", "XDG_")) and k != "NOTIFY_SOCKET"
    }
    env.update(HOME=str(home), MEMORYD_EMBEDDING_PROVIDER="none", PYTHONUNBUFFERED="1", **extra)
    return env


def test_a_missing_xdg_runtime_dir_is_an_error_naming_it_and_is_not_created(
    user_home: Path,
) -> None:
    bogus = user_home / "no" / "such" / "run"
    out = subprocess.run(
        [sys.executable, "-m", "memoryd", "serve", "--foreground"],
        env=xdg_env(user_home, XDG_RUNTIME_DIR=str(bogus)),
        cwd=user_home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1, out
    assert f"XDG_RUNTIME_DIR={bogus} does not exist" in out.stderr
    assert not (user_home / "no").exists()


def test_every_directory_the_daemon_creates_is_0700_under_a_permissive_umask(
    user_home: Path,
) -> None:
    project = user_home / "project"
    project.mkdir()
    before = {p for p in user_home.rglob("*") if p.is_dir()}
    old = os.umask(0o002)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--foreground"],
            env=xdg_env(user_home),
            cwd=user_home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        os.umask(old)
    socket = user_home / ".local" / "state" / "memoryd" / "memoryd.sock"
    try:
        deadline = time.monotonic() + 20
        while not socket.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        with Client(socket, timeout=20) as client:
            client.call("memory.remember", workspace=str(project), text="a note")
            client.call("memory.search", workspace=str(project), query="note")
    finally:
        proc.kill()
        proc.wait(10)
    created = [p for p in user_home.rglob("*") if p.is_dir() and p not in before]
    assert len(created) >= 8, created  # .local, share, memoryd, memory, <ws>, sessions …
    loose = {str(p.relative_to(user_home)): oct(stat.S_IMODE(p.stat().st_mode)) for p in created}
    assert {k: v for k, v in loose.items() if v != "0o700"} == {}


def test_make_private_dirs_makes_every_missing_ancestor_0700(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        make_private_dirs(tmp_path / "a" / "b" / "c")
        make_private_dirs(tmp_path / "a" / "b" / "c")  # existing: nothing to do
    finally:
        os.umask(old)
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    os.chmod(tmp_path / "a", 0o755)  # an existing directory keeps the mode a person chose
    make_private_dirs(tmp_path / "a" / "d")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o755
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        make_private_dirs(tmp_path / "file" / "sub")


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10, check=False)
    return probe.returncode == 0


def answers(socket: Path) -> bool:
    """Whether a daemon answers a ping on ``socket``."""
    try:
        with Client(socket, timeout=5) as client:
            return bool(client.call("daemon.ping"))
    except DaemonNotRunning:
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare (mount namespaces)")
def test_a_read_only_memory_root_serves_search_and_refuses_writes(user_home: Path) -> None:
    """Issue #17 item 6: on main the workspace crash-looped and even search failed."""
    home = user_home / "h"
    root = home / "memory"
    project = user_home / "project"
    project.mkdir()
    ws = resolve_workspace(project, root)
    (ws.dir / "sessions").mkdir(parents=True)
    ws.memory_file.write_text("# Memory\n\n## The lute is kept read-only\n")
    (ws.dir / "sessions" / "2025-01-01-s-0000aaaa.md").write_text("# S\n\nthe viol log\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(MEMORYD_HOME=str(home), MEMORYD_EMBEDDING_PROVIDER="none", PYTHONUNBUFFERED="1")
    env.pop("NOTIFY_SOCKET", None)
    script = (
        f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
        f"exec {sys.executable} -m memoryd serve --foreground"
    )
    with (user_home / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            ["unshare", "-rm", "sh", "-c", script],
            env=env,
            cwd=user_home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    socket = home / "run" / "memoryd.sock"
    try:
        deadline = time.monotonic() + 20
        while not answers(socket):  # the socket file exists a moment before it listens
            assert proc.poll() is None, (user_home / "stderr").read_text()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        with Client(socket, timeout=20) as client:
            hits = client.call("memory.search", workspace=str(project), query="lute")["results"]
            assert [h["path"] for h in hits] == [f"{ws.dir.name}/MEMORY.md"]
            assert client.call("memory.search", workspace=str(project), query="viol")["results"]
            for scope in ("workspace", "global"):
                with pytest.raises(ReadOnly):
                    client.call("memory.remember", workspace=str(project), text="no", scope=scope)
            with pytest.raises(ReadOnly):
                client.call("session.open", workspace=str(project), session_id="s1")
            time.sleep(1.5)  # no crash loop: still running, no failures
            (actor,) = client.call("daemon.status")["actors"]
            assert actor["state"] == "running" and actor["failures"] == 0
            assert "Read-only file system" in actor["read_only"]
            assert client.call("memory.search", workspace=str(project), query="lute")["results"]
        assert not (ws.dir / "index.sqlite").exists()  # nothing was written there
    finally:
        proc.kill()
        proc.wait(10)
