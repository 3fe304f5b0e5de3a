"""One dream run (SPEC §8.4), input limits, undo, status and races, with real files.

The model is faked at the boundary: :class:`FakeChatModel` (queued answers, a gate to hold a
call in flight) and :class:`MergingModel` (a deterministic consolidation: the union of all
``##`` sections by heading) for the race tests, where answers depend on the input.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from memoryd.core.config import DreamConfig
from memoryd.core.dreaming import split_sections
from memoryd.errors import ModelError, ModelNotConfigured, NotFound
from memoryd.providers.llm import FakeChatModel
from memoryd.runtime.workspace.dreamer import JOURNAL, Dreamer, backups, read_journal
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store import files
from tests.runtime.conftest import Env, MemoryFactory

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]

OLD_MEMORY = """# Memory: project

## Build system
We build with hatch and publish wheels to the internal index; CI runs on every push.

## Database choice
SQLite with WAL mode was chosen over Postgres because the daemon is single user.
"""

NEW_MEMORY = """# Memory: project

## Build system
We build with hatch and publish wheels to the internal index; CI runs on every push.

## Database choice
SQLite with WAL mode was chosen over Postgres because the daemon is single user.

## Flaky watcher
inotify limits were exhausted; raising fs.inotify.max_user_watches fixed it.
"""


class MergingModel:
    """Consolidates by taking every ``##`` section once (first occurrence wins)."""

    model_id = "merging"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay  # each call waits a random time up to this: commits interleave
        self.calls = 0

    async def complete(self, system: str, user: str) -> str:
        self.calls += 1
        if self.delay:
            await anyio.sleep(random.uniform(0, self.delay))
        sections: dict[str, str] = {}
        for section in split_sections(user):
            if section.level == 2 and section.heading not in sections:
                body = [ln for ln in section.body.split("\n") if not ln.startswith("--- ")]
                sections[section.heading] = "\n".join(body).strip()
        return "# Memory\n\n" + "\n\n".join(f"## {h}\n{b}" for h, b in sections.items())


def dreamer(env: Env, model: Any, **config: Any) -> Dreamer:
    return Dreamer(env.workspace, DreamConfig(**config), model)


def old_logs(env: Env, count: int, *, start: int = 0) -> list[Path]:
    """``count`` session logs a day old, each with one unique section, oldest first."""
    paths = []
    for i in range(start, start + count):
        path = env.session(
            f"2025-01-{i + 1:02d}-topic-{i:08d}.md", f"## Fact {i}\nbody {i}: the inotify limits\n"
        )
        stamp = time.time() - 86400 + i  # distinct mtimes: a stable oldest-first order
        os.utime(path, (stamp, stamp))
        paths.append(path)
    return paths


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def journal(env: Env) -> list[dict[str, Any]]:
    return read_journal(env.workspace.history_dir)


def headings(text: str) -> list[str]:
    return [s.heading for s in split_sections(text) if s.level == 2]


@pytest.fixture
def memory_file(env: Env) -> Path:
    path = env.workspace.memory_file
    path.write_text(OLD_MEMORY, encoding="utf-8")
    return path


async def wait_for_call(model: FakeChatModel) -> None:
    with anyio.fail_after(5):
        while not model.prompts:  # noqa: ASYNC110 - the fake model signals no call start
            await anyio.sleep(0.005)


# ---------------------------------------------------------------------------- a successful run


async def test_a_dream_writes_backs_up_cleans_up_and_journals(env: Env, memory_file: Path) -> None:
    logs = old_logs(env, 3)
    recent = env.session("2025-01-09-live-99999999.md", "## Live\nstill being written\n")
    model = FakeChatModel([NEW_MEMORY])
    result = await dreamer(env, model).run(manual=True)

    assert result.outcome == "written", result
    names = (*(p.name for p in logs), recent.name)
    assert result.consumed == names
    # the prompt: MEMORY.md first, then the logs oldest first under separators
    user = model.prompts[0].user
    positions = [user.index("## Database choice")] + [
        user.index(f"--- Session: {n} ---") for n in names
    ]
    assert positions == sorted(positions)
    # the new file is complete, with a footer naming the consumed logs
    text = read(memory_file)
    assert text.startswith(NEW_MEMORY.rstrip())
    assert text.rstrip().endswith("-->")
    assert "<!-- dream " in text and all(n in text for n in names)
    # the old file is in .history/
    assert result.backup is not None
    assert (env.workspace.history_dir / result.backup).read_text() == OLD_MEMORY
    # consumed logs are gone, except the one modified in the last 5 minutes
    assert not any(p.exists() for p in logs)
    assert recent.exists()
    assert result.archived == tuple(logs)
    assert result.kept == (recent.name,)
    archive = env.workspace.history_dir / "sessions" / str(result.dream_id)
    assert sorted(p.name for p in archive.iterdir()) == sorted(p.name for p in logs)
    assert result.reindex_paths == (*logs, memory_file)
    # one journal line
    (entry,) = journal(env)
    assert entry["outcome"] == "written"
    assert entry["inputs"] == list(names)
    assert entry["backup"] == result.backup
    assert entry["chars"] == len(text)
    # the lock is released: body cleared, mtime = now (the new last consolidation)
    lock = env.workspace.lock_path
    assert read(lock) == ""
    assert abs(lock.stat().st_mtime - time.time()) < 60


async def test_an_index_drops_deleted_logs_and_serves_the_new_memory(
    env: Env, memory_file: Path, open_memory: MemoryFactory
) -> None:
    logs = old_logs(env, 2)
    recent = env.session("2025-01-09-live-99999999.md", "## Live\nzanzibar still writing\n")
    mem: WorkspaceMemory = await open_memory()
    await mem.reconcile()

    async def reindex(paths: Any) -> None:
        await mem._run(mem.index.sync_paths, list(paths))

    d = Dreamer(env.workspace, DreamConfig(), FakeChatModel([NEW_MEMORY]), reindex=reindex)
    assert (await d.run(manual=True)).outcome == "written"

    indexed = {f["path"] for f in await mem._run(mem.index.files)}
    rel = f"{env.workspace.key.dirname}/sessions/"
    assert not any(f"{rel}{p.name}" in indexed for p in logs)
    assert f"{rel}{recent.name}" in indexed
    hits = (await mem.search("inotify max_user_watches", count_access=False)).results
    assert hits and hits[0].source == "workspace" and hits[0].path.endswith("MEMORY.md")
    assert (await mem.search("zanzibar", count_access=False)).results[0].source == "session"


# ---------------------------------------------------------------------------- nothing stored


@pytest.mark.parametrize(
    ("answer", "outcome", "reason"),
    [
        ("", "nothing_to_store", "empty"),
        ("NO_REPLY", "nothing_to_store", "no_reply"),
        ("  no reply ", "nothing_to_store", "no_reply"),
        ("I merged everything nicely.", "rejected", "no_heading"),
    ],
)
async def test_unusable_answers_write_and_delete_nothing_and_advance_the_time(
    env: Env, memory_file: Path, answer: str, outcome: str, reason: str
) -> None:
    logs = old_logs(env, 2)
    result = await dreamer(env, FakeChatModel([answer])).run(manual=True)
    assert (result.outcome, result.reason) == (outcome, reason)
    assert read(memory_file) == OLD_MEMORY
    assert all(p.exists() for p in logs)
    assert backups(env.workspace.history_dir) == []
    lock = env.workspace.lock_path
    assert read(lock) == "" and abs(lock.stat().st_mtime - time.time()) < 60
    assert [e["outcome"] for e in journal(env)] == [outcome]


async def test_an_answer_losing_most_sections_is_refused_and_reported(
    env: Env, memory_file: Path
) -> None:
    logs = old_logs(env, 2)
    answer = "# Memory: project\n\n## Weather\nIt rained today.\n"
    result = await dreamer(env, FakeChatModel([answer])).run(manual=True)
    assert (result.outcome, result.reason) == ("refused", "loss")
    assert result.loss is not None
    assert result.loss.lost == ("Build system", "Database choice")
    assert result.to_dict()["loss"]["lost_fraction"] == 1.0
    assert read(memory_file) == OLD_MEMORY
    assert all(p.exists() for p in logs)
    assert journal(env)[-1]["loss"]["lost"] == ["Build system", "Database choice"]


# ---------------------------------------------------------------------------- failures


async def test_a_person_editing_memory_during_the_model_call_wins(
    env: Env, memory_file: Path
) -> None:
    logs = old_logs(env, 2)
    lock = env.workspace.lock_path
    write(lock, "")
    prior = float(int(time.time()) - 2 * 86400)  # whole seconds: exact on any file system
    os.utime(lock, (prior, prior))
    model = FakeChatModel([NEW_MEMORY])
    model.gate = anyio.Event()
    edited = OLD_MEMORY + "\n## Hand written\nA person added this meanwhile.\n"
    results = []

    async def run() -> None:
        results.append(await dreamer(env, model).run(manual=True))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for_call(model)
        # the lock is taken before the model call
        assert read(lock) == str(os.getpid())
        write(memory_file, edited)
        model.gate.set()

    (result,) = results
    assert (result.outcome, result.reason) == ("conflict", "edited_meanwhile")
    assert read(memory_file) == edited
    assert all(p.exists() for p in logs)
    assert read(lock) == "" and lock.stat().st_mtime == prior  # rolled back
    assert backups(env.workspace.history_dir) == []


async def test_a_write_failure_rolls_back_and_deletes_nothing(
    env: Env, memory_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = old_logs(env, 2)
    real_replace = files._fs.replace

    def failing_replace(src: str, dst: str) -> None:
        if dst.endswith("/MEMORY.md"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(files._fs, "replace", failing_replace)
    result = await dreamer(env, FakeChatModel([NEW_MEMORY])).run(manual=True)
    assert (result.outcome, result.reason) == ("failed", "write_error")
    assert "ENOSPC" in (result.error or "")
    assert read(memory_file) == OLD_MEMORY
    assert all(p.exists() for p in logs)
    assert not env.workspace.lock_path.exists()  # there was no lock before: deleted
    assert not [p for p in env.workspace.dir.iterdir() if p.name.startswith(".memoryd-tmp-")]
    assert journal(env)[-1]["outcome"] == "failed"


async def test_a_model_error_rolls_back(env: Env, memory_file: Path) -> None:
    logs = old_logs(env, 1)
    result = await dreamer(env, FakeChatModel([ModelError("timeout")])).run(manual=True)
    assert (result.outcome, result.reason) == ("failed", "model_error")
    assert read(memory_file) == OLD_MEMORY and logs[0].exists()
    assert not env.workspace.lock_path.exists()


async def test_cancellation_during_the_model_call_rolls_back(env: Env, memory_file: Path) -> None:
    old_logs(env, 1)
    model = FakeChatModel([NEW_MEMORY])
    model.gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: dreamer(env, model).run(manual=True))
        await wait_for_call(model)
        assert env.workspace.lock_path.exists()
        tg.cancel_scope.cancel()
    assert not env.workspace.lock_path.exists()
    assert read(memory_file) == OLD_MEMORY


async def test_a_log_consumed_by_another_dream_meanwhile_means_superseded(
    env: Env, memory_file: Path
) -> None:
    logs = old_logs(env, 2)
    model = FakeChatModel([NEW_MEMORY])
    model.gate = anyio.Event()
    results = []

    async def run() -> None:
        results.append(await dreamer(env, model).run(manual=True))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for_call(model)
        logs[0].unlink()
        model.gate.set()
    assert (results[0].outcome, results[0].reason) == ("conflict", "superseded")
    assert read(memory_file) == OLD_MEMORY and logs[1].exists()


async def test_a_log_changed_during_the_model_call_is_not_deleted(
    env: Env, memory_file: Path
) -> None:
    logs = old_logs(env, 2)
    model = FakeChatModel([NEW_MEMORY])
    model.gate = anyio.Event()
    results = []

    async def run() -> None:
        results.append(await dreamer(env, model).run(manual=True))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for_call(model)
        stamp = logs[0].stat().st_mtime
        write(logs[0], "## Fact 0\nbody 0\n\n## Appended later\nnot sent\n")
        os.utime(logs[0], (stamp, stamp))  # even with an old mtime
        model.gate.set()
    assert results[0].outcome == "written"
    assert logs[0].exists() and not logs[1].exists()
    assert results[0].kept == (logs[0].name,)


# ---------------------------------------------------------------------------- gates and lock


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


async def test_a_live_holder_means_skipped_lock_held(
    env: Env, memory_file: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    old_logs(env, 5)
    proc = sleeper
    write(env.workspace.lock_path, str(proc.pid))
    model = FakeChatModel([NEW_MEMORY])
    result = await dreamer(env, model).run(manual=True)
    assert (result.outcome, result.reason, result.holder) == ("skipped", "lock_held", proc.pid)
    assert model.calls == 0
    assert read(memory_file) == OLD_MEMORY


async def test_closed_gates_skip_without_a_model_call(env: Env, memory_file: Path) -> None:
    old_logs(env, 4)
    model = FakeChatModel([NEW_MEMORY])
    d = dreamer(env, model)
    result = await d.run(ending_session="anything")
    assert result.to_dict()["gates"] == {"outcome": "too_few_sessions", "count": 4, "min": 5}
    assert (await d.run(subagent=True, manual=True)).reason == "subagent"
    assert (await dreamer(env, model, enabled=False).run(manual=True)).reason == "disabled"
    assert model.calls == 0
    assert not env.workspace.lock_path.exists()
    # the session gate opens at five sessions; force runs even when disabled
    old_logs(env, 1, start=10)
    assert (await dreamer(env, model, enabled=False).run(force=True)).outcome == "written"


async def test_without_a_model_manual_dreams_fail_clearly(env: Env) -> None:
    old_logs(env, 5)
    with pytest.raises(ModelNotConfigured):
        await dreamer(env, None).run(manual=True)
    assert (await dreamer(env, None).run()).reason == "model_not_configured"


async def test_nothing_to_consolidate_leaves_no_lock(env: Env, memory_file: Path) -> None:
    model = FakeChatModel([NEW_MEMORY])
    assert (await dreamer(env, model).run(manual=True)).reason == "nothing_to_do"
    env.session("2025-01-01-blank-00000000.md", "\n\n")
    assert (await dreamer(env, model).run(manual=True)).reason == "nothing_to_do"
    assert model.calls == 0
    assert not env.workspace.lock_path.exists()


# ---------------------------------------------------------------------------- input limits


async def test_logs_that_do_not_fit_wait_for_a_later_run(env: Env) -> None:
    paths = [
        env.session(f"2025-01-0{i}-big-{i:08d}.md", f"## Topic {i}\n" + f"word{i} " * 60)
        for i in range(1, 4)
    ]
    for i, path in enumerate(paths):
        stamp = time.time() - 86400 + i
        os.utime(path, (stamp, stamp))
    model = MergingModel()
    d = dreamer(env, model, max_input_chars=1000)

    first = await d.run(manual=True)
    assert first.consumed == (paths[0].name, paths[1].name)
    assert first.waiting == (paths[2].name,)
    assert paths[2].exists() and not paths[0].exists() and not paths[1].exists()
    assert "Topic 3" not in read(env.workspace.memory_file)

    second = await d.run(manual=True)  # MEMORY.md leaves room for part of the last log
    assert second.outcome == "written" and second.consumed == (paths[2].name,)
    assert second.truncated == (paths[2].name,)
    assert not paths[2].exists()
    assert headings(read(env.workspace.memory_file)) == ["Topic 1", "Topic 2", "Topic 3"]


# ---------------------------------------------------------------------------- undo and history


async def test_undo_restores_the_previous_memory_and_names_the_consumed_logs(
    env: Env, memory_file: Path
) -> None:
    logs = old_logs(env, 2)
    d = dreamer(env, FakeChatModel([NEW_MEMORY]))
    assert (await d.run(manual=True)).outcome == "written"
    dreamed = read(memory_file)

    out = await d.undo()
    assert read(memory_file) == OLD_MEMORY
    assert out["logs_restored"] == [p.name for p in logs]
    assert all(p.exists() for p in logs)
    assert (env.workspace.history_dir / out["saved_current"]).read_text() == dreamed
    assert journal(env)[-1]["outcome"] == "undone"
    with pytest.raises(NotFound):
        await d.undo()


async def test_undo_walks_back_dream_by_dream(env: Env) -> None:
    d = dreamer(env, MergingModel())
    old_logs(env, 1)
    assert (await d.run(manual=True)).backup is None  # no MEMORY.md before the first dream
    first = read(env.workspace.memory_file)
    old_logs(env, 1, start=5)
    await d.run(manual=True)
    assert (await d.undo())["logs_restored"] == ["2025-01-06-topic-00000005.md"]
    assert read(env.workspace.memory_file) == first
    assert (await d.undo())["restored"] is None
    assert not env.workspace.memory_file.exists()


async def test_history_keeps_the_last_keep_history_backups(env: Env, memory_file: Path) -> None:
    d = dreamer(env, MergingModel(), keep_history=2)
    for i in range(4):
        old_logs(env, 1, start=i)
        assert (await d.run(manual=True)).outcome == "written"
    assert len(backups(env.workspace.history_dir)) == 2
    assert len(journal(env)) == 4


# ---------------------------------------------------------------------------- status


async def test_status_shows_gates_lock_and_the_last_run(env: Env, memory_file: Path) -> None:
    old_logs(env, 3)
    d = dreamer(env, FakeChatModel([NEW_MEMORY, "NO_REPLY"]))
    before = await d.status()
    assert before["gates"] == {
        "outcome": "too_few_sessions",
        "enabled": True,
        "hours_since_last": None,
        "min_hours": 24,
        "sessions_since_last": 3,
        "min_sessions": 5,
    }
    assert before["lock"]["exists"] is False
    assert before["last_consolidation"] is None and before["last_run"] is None

    await d.run(manual=True)
    after = await d.status()
    assert after["gates"]["outcome"] == "too_soon"
    assert after["gates"]["hours_since_last"] == 0
    assert after["lock"]["holder_pid"] is None and after["lock"]["held"] is False
    # The lock's mtime (what the time gate reads) is set when the lock is released, just
    # after the journal line: the same moment, give or take a second boundary.
    shown = datetime.fromisoformat(after["last_consolidation"].replace("Z", "+00:00"))
    logged = datetime.fromisoformat(journal(env)[-1]["time"].replace("Z", "+00:00"))
    assert abs((shown - logged).total_seconds()) <= 2
    assert after["last_run"]["outcome"] == "written"


# ---------------------------------------------------------------------------- idempotence, races


def check_invariants(env: Env, written: set[str]) -> None:
    """No section duplicated in MEMORY.md; every section ever written is somewhere."""
    memory = env.workspace.memory_file
    found = headings(read(memory)) if memory.exists() else []
    assert len(found) == len(set(found)), f"duplicated sections: {found}"
    remaining = set(found)
    for log in env.workspace.sessions_dir.glob("*.md"):
        remaining.update(headings(read(log)))
    assert written <= remaining, f"lost: {written - remaining}"


async def test_running_twice_on_the_same_material_changes_nothing(env: Env) -> None:
    old_logs(env, 3)
    d = dreamer(env, MergingModel())
    assert (await d.run(manual=True)).outcome == "written"
    text = read(env.workspace.memory_file)
    assert (await d.run(manual=True)).reason == "nothing_to_do"
    assert read(env.workspace.memory_file) == text


async def test_two_dreamers_in_one_process_race_safely(env: Env) -> None:
    written: set[str] = set()
    outcomes: list[str] = []
    first, second = dreamer(env, MergingModel(0.01)), dreamer(env, MergingModel(0.01))
    for round_ in range(10):
        old_logs(env, 2, start=2 * round_)
        written |= {f"Fact {2 * round_}", f"Fact {2 * round_ + 1}"}

        async def run(d: Dreamer) -> None:
            outcomes.append((await d.run(manual=True)).outcome)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, first)
            tg.start_soon(run, second)
        check_invariants(env, written)
    assert len(outcomes) == 20 and "written" in outcomes
    assert set(headings(read(env.workspace.memory_file))) == written


WORKER = """
import json, sys
from pathlib import Path
import anyio
from memoryd.core.config import DreamConfig
from memoryd.runtime.workspace.dreamer import Dreamer
from memoryd.store.layout import resolve_workspace
from tests.runtime.test_dreamer import MergingModel

ws = resolve_workspace(sys.argv[2], Path(sys.argv[1]))
dreamer = Dreamer(ws, DreamConfig(stale_lock_secs=float(sys.argv[3])), MergingModel(0.03))
print("RESULT ready", flush=True)
for line in sys.stdin:
    try:
        result = anyio.run(lambda: dreamer.run(manual=True))
        print("RESULT", json.dumps(result.to_dict()), flush=True)
    except Exception as exc:
        print("RESULT", json.dumps({"outcome": "crash", "error": repr(exc)}), flush=True)
"""


@dataclass
class Worker:
    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    pump: threading.Thread | None = None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 20.0) -> str:
        """The worker's next ``RESULT`` line (its log lines are skipped)."""
        while True:
            line = self.lines.get(timeout=timeout)
            if line.startswith("RESULT "):
                return line.removeprefix("RESULT ").strip()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


@pytest.fixture(params=[3600.0, 1e-6], ids=["lock", "lock_always_stale"])
def workers(env: Env, request: pytest.FixtureRequest) -> Iterator[list[Worker]]:
    """Two processes running the dream code on one workspace. With ``lock_always_stale``
    every lock is reclaimed at once, so both usually run: only idempotence protects."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    started: list[Worker] = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(env.root), str(env.project), str(request.param)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=environment,
            )
            worker = Worker(proc, queue.Queue())
            assert proc.stdout is not None
            worker.pump = threading.Thread(target=_pump, args=(proc.stdout, worker.lines))
            worker.pump.start()
            started.append(worker)
        for worker in started:
            assert worker.result() == "ready"
        yield started
    finally:
        for worker in started:
            worker.proc.kill()
            worker.proc.wait()
            if worker.pump is not None:
                worker.pump.join(timeout=10)
            for stream in (worker.proc.stdin, worker.proc.stdout):
                if stream is not None:
                    stream.close()


def test_two_processes_racing_on_one_workspace_lose_and_duplicate_nothing(
    env: Env, workers: list[Worker]
) -> None:
    old_logs(env, 2)
    written = {"Fact 0", "Fact 1"}
    outcomes: list[str] = []
    for round_ in range(1, 11):
        for worker in workers:
            worker.send("go")
        # new logs arrive while the two dream: they may see different material
        time.sleep(random.uniform(0, 0.02))
        old_logs(env, 2, start=2 * round_)
        written |= {f"Fact {2 * round_}", f"Fact {2 * round_ + 1}"}
        for worker in workers:
            result = json.loads(worker.result())
            assert result["outcome"] != "crash", result
            outcomes.append(f"{result['outcome']}:{result['reason']}")
        check_invariants(env, written)
    assert len(outcomes) == 20
    assert any(o.startswith("written") for o in outcomes)
    # whatever was left waiting is consumed by one more dream
    anyio.run(lambda: dreamer(env, MergingModel()).run(manual=True))
    assert set(headings(read(env.workspace.memory_file))) == written
    assert not list(env.workspace.sessions_dir.glob("*.md"))
    assert all(json.loads(line) for line in read(env.workspace.history_dir / JOURNAL).splitlines())
