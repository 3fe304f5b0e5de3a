"""After a realistic run (detached `memoryd serve`, remember, search with an OpenAI-compatible
embedding server, a session flushed by a chat model, dream, reindex), every file memoryd
created is 0600 and every directory 0700, the embedding cache included; and with the memory
root kept in git, the `.gitignore` memoryd wrote leaves only the markdown to commit."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

from memoryd.client import Client
from tests.runtime.daemon_fixtures import (
    cli_env,
    home_fixture,  # noqa: F401 - the `home` fixture
    project,
    write_config,
)
from tests.support.fake_embeddings import EmbeddingServer
from tests.support.fake_llm import FakeLLM, echo_dream

FLUSH_ANSWER = "## Decisions\n\nThe permissions of every file stay owner-only.\n"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def _memoryd(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        env={**cli_env(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _realistic_run(home: Path, env: dict[str, str], llm: FakeLLM) -> None:
    ws = project(home, "app")
    started = _memoryd(home, env, "serve")
    assert started.returncode == 0, started.stderr
    match = re.search(r"pid (\d+)", started.stdout)
    assert match
    pid = int(match.group(1))
    try:
        for args in (
            ("remember", "Deploys go through the staging cluster first", "-w", str(ws)),
            ("remember", "Use pnpm everywhere", "--global", "-w", str(ws)),
            ("search", "staging deploys", "-w", str(ws)),
            ("reindex", "--embeddings", "-w", str(ws)),
        ):
            done = _memoryd(home, env, *args)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        with Client(home / "run" / "memoryd.sock", timeout=30) as client:
            client.call("session.open", workspace=str(ws), session_id="modes-1")
            msgs = [
                {"role": "user", "content": f"message {i} about file permissions"} for i in range(4)
            ]
            client.call("session.append", session_id="modes-1", messages=msgs)
            llm.queue(FLUSH_ANSWER)
            assert client.call("session.flush", session_id="modes-1")["outcome"] == "written"
            client.call("session.close", session_id="modes-1")
            client.call("session.open", workspace=str(ws), session_id="modes-2")  # a live journal
            client.call("session.append", session_id="modes-2", messages=msgs[:1])
            assert client.call("dream.run", workspace=str(ws), force=True)["outcome"] == "written"
            client.call("memory.search", workspace=str(ws), query="permissions")
            status = client.call("daemon.status")
            assert status["embedding_error"] is None
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)


def test_everything_memoryd_creates_is_private_and_git_sees_only_the_markdown(
    home: Path,
) -> None:
    root = home / "memory"
    root.mkdir(mode=0o700)
    _git(root, "init", "-q")
    user_lines = "scratch/\n"
    (root / ".gitignore").write_text(user_lines)  # the user's own file: merged, not replaced
    os.chmod(root / ".gitignore", 0o600)
    write_config(home, "[dream]\nmin_hours = 0\nmin_sessions = 1\n")
    before = set(home.rglob("*"))
    old_umask = os.umask(0o022)  # the usual umask: files would be 0644 unless memoryd says so
    try:
        with EmbeddingServer() as embeddings, FakeLLM(respond=echo_dream) as llm:
            env = {
                **llm.env(),
                "MEMORYD_EMBEDDING_PROVIDER": "openai",
                "MEMORYD_EMBEDDING_BASE_URL": embeddings.base_url,
                "MEMORYD_EMBEDDING_MODEL": "mini",
            }
            _realistic_run(home, env, llm)
            assert embeddings.texts > 0  # the cache was used for real
    finally:
        os.umask(old_umask)

    created = sorted(
        p
        for p in home.rglob("*")
        if p not in before and ".git" not in p.relative_to(home).parts and "projects" not in p.parts
    )
    names = {p.relative_to(home).as_posix() for p in created}
    assert "memory/.cache/embeddings.sqlite" in names, sorted(names)
    assert "state/memoryd.log" in names
    assert any(n.endswith("index.sqlite") for n in names)
    loose = []
    for path in created:
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        if path.is_socket():
            want = 0o600
        if mode != want:
            loose.append(f"{path.relative_to(home)} {mode:o}")
    assert loose == [], loose

    gitignore = (root / ".gitignore").read_text()
    assert gitignore.startswith(user_lines)
    untracked = _git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    shown = sorted(line[3:] for line in untracked)
    assert shown, "git sees the memory"
    assert all(p.endswith(".md") or p == ".gitignore" for p in shown), shown
    assert "MEMORY.md" in shown
