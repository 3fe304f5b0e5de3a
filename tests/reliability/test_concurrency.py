"""Concurrency (SPEC §1, §15, issue 9 item 5): many clients, three workspaces, one editor.

16 client threads (each its own connection) mix searches, remembers (workspace and global),
session appends and flushes (the fake model answers) on three workspaces of a daemon
process for ``MDD_CONCURRENCY_SECS`` (60 s; ``--slow`` runs 300 s) while another process
creates, appends to and deletes session logs in all three. Afterwards: not one error, every
remembered note is in its ``MEMORY.md`` exactly once and is found by search, every message
is in its session's journal, and the index lists exactly the files on disk.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest

from memoryd.client import Client
from memoryd.errors import MemorydError
from memoryd.store.journal import load_all
from memoryd.store.layout import resolve_workspace
from tests.reliability.harness import EDITOR, memory_files, report, responder
from tests.runtime.daemon_fixtures import (
    NO_EMBEDDINGS,
    DaemonProcess,
    home_fixture,  # noqa: F401 - the `home` fixture
    project,
    write_config,
)
from tests.support.fake_llm import FakeLLM

CLIENTS = 16
SECONDS = float(os.environ.get("MDD_CONCURRENCY_SECS") or 60)
CONFIG = NO_EMBEDDINGS + "[flush]\nidle_timeout_secs = 0\n[dream]\nenabled = false\n"


class Client16:
    """One client thread's loop (see the module docstring)."""

    def __init__(self, n: int, socket: Path, workspaces: list[str], stop: threading.Event) -> None:
        self.n = n
        self.socket = socket
        self.workspaces = workspaces
        self.stop = stop
        self.rng = random.Random(n)
        self.notes: dict[str, tuple[str, str]] = {}
        self.messages: list[str] = []
        self.session = f"conc-{n}"
        self.home_ws = workspaces[n % len(workspaces)]
        self.errors: list[str] = []
        self.ops = Counter[str]()

    def run(self) -> None:
        with Client(self.socket, timeout=30.0) as client:
            try:
                client.call("session.open", workspace=self.home_ws, session_id=self.session)
                while not self.stop.is_set():
                    self.step(client)
            except (MemorydError, OSError, AssertionError) as exc:
                self.errors.append(f"client {self.n}: {type(exc).__name__}: {exc}")

    def step(self, client: Client) -> None:
        roll = self.rng.random()
        ws = self.rng.choice(self.workspaces)
        if roll < 0.4:
            word = self.rng.choice(["cache", "parser", "editor", "build", f"c{self.n}t"])
            found = client.call("memory.search", workspace=ws, query=word, max_results=8)
            assert "results" in found
            self.ops["search"] += 1
        elif roll < 0.65:
            token = f"c{self.n}t{len(self.notes)}"
            scope = "global" if self.rng.random() < 0.1 else "workspace"
            text = f"Note {token}\n\nThe cache for {token} is warm."
            out = client.call("memory.remember", workspace=ws, text=text, scope=scope)
            assert out["written"] is True and out.get("indexed", True), out
            self.notes[token] = (ws, scope)
            self.ops["remember"] += 1
        elif roll < 0.9:
            content = f"Working note {self.session} number {len(self.messages)}: parser step."
            role = "user" if len(self.messages) % 2 == 0 else "assistant"
            client.call(
                "session.append",
                session_id=self.session,
                messages=[{"role": role, "content": content}],
            )
            self.messages.append(content)
            self.ops["append"] += 1
        else:
            out = client.call("session.flush", session_id=self.session)
            assert out["outcome"] in ("written", "nothing_to_store"), out
            self.ops["flush"] += 1


def run_concurrently(home: Path, seconds: float) -> dict[str, object]:
    write_config(home, CONFIG)
    paths = [str(project(home, name)) for name in ("one", "two", "three")]
    root = home / "memory"
    with FakeLLM(respond=responder) as llm, ExitStack() as cleanup:
        daemon = DaemonProcess(home, env=llm.env(), name="concurrency").start()
        cleanup.callback(daemon.kill)  # a failed check leaves no daemon behind
        stop = threading.Event()
        clients = [Client16(n, daemon.socket, paths, stop) for n in range(CLIENTS)]
        threads = [threading.Thread(target=c.run) for c in clients]
        editors = []
        try:
            for i, path in enumerate(paths):
                sessions = resolve_workspace(path, root).sessions_dir
                args = [str(sessions), str(home / f"editor{i}.txt"), str(i), str(i)]
                editors.append(subprocess.Popen([sys.executable, "-c", EDITOR, *args]))
            for t in threads:
                t.start()
            time.sleep(seconds)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
            for editor in editors:
                editor.kill()
                editor.wait(10)
        errors = [e for c in clients for e in c.errors]
        assert not errors, errors[:10]
        assert daemon.running, daemon.stderr()[-3000:]
        notes = {t: where for c in clients for t, where in c.notes.items()}
        with daemon.client() as client:
            for path in paths:  # the first request syncs what the editors did last
                listed = {f["path"] for f in client.call("memory.files", workspace=path)["files"]}
                own = resolve_workspace(path, root).key.dirname
                on_disk = {
                    p.relative_to(root).as_posix()
                    for p in memory_files(root)
                    if p.parent == root or p.relative_to(root).parts[0] == own
                }
                assert listed == on_disk, sorted(listed ^ on_disk)
            for token, (path, scope) in notes.items():
                target = root / "MEMORY.md" if scope == "global" else None
                target = target or resolve_workspace(path, root).memory_file
                count = len(re.findall(rf"^## Note {token}$", target.read_text(), re.MULTILINE))
                assert count == 1, f"note {token} is in {target} {count} times"
            rng = random.Random(7)
            for token in rng.sample(sorted(notes), min(100, len(notes))):
                path, scope = notes[token]
                hits = client.call("memory.search", workspace=path, query=token)["results"]
                assert any(token in h["snippet"] for h in hits), (token, hits)
        for c in clients:
            ws = resolve_workspace(c.home_ws, root)
            (state,) = [s for s in load_all(ws.live_dir) if s.header.session_id == c.session]
            assert [m.message.content for m in state.messages] == c.messages
        daemon.kill()
    ops = sum((c.ops for c in clients), Counter[str]())
    return {
        "clients": CLIENTS,
        "workspaces": len(paths),
        "seconds": seconds,
        "requests": sum(ops.values()),
        **{f"{k}_requests": v for k, v in sorted(ops.items())},
        "notes": len(notes),
        "errors": 0,
        "notes_lost_or_duplicated": 0,
        "model_calls": llm.requests,
    }


@pytest.mark.timeout(SECONDS + 120)
def test_sixteen_clients_and_an_editor_make_no_errors_and_lose_nothing(home: Path) -> None:
    figures = run_concurrently(home, SECONDS)
    report("concurrency", figures)
    assert figures["notes"] and figures["requests"], figures


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sixteen_clients_for_five_minutes(home: Path) -> None:
    report("concurrency_slow", run_concurrently(home, 300))
