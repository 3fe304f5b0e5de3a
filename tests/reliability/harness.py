"""Workload driver and invariant checker for the reliability suite (SPEC §15, issue 9).

- :class:`Ledger`: what the daemon *acknowledged* — remembered notes, journaled messages,
  written flushes, closed sessions — and every unexpected error a client saw.
- :func:`responder`: the fake model's answers. A flush answers ``## Flush <sid> through
  <n>`` for the newest message of the window; a dream keeps every distinct ``##`` section of
  its input once (a model that merges exact duplicates and never drops anything).
- :class:`Workload`: client threads (sync :class:`~memoryd.client.Client`, one per thread)
  driving a daemon with a seeded mix of session appends, usage reports, flushes, closes,
  remembers (workspace and global), searches, dreams (that archive the hour-old logs the
  dream thread writes) and undos (that bring them back, or are refused when a note was
  remembered since), until :meth:`Workload.stop` or the daemon dies. :func:`editor_script`
  is another process editing and deleting session logs.
- :class:`Checker`: the invariants, on disk (daemon stopped) and through a live daemon;
  every acknowledged flush and every old log's text is in ``MEMORY.md``, a live log or
  ``.history/`` (a backup or an archived log) after every kill — data lost 0.

Notes, flushes and messages carry unique tokens (``n<cycle>x<k>``, ``<sid> through <n>``)
so that any half-written section, lost write or stale index hit is visible by text search.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.client import Client
from memoryd.errors import DaemonNotRunning, MemorydError
from memoryd.store.files import TEMP_PREFIX
from memoryd.store.journal import load_all
from memoryd.store.layout import Workspace, resolve_workspace
from tests.support.fake_llm import DREAM_MARK, Prompt

Step = Callable[[Client, Path, random.Random], None]
#: Codes a client may see while the daemon is being killed or has just restarted.
DYING = frozenset({"daemon_not_running"})
MESSAGE = re.compile(r"Working note (\S+) number (\d+)\b")
SEPARATOR = re.compile(r"^--- (?:MEMORY\.md|Session: .*) ---$")
NOTE_HEAD = re.compile(r"^## Note (n\d+x\d+)$", re.MULTILINE)
FLUSH_HEAD = re.compile(r"^## Flush (\S+) through (\d+)$", re.MULTILINE)


# --------------------------------------------------------------------------- the fake model


def flush_answer(prompt: Prompt) -> str:
    found = [(int(n), sid) for sid, n in MESSAGE.findall(prompt.user)]
    if not found:
        return "NO_REPLY"
    n, sid = max(found)
    return f"## Flush {sid} through {n}\n\nKept {sid} {n} done-{sid}-{n}.\n"


def dream_answer(prompt: Prompt) -> str:
    """Every distinct ``##`` section of the input once, in order; comments dropped."""
    preamble: list[str] = []
    sections: list[list[str]] = []
    for line in prompt.user.splitlines():
        if SEPARATOR.match(line) or line.startswith("<!--"):
            continue
        if line.startswith("## "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            preamble.append(line)
    seen: set[str] = set()
    out = ["\n".join(preamble).strip()]
    for section in sections:
        text = "\n".join(section).strip()
        if text not in seen:
            seen.add(text)
            out.append(text)
    return "\n\n".join(part for part in out if part) + "\n"


def responder(prompt: Prompt) -> str:
    return dream_answer(prompt) if DREAM_MARK in prompt.system else flush_answer(prompt)


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """Acknowledged writes and unexpected errors (thread-safe)."""

    notes: dict[str, tuple[str, str]] = field(default_factory=dict)  # token → (workspace, scope)
    messages: dict[str, list[str]] = field(default_factory=dict)  # sid → acked contents
    session_ws: dict[str, str] = field(default_factory=dict)
    open_sessions: set[str] = field(default_factory=set)
    closing: set[str] = field(default_factory=set)  # close sent, not (yet) acknowledged
    closed: set[str] = field(default_factory=set)
    flushes: list[tuple[str, str, str]] = field(default_factory=list)  # (heading, path, ws)
    old_logs: dict[str, str] = field(default_factory=dict)  # token → ws of an aged log written
    dreams_written: int = 0
    dream_outcomes: dict[str, int] = field(default_factory=dict)
    undos: int = 0
    undos_refused: int = 0
    errors: list[str] = field(default_factory=list)
    ops: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


# --------------------------------------------------------------------------- workload


class Workload:
    """Client threads driving one daemon (see the module docstring)."""

    def __init__(
        self,
        socket: Path,
        workspaces: list[Path],
        ledger: Ledger,
        rng: random.Random,
        cycle: int,
        *,
        threads_per_workspace: int = 2,
        dreams: bool = True,
        memory_root: Path | None = None,
    ) -> None:
        self.socket = socket
        self.memory_root = memory_root or socket.parent.parent / "memory"  # $HOME/run/…
        self.workspaces = workspaces
        self.ledger = ledger
        self.cycle = cycle
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counter = 0
        self._counter_lock = threading.Lock()
        for i, ws in enumerate(workspaces):
            for j in range(threads_per_workspace):
                seed = rng.randrange(1 << 30)
                kind = self._sessions if j == 0 else self._remembers
                self._threads.append(threading.Thread(target=self._loop, args=(kind, ws, seed)))
            if dreams and i == 0:
                seed = rng.randrange(1 << 30)
                self._threads.append(
                    threading.Thread(target=self._loop, args=(self._dreams, ws, seed))
                )

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
            assert not t.is_alive(), "a workload thread did not stop"

    def _token(self) -> str:
        with self._counter_lock:
            self._counter += 1
            return f"n{self.cycle}x{self._counter}"

    def _loop(self, body: Step, ws: Path, seed: int) -> None:
        rng = random.Random(seed)
        with Client(self.socket, timeout=20.0) as client:
            while not self._stop.is_set():
                try:
                    body(client, ws, rng)
                except DaemonNotRunning:
                    return  # killed: whatever was in flight is unacknowledged
                except MemorydError as exc:
                    if exc.code in DYING:
                        return
                    self.ledger.error(f"{body.__name__}: {exc.code}: {exc}")
                except (TimeoutError, AssertionError) as exc:
                    self.ledger.error(f"{body.__name__}: {type(exc).__name__}: {exc}")
                    return

    # one step of each kind of client ----------------------------------------------------

    def _remembers(self, client: Client, ws: Path, rng: random.Random) -> None:
        token = self._token()
        scope = "global" if rng.random() < 0.15 else "workspace"
        text = f"Note {token}\n\nDetail {token}: keep the cache warm; complete-{token}."
        client.call("memory.remember", workspace=str(ws), text=text, scope=scope)
        with self.ledger.lock:
            self.ledger.notes[token] = (str(ws), scope)
            self.ledger.ops += 1
        if rng.random() < 0.3:
            client.call("memory.search", workspace=str(ws), query=f"cache {token}")

    def _session_for(self, client: Client, ws: Path, rng: random.Random) -> str:
        with self.ledger.lock:
            mine = [s for s in self.ledger.open_sessions if self.ledger.session_ws[s] == str(ws)]
        if mine:
            sid = mine[0]
        else:
            sid = f"s{self.cycle}w{rng.randrange(1 << 20):05x}"
            with self.ledger.lock:
                self.ledger.session_ws[sid] = str(ws)
                self.ledger.messages.setdefault(sid, [])
        out = client.call("session.open", workspace=str(ws), session_id=sid)
        with self.ledger.lock:
            self.ledger.open_sessions.add(sid)
            self.ledger.closing.discard(sid)
            self.ledger.ops += 1
        assert out["messages"] >= len(self.ledger.messages[sid]), (sid, out)
        return sid

    def _sessions(self, client: Client, ws: Path, rng: random.Random) -> None:
        sid = self._session_for(client, ws, rng)
        for _ in range(rng.randint(3, 8)):
            if self._stop.is_set():
                return
            n = len(self.ledger.messages[sid])
            role = "user" if n % 2 == 0 else "assistant"
            content = f"Working note {sid} number {n}: the parser handles case {n} now."
            client.call(
                "session.append",
                session_id=sid,
                messages=[{"role": role, "content": content}],
            )
            with self.ledger.lock:
                self.ledger.messages[sid].append(content)
                self.ledger.ops += 1
            roll = rng.random()
            if roll < 0.2:
                out = client.call("session.flush", session_id=sid)
                self._flushed(sid, ws, out)
            elif roll < 0.3:
                out = client.call(
                    "session.usage",
                    session_id=sid,
                    tokens=95_000,
                    context_window=100_000,
                    threshold_percent=90.0,
                    compaction_count=n,
                )
                if out.get("flushed"):
                    self._flushed(sid, ws, out)
        if rng.random() < 0.25:
            with self.ledger.lock:
                self.ledger.closing.add(sid)
            client.call("session.close", session_id=sid)
            with self.ledger.lock:
                self.ledger.open_sessions.discard(sid)
                self.ledger.closing.discard(sid)
                self.ledger.closed.add(sid)
                self.ledger.ops += 1

    def _flushed(self, sid: str, ws: Path, out: dict[str, Any]) -> None:
        if out.get("outcome") != "written":
            return
        n = len(self.ledger.messages[sid]) - 1
        with self.ledger.lock:
            self.ledger.flushes.append((f"## Flush {sid} through {n}", out["path"], str(ws)))
            self.ledger.ops += 1

    def _dreams(self, client: Client, ws: Path, rng: random.Random) -> None:
        roll = rng.random()
        if roll < 0.2:
            self._old_log(ws)
        elif roll < 0.45:
            out = client.call("dream.run", workspace=str(ws), force=True)
            if out["outcome"] == "failed":
                self.ledger.error(f"dream failed: {out}")
            with self.ledger.lock:
                key = f"{out['outcome']}:{out.get('reason')}"
                self.ledger.dream_outcomes[key] = self.ledger.dream_outcomes.get(key, 0) + 1
                self.ledger.dreams_written += out["outcome"] == "written"
        elif roll < 0.6:
            try:
                client.call("dream.undo", workspace=str(ws))
                undone = True
            except MemorydError as exc:  # MEMORY.md changed since (a note), or nothing to undo
                if exc.code not in ("memory_changed", "not_found"):
                    raise
                undone = False
            with self.ledger.lock:
                self.ledger.undos += undone
                self.ledger.undos_refused += not undone
        else:
            client.call("memory.search", workspace=str(ws), query="parser handles case")
        with self.ledger.lock:
            self.ledger.ops += 1
        time.sleep(rng.uniform(0.0, 0.05))

    def _old_log(self, ws: Path) -> None:
        """A session log an hour old (a dream archives it: it is not being written)."""
        token = self._token().replace("n", "o", 1)
        wsd = resolve_workspace(ws, self.memory_root)
        path = wsd.sessions_dir / f"2025-03-01-old-{token}.md"
        wsd.sessions_dir.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            handle.write(f"## Old log {token}\n\nAn old session found {token}-whole.\n")
            handle.flush()
            os.fsync(handle.fileno())
        stamp = time.time() - 3600
        os.utime(path, (stamp, stamp))
        with self.ledger.lock:
            self.ledger.old_logs[token] = str(ws)


# --------------------------------------------------------------------------- another process


EDITOR = r"""
import os, random, sys, time
sessions, tokens_file, seed, cycle = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(seed)
os.makedirs(sessions, exist_ok=True)
k = 0
while True:
    names = sorted(n for n in os.listdir(sessions) if "-editor-" in n and n.endswith(".md"))
    roll = rng.random()
    if names and roll < 0.3:
        os.unlink(os.path.join(sessions, rng.choice(names)))
    elif names and roll < 0.6:
        k += 1
        token = f"ed{cycle}e{k}"
        with open(tokens_file, "a") as f:
            f.write(token + "\n"); f.flush(); os.fsync(f.fileno())
        with open(os.path.join(sessions, rng.choice(names)), "a") as f:
            f.write(f"\n## Edit {token}\n\nAn editor added {token}.\n")
    else:
        k += 1
        token = f"ed{cycle}e{k}"
        with open(tokens_file, "a") as f:
            f.write(token + "\n"); f.flush(); os.fsync(f.fileno())
        name = f"2025-02-{rng.randint(1, 28):02d}-editor-{token}.md"
        with open(os.path.join(sessions, name), "w") as f:
            f.write(f"## Editor {token}\n\nAn editor wrote {token}.\n")
    time.sleep(rng.uniform(0.01, 0.08))
"""


def editor_script(sessions_dir: Path, tokens_file: Path, seed: int, cycle: int) -> list[str]:
    """The command line of the editing process (the caller starts and kills it)."""
    args = [str(sessions_dir), str(tokens_file), str(seed), str(cycle)]
    return [sys.executable, "-c", EDITOR, *args]


# --------------------------------------------------------------------------- invariants


def memory_files(root: Path) -> list[Path]:
    """Every markdown memory file under the root (what an index may hold)."""
    found = [p for p in (root / "MEMORY.md", root / "experience.md") if p.is_file()]
    for ws_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (ws_dir / "MEMORY.md").is_file():
            found.append(ws_dir / "MEMORY.md")
        found.extend(sorted(p for p in (ws_dir / "sessions").glob("*.md") if p.is_file()))
    return found


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


@dataclass
class Checker:
    """SPEC §15's invariants over one memory root (see the module docstring)."""

    root: Path
    ledger: Ledger
    tokens_file: Path | None = None
    editor_workspace: str | None = None
    searches: int = 0
    checks: int = 0
    temp_files_left: int = 0  # by writes a SIGKILL interrupted (harmless, never indexed)
    lost_checks: int = 0  # old logs found in MEMORY.md, a live log or .history/ after a kill
    archived: int = 0  # archived logs in .history/sessions/ (most seen in one workspace)
    undos: int = 0  # undos of the check dream (logs restored, then consumed again)

    def workspace(self, path: str) -> Workspace:
        return resolve_workspace(path, self.root)

    # on disk, daemon stopped -----------------------------------------------------------

    def on_disk(self) -> None:
        """No half-written file, every acknowledged note, message and flush on disk."""
        texts: dict[Path, str] = {}
        for path in memory_files(self.root):
            data = path.read_bytes()
            texts[path] = data.decode("utf-8")  # strict: a torn multi-byte char fails here
            self._whole_sections(path, texts[path])
        temps = list(self.root.rglob(f"{TEMP_PREFIX}*"))
        for temp in temps:
            assert not temp.name.endswith(".md"), f"a temp file looks like a memory file: {temp}"
        self.temp_files_left = len(temps)
        with self.ledger.lock:
            notes = dict(self.ledger.notes)
            flushes = list(self.ledger.flushes)
            open_sessions = set(self.ledger.open_sessions)
            messages = {sid: list(m) for sid, m in self.ledger.messages.items()}
            session_ws = dict(self.ledger.session_ws)
            closed = set(self.ledger.closed)
        for token, (ws_path, scope) in notes.items():
            target = self.root / "MEMORY.md" if scope == "global" else None
            target = target or self.workspace(ws_path).memory_file
            assert f"## Note {token}\n" in texts.get(target, ""), f"note {token} lost ({target})"
            self.checks += 1
        kept = self._kept_texts()
        for heading, rel, ws_path in flushes:
            memory = texts.get(self.workspace(ws_path).memory_file, "")
            where = texts.get(self.root / rel, "") + memory + kept[ws_path]
            assert heading in where, f"acknowledged flush {heading!r} lost ({rel})"
            self.checks += 1
        with self.ledger.lock:
            old_logs = dict(self.ledger.old_logs)
        for token, ws_path in old_logs.items():
            # in MEMORY.md, a live log or .history/ (a backup or an archived log): never lost
            where = texts.get(self.workspace(ws_path).memory_file, "") + kept[ws_path]
            assert f"## Old log {token}" in where, f"old log {token} lost"
            self.lost_checks += 1
        journals: dict[str, list[str]] = {}
        for ws_path in {session_ws[s] for s in messages}:
            for state in load_all(self.workspace(ws_path).live_dir):
                if not state.closed:
                    journals[state.header.session_id] = [m.message.content for m in state.messages]
        for sid, acked in messages.items():
            if sid in closed or not acked or sid not in open_sessions:
                continue
            if sid not in journals and sid in self.ledger.closing:
                # The close was in flight when the daemon died and it finished: the
                # summary is written (when due) and the session is closed, unacknowledged.
                with self.ledger.lock:
                    self.ledger.open_sessions.discard(sid)
                    self.ledger.closing.discard(sid)
                    self.ledger.closed.add(sid)
                continue
            assert sid in journals, f"the journal of open session {sid} is gone"
            assert _is_subsequence(acked, journals[sid]), f"session {sid} lost messages"
            self.checks += len(acked)

    def _kept_texts(self) -> dict[str, str]:
        """Per workspace path: its live logs and everything under its ``.history/``."""
        out: dict[str, str] = {}
        with self.ledger.lock:
            paths = {ws for ws, _ in self.ledger.notes.values()} | set(
                self.ledger.session_ws.values()
            )
            paths |= set(self.ledger.old_logs.values())
        for ws_path in paths:
            wsd = self.workspace(ws_path)
            files = [*wsd.sessions_dir.glob("*.md"), *wsd.history_dir.rglob("*.md")]
            out[ws_path] = "".join(read(p) for p in files)
            self.archived = max(self.archived, len(list(wsd.history_dir.glob("sessions/*/*.md"))))
        return out

    def _whole_sections(self, path: Path, text: str) -> None:
        for token in NOTE_HEAD.findall(text):
            assert f"complete-{token}." in text, f"half-written note {token} in {path}"
        for sid, n in FLUSH_HEAD.findall(text):
            assert f"done-{sid}-{n}." in text, f"half-written flush {sid}/{n} in {path}"

    # through a live daemon ------------------------------------------------------------

    def through_daemon(self, client: Client, sample: Iterable[str]) -> None:
        """Sessions resumed whole, the index agrees with the files, searches find notes."""
        with self.ledger.lock:
            open_sessions = sorted(self.ledger.open_sessions)
            workspaces = sorted({ws for ws, _ in self.ledger.notes.values()})
        for sid in open_sessions:
            ws = self.ledger.session_ws[sid]
            out = client.call("session.open", workspace=ws, session_id=sid)
            assert out["resumed"] is True, (sid, out)
            assert out["messages"] >= len(self.ledger.messages[sid]), (sid, out)
        for ws in workspaces:
            listed = {f["path"] for f in client.call("memory.files", workspace=ws)["files"]}
            wsd = self.workspace(ws)
            on_disk = {p.relative_to(self.root).as_posix() for p in memory_files(self.root)}
            own = {r for r in on_disk if "/" not in r or r.startswith(wsd.key.dirname + "/")}
            assert listed == own, f"index files {sorted(listed ^ own)} disagree with the disk"
        texts = {p: read(p) for p in memory_files(self.root)}
        for token in sample:
            ws, _ = self.ledger.notes[token]
            self._find(client, ws, token, texts)
        if self.editor_workspace is not None:
            for token in self._editor_tokens():
                self._find(client, self.editor_workspace, token, texts, required=False)

    def _editor_tokens(self) -> list[str]:
        if self.tokens_file is None or not self.tokens_file.exists():
            return []
        return self.tokens_file.read_text(encoding="utf-8").split()[-10:]

    def _find(
        self,
        client: Client,
        ws: str,
        token: str,
        texts: dict[Path, str],
        *,
        required: bool = True,
    ) -> None:
        found = client.call("memory.search", workspace=ws, query=token, max_results=10)
        self.searches += 1
        for hit in found["results"]:
            path = self.root / hit["path"]
            assert path.is_file(), f"search returned {hit['path']}, which is not on disk"
        word = re.compile(rf"\b{re.escape(token)}\b")
        holders = [r for r in found["results"] if word.search(texts[self.root / r["path"]])]
        wsd = self.workspace(ws)
        mine = (self.root, wsd.dir, wsd.sessions_dir)
        present = [p for p, text in texts.items() if p.parent in mine and word.search(text)]
        if required:
            assert present, f"acknowledged note {token} is not on disk"
        if present:
            assert holders, f"{token} is on disk in {present} but search does not find it"

    def dream_runs(self, client: Client, ws: str, n: int) -> None:
        """A dream can run: a fresh old log is consolidated into MEMORY.md."""
        wsd = self.workspace(ws)
        fact = f"Crash fact {n}"
        path = wsd.sessions_dir / f"2025-01-01-fact-c{n:07d}.md"
        path.write_text(f"## {fact}\n\nRecovered {n} complete.\n", encoding="utf-8")
        stamp = time.time() - 3600
        os.utime(path, (stamp, stamp))
        out = client.call("dream.run", workspace=ws, force=True)
        assert out["outcome"] == "written", out
        assert f"## {fact}" in read(wsd.memory_file)
        assert path.name in out["archived"] and not path.exists(), out
        if n % 2:  # undo it: the log comes back whole, then a dream takes it again
            undone = client.call("dream.undo", workspace=ws)
            assert path.name in undone["logs_restored"] and path.exists(), undone
            assert f"## {fact}" not in read(wsd.memory_file)
            self.undos += 1
            again = client.call("dream.run", workspace=ws, force=True)
            assert again["outcome"] == "written", again
            assert f"## {fact}" in read(wsd.memory_file) and not path.exists()
        status = client.call("dream.status", workspace=ws)
        assert status["lock"]["held"] is False, status


def _is_subsequence(wanted: list[str], have: list[str]) -> bool:
    it = iter(have)
    return all(any(x == y for y in it) for x in wanted)


def report(name: str, figures: dict[str, object]) -> None:
    """Add ``figures`` under ``name`` to the JSON file named by MDD_RELIABILITY_REPORT."""
    target = os.environ.get("MDD_RELIABILITY_REPORT")
    if not target:
        return
    path = Path(target)
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data[name] = figures
    path.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def dump(ledger: Ledger) -> str:
    return json.dumps({"notes": len(ledger.notes), "errors": ledger.errors[:5]})
